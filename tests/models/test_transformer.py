"""Transformer: cached decoding equals teacher forcing, causality, padding and sown attention."""

import functools
import math
import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from support.config_builders import model_config

from attnlab.config.fields import ConfigError
from attnlab.models import factory, transformer
from attnlab.models.transformer import Transformer, sinusoidal_positions
from attnlab.tokens import BOS_ID, EOS_ID, PAD_ID

SRC_V, TGT_V, H = 11, 13, 16
SRC = jnp.array([[5, 6, 7, 8, 9, EOS_ID], [4, 10, EOS_ID, PAD_ID, PAD_ID, PAD_ID]])
TGT_IN = jnp.array([[BOS_ID, 5, 9, 4, 12], [BOS_ID, 7, 7, EOS_ID, PAD_ID]])


def _module(norm='pre', dtype='float32', dropout=0.0):
  config = model_config(
    kind='transformer',
    hidden_size=H,
    encoder_layers=1,
    decoder_layers=2,
    dropout=dropout,
    dtype=dtype,
    transformer=dict(num_heads=2, mlp_dim=32, norm=norm, max_length=12),
  )
  return Transformer(config, SRC_V, TGT_V)


@functools.cache
def _model(norm):
  model = _module(norm)
  return model, jax.jit(model.init)(_key(0), SRC, TGT_IN)


def _key(seed):
  # XLA's RngBitGenerator compiles far faster on CPU than threefry; the stream is irrelevant.
  return jax.random.key(seed, impl='rbg')


@functools.partial(jax.jit, static_argnums=0)
def _forward_with_intermediates(model, variables, src, tgt_in):
  return model.apply(variables, src, tgt_in, mutable=['intermediates'])


@functools.partial(jax.jit, static_argnums=0)
def _cached_decode(model, variables, src, tgt_in):
  """encode + a Python loop of decode_step over the teacher tokens."""
  memory = model.apply(variables, src, method=model.encode)
  carry = model.apply(variables, memory, tgt_in.shape[1], method=model.init_decode_carry)
  logits, attns = [], []
  for t in range(tgt_in.shape[1]):
    step = model.apply(variables, memory, tgt_in[:, t], carry, method=model.decode_step)
    logits_BxV, attn_BxS, carry = step
    logits.append(logits_BxV)
    attns.append(attn_BxS)
  return jnp.stack(logits, axis=1), jnp.stack(attns, axis=1), carry


def test_sinusoidal_positions_match_vaswani_formula():
  table = sinusoidal_positions(7, 6)
  for p in range(7):
    for i in range(3):
      angle = p / 10000 ** (2 * i / 6)
      np.testing.assert_allclose(table[p, 2 * i], np.sin(angle), rtol=1e-6, atol=1e-7)
      np.testing.assert_allclose(table[p, 2 * i + 1], np.cos(angle), rtol=1e-6, atol=1e-7)
  with pytest.raises(ValueError, match='even hidden_size'):
    sinusoidal_positions(4, 5)


@pytest.mark.slow
@pytest.mark.parametrize('norm', transformer.NORMS)
def test_cached_decode_steps_equal_teacher_forcing(norm):
  model, variables = _model(norm)
  logits, state = _forward_with_intermediates(model, variables, SRC, TGT_IN)
  assert logits.shape == (2, 5, TGT_V) and logits.dtype == jnp.float32
  step_logits, step_attn, carry = _cached_decode(model, variables, SRC, TGT_IN)
  np.testing.assert_allclose(step_logits, logits, rtol=1e-5, atol=1e-5)
  (cross,) = state['intermediates']['cross_attention']
  np.testing.assert_allclose(step_attn, cross, rtol=1e-5, atol=1e-6)
  # The weights the model reports are the shared attention module's own, averaged over heads.
  (heads,) = state['intermediates']['decoder_layers_1']['cross_attn']['attention_weights']
  np.testing.assert_allclose(cross, np.asarray(heads).mean(axis=1), rtol=1e-6, atol=1e-7)
  np.testing.assert_array_equal(carry['pos_B'], [5, 5])
  assert all(x.shape[0] == 2 for x in jax.tree.leaves(carry))


def _target_jacobian(model, variables):
  """d sum_{b,v} logits[b, t, v] / d (embedded target)[b, s, h], via an interceptor: TxBxTxH."""

  def logits_with_offset(offset_BxTxH):
    def add_offset(next_fun, args, kwargs, context):
      out = next_fun(*args, **kwargs)
      if context.module.name == 'tgt_embed' and context.method_name == '__call__':
        out = out + offset_BxTxH
      return out

    with nn.intercept_methods(add_offset):
      return model.apply(variables, SRC, TGT_IN)

  offset = jnp.zeros(TGT_IN.shape + (H,))
  return jax.jit(jax.jacrev(lambda o: logits_with_offset(o).sum(axis=(0, 2))))(offset)


@pytest.mark.parametrize('norm', transformer.NORMS)
def test_logit_t_depends_only_on_targets_up_to_t(norm):
  model, variables = _model(norm)
  jac_TxBxTxH = np.asarray(_target_jacobian(model, variables))
  influence_TxT = np.abs(jac_TxBxTxH).sum(axis=(1, 3))
  T = TGT_IN.shape[1]
  future = np.triu(np.ones((T, T), bool), k=1)
  np.testing.assert_array_equal(influence_TxT[future], 0.0)
  assert np.all(influence_TxT[~future] > 0), 'the interceptor must reach the embeddings'


@pytest.mark.slow
@pytest.mark.parametrize('norm', transformer.NORMS)
def test_source_padding_changes_nothing(norm):
  model, variables = _model(norm)
  apply = jax.jit(model.apply)
  alone = apply(variables, SRC[1:, :3], TGT_IN[1:])
  padded = apply(variables, SRC[1:], TGT_IN[1:])
  np.testing.assert_allclose(padded, alone, rtol=1e-5, atol=1e-6)


def test_sown_cross_attention_is_zero_on_padded_keys():
  model, variables = _model('pre')
  _, state = _forward_with_intermediates(model, variables, SRC, TGT_IN)
  (cross_BxTxS,) = state['intermediates']['cross_attention']
  assert cross_BxTxS.shape == (2, 5, 6)
  np.testing.assert_array_equal(cross_BxTxS[1, :, 3:], 0.0)
  assert np.all(np.asarray(cross_BxTxS[1, :, :3]) > 0)
  np.testing.assert_allclose(cross_BxTxS.sum(-1), 1.0, rtol=1e-6)


@pytest.mark.slow
def test_dropout_bfloat16_and_length_errors():
  plain, variables = _model('pre')  # dropout adds no parameters
  evaluate, _ = _forward_with_intermediates(plain, variables, SRC, TGT_IN)
  model = _module(dropout=0.3)
  apply = jax.jit(model.apply, static_argnames='train')
  train_a = apply(variables, SRC, TGT_IN, train=True, rngs={'dropout': _key(1)})
  train_b = apply(variables, SRC, TGT_IN, train=True, rngs={'dropout': _key(2)})
  assert not np.allclose(train_a, evaluate) and not np.allclose(train_a, train_b)

  low = jax.jit(_module(dtype='bfloat16').apply)(
    variables, SRC, TGT_IN
  )  # same params: they stay float32
  assert low.dtype == jnp.float32
  np.testing.assert_allclose(low, evaluate, atol=0.1)

  with pytest.raises(ValueError, match='max_length=12'):
    model.apply(variables, SRC, jnp.ones((2, 13), jnp.int32))


def _largest_loop_state(lowered) -> int:
  """Elements of the largest array carried by any while loop of a lowered function."""
  sizes = [1]
  for line in lowered.as_text().splitlines():
    if 'stablehlo.while' in line:
      for dims in re.findall(r'tensor<((?:\d+x)*)\w+>', line[line.rfind(':'):]):
        sizes.append(math.prod(int(d) for d in dims.split('x') if d))
  return max(sizes)


@pytest.mark.slow
def test_training_dropout_equals_flax_dropout_in_logits_and_gradients(monkeypatch):
  """models/dropout.Dropout (fast CPU masks) trains exactly the network flax's nn.Dropout does."""
  from attnlab.models import attention

  _, variables = _model('pre')
  model = _module(dropout=0.3)
  rngs = {'dropout': jax.random.key(4)}  # a Threefry key, as train.py uses

  def loss_and_grads():
    def loss(params):
      logits = model.apply({'params': params}, SRC, TGT_IN, train=True, rngs=rngs)
      return jnp.sum(jnp.where(TGT_IN[..., None] != PAD_ID, logits, 0.0) ** 2), logits

    step = jax.jit(jax.grad(loss, has_aux=True))
    return step(variables['params']), _largest_loop_state(step.lower(variables['params']))

  # The Transformer has no loop of its own; JAX's CPU Threefry is one (dropout.py). Only the
  # rng key derivations (a few words) may loop, never a mask.
  (grads, logits), largest = loss_and_grads()
  assert largest <= 4
  monkeypatch.setattr(transformer, 'Dropout', nn.Dropout)
  monkeypatch.setattr(attention, 'Dropout', nn.Dropout)
  (flax_grads, flax_logits), flax_largest = loss_and_grads()
  assert flax_largest >= SRC.size * H
  np.testing.assert_array_equal(logits, flax_logits)  # the same masks, bit for bit
  # Another XLA program sums in another order: gradients agree to float32 rounding of the
  # largest entry of each array (on Intel AVX-512 a 5e-3 entry beside 3.8 ones moved 1.3e-6).
  jax.tree.map(lambda a, b: np.testing.assert_allclose(
    a, b, rtol=1e-5, atol=1e-6 * max(1.0, float(np.max(np.abs(b))))), grads, flax_grads)
  evaluate = model.apply(variables, SRC, TGT_IN)
  assert not np.allclose(logits, evaluate), 'dropout must be active'


def test_config_validation_accepts_exactly_the_kind_and_norm_registries():
  for kind in factory.MODEL_KINDS:
    assert model_config(kind=kind).kind == kind
  for norm in transformer.NORMS:
    assert model_config(kind='transformer', transformer={'norm': norm}).transformer.norm == norm
  for fields, key, listed in (
    ({'kind': 'lstm'}, 'model.kind', factory.MODEL_KINDS),
    ({'transformer': {'norm': 'mid'}}, 'model.transformer.norm', transformer.NORMS),
  ):
    with pytest.raises(ConfigError, match=f"^{key}=.* is not valid; choose from "
                                          f"{', '.join(sorted(listed))}$"):
      model_config(**fields)
