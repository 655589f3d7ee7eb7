"""attnlab/train/losses.py against the textbook form (log_softmax, take_along_axis, argmax), a
float64 numpy reference of the smoothed cross-entropy, and its gradient derived by hand."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlab.train import losses

B, T, V = 3, 5, 11


def _textbook(logits, target, ls):
  logp = jax.nn.log_softmax(logits)
  nll = -jnp.take_along_axis(logp, target[..., None], axis=-1)[..., 0]
  off = ls / (logits.shape[-1] - 1)
  objective = (1.0 - ls - off) * nll - off * jnp.sum(logp, -1) if ls > 0 else nll
  correct = (jnp.argmax(logits, -1) == target).astype(jnp.float32)
  return objective, nll, correct


def _data(seed, scale=3.0):
  rng = np.random.default_rng(seed)
  logits = jnp.asarray(scale * rng.standard_normal((B, T, V)), jnp.float32)
  target = jnp.asarray(rng.integers(0, V, (B, T)), jnp.int32)
  return logits, target


@pytest.mark.parametrize('ls', [0.0, 0.1, 0.3])
def test_values_equal_the_textbook_form_and_float64(ls):
  logits, target = _data(0)
  got = losses.token_cross_entropy(logits, target, ls)
  want = _textbook(logits, target, ls)
  for g, w in zip(got, want, strict=True):
    np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
  # float64 by hand: smoothed target distribution q, objective = -sum_v q_v log p_v.
  x = np.asarray(logits, np.float64)
  logp = x - np.log(np.exp(x).sum(-1, keepdims=True))
  q = np.full(x.shape, ls / (V - 1))
  np.put_along_axis(q, np.asarray(target)[..., None], 1.0 - ls, axis=-1)
  np.testing.assert_allclose(got[0], -(q * logp).sum(-1), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize('ls', [0.0, 0.2])
def test_gradient_equals_the_hand_derived_one(ls):
  logits, target = _data(1)
  weight = jnp.asarray(np.random.default_rng(2).uniform(size=(B, T)), jnp.float32)
  ours = lambda x: jnp.sum(losses.token_cross_entropy(x, target, ls)[0] * weight)
  textbook = lambda x: jnp.sum(_textbook(x, target, ls)[0] * weight)
  np.testing.assert_allclose(jax.jit(jax.grad(ours))(logits), jax.grad(textbook)(logits),
                             rtol=1e-5, atol=1e-6)
  # By hand: d/dx = w (p - (1 - ls - off) onehot - off).
  p = jax.nn.softmax(logits)
  onehot = jax.nn.one_hot(target, V)
  off = ls / (V - 1)
  hand = weight[..., None] * (p - (1 - ls - off) * onehot - off)
  np.testing.assert_allclose(jax.grad(ours)(logits), hand, rtol=1e-5, atol=1e-6)


def test_correct_is_jnp_argmax_even_with_ties():
  # Row 0: the target ties an earlier class for the max (argmax takes the earlier: wrong).
  # Row 1: the target is the first of two tied maxima (right). Row 2: all equal, target 0.
  logits = jnp.asarray([[[1.0, 5.0, 5.0, 0.0]], [[0.0, 7.0, 2.0, 7.0]], [[2.0, 2.0, 2.0, 2.0]]])
  target = jnp.asarray([[2], [1], [0]], jnp.int32)
  _, _, correct = losses.token_cross_entropy(logits, target)
  want = (jnp.argmax(logits, -1) == target).astype(jnp.float32)
  np.testing.assert_array_equal(correct, want)
  assert correct.ravel().tolist() == [0.0, 1.0, 1.0]
  logits, target = _data(3, scale=0.5)
  rounded = jnp.round(logits)  # many ties
  np.testing.assert_array_equal(losses.token_cross_entropy(rounded, target)[2],
                                (jnp.argmax(rounded, -1) == target).astype(jnp.float32))


def test_nll_gradient_is_autodiffs_and_correct_has_none():
  logits, target = _data(4)
  nll_grad = jax.grad(lambda x: jnp.sum(losses.token_cross_entropy(x, target, 0.1)[1]))(logits)
  np.testing.assert_allclose(nll_grad, jax.grad(lambda x: jnp.sum(_textbook(x, target, 0.0)[1]))(
    logits), rtol=1e-5, atol=1e-6)
  correct_grad = jax.grad(lambda x: jnp.sum(losses.token_cross_entropy(x, target)[2]))(logits)
  assert not np.any(np.asarray(correct_grad))
