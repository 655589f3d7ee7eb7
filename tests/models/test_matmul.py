"""models/matmul.py: bfloat16 operands, float32 accumulation, in every matmul of every model.

The rule: with `model.dtype=bfloat16` each product is
summed in float32 and rounded once, so a dot of bf16 operands equals the float32 dot of the
same (bf16-valued) numbers, rounded to bf16. The lowered training step of each model family
must hold no bf16 x bf16 -> bf16 dot, forward or backward: XLA:CPU has no kernel for those and
wraps each in converts to float32.
"""

import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from support.config_builders import model_config

from attnlab.models import matmul
from attnlab.models.factory import build_model

# `stablehlo.dot_general %a, %b, ... : (tensor<2x3xbf16>, tensor<3x4xbf16>) -> tensor<2x4xf32>`
DOT_TYPES = re.compile(
  r'stablehlo\.dot_general.*:\s*\(tensor<[^>]*x(\w+)>, tensor<[^>]*x(\w+)>\)\s*->\s*'
  r'tensor<[^>]*x(\w+)>'
)


def _bf16(key, shape):
  return jax.random.normal(jax.random.key(key), shape).astype(jnp.bfloat16)


def _f32_dot_rounded(a, b):
  """The hand-derived result: exact products of the bf16 values summed in float64, rounded."""
  exact = np.asarray(a, np.float64) @ np.asarray(b, np.float64)
  return jnp.asarray(exact, jnp.float32).astype(jnp.bfloat16)


def test_dot_of_bfloat16_operands_is_the_float32_sum_rounded_once():
  # K = 2048: summing in bf16 (8 mantissa bits) would drift by many ulps of the result.
  a, b = _bf16(0, (16, 2048)), _bf16(1, (2048, 8))
  got = matmul.dot(a, b)
  assert got.dtype == jnp.bfloat16
  want = _f32_dot_rounded(a, b)
  # float32 summation order may differ from float64's by far less than one bf16 ulp.
  np.testing.assert_allclose(
    np.asarray(got, np.float32), np.asarray(want, np.float32), rtol=2**-8, atol=1e-6
  )


def test_out_dtype_keeps_the_float32_sum_unrounded():
  a, b = _bf16(2, (4, 512)), _bf16(3, (6, 512))
  got = matmul.einsum('ik,jk->ij', a, b, out_dtype=jnp.float32)
  assert got.dtype == jnp.float32
  exact = np.asarray(a, np.float64) @ np.asarray(b, np.float64).T
  np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-4)


def test_float32_operands_give_exactly_the_plain_matmul():
  a = jax.random.normal(jax.random.key(4), (5, 7, 9))
  b = jax.random.normal(jax.random.key(5), (9, 3))
  np.testing.assert_array_equal(matmul.einsum('btk,kh->bth', a, b), jnp.einsum('btk,kh->bth', a, b))
  np.testing.assert_array_equal(matmul.dot(a, b), jnp.dot(a, b))
  dense = matmul.Dense(3)
  variables = dense.init(jax.random.key(6), a)
  np.testing.assert_array_equal(dense.apply(variables, a), nn.Dense(3).apply(variables, a))


@pytest.mark.slow
def test_gradients_round_the_cotangent_and_sum_in_float32():
  # Hand-derived: for z = x y (x: BxTxK, y: BxKxH), dx = g y^T and dy = x^T g, each with g
  # rounded to bf16 and the products summed in float32, then rounded to the operand dtype.
  x, y = _bf16(7, (2, 3, 64)), _bf16(8, (2, 64, 5))
  w = jax.random.normal(jax.random.key(9), (2, 3, 5))
  dx, dy = jax.grad(lambda x, y: jnp.sum(matmul.einsum('btk,bkh->bth', x, y,
                                                       out_dtype=jnp.float32) * w), (0, 1))(x, y)
  g = np.asarray(w.astype(jnp.bfloat16), np.float64)
  want_dx = np.einsum('bth,bkh->btk', g, np.asarray(y, np.float64))
  want_dy = np.einsum('btk,bth->bkh', np.asarray(x, np.float64), g)
  assert dx.dtype == dy.dtype == jnp.bfloat16
  np.testing.assert_allclose(np.asarray(dx, np.float32), want_dx, rtol=2**-7, atol=1e-5)
  np.testing.assert_allclose(np.asarray(dy, np.float32), want_dy, rtol=2**-7, atol=1e-5)


@pytest.mark.slow
def test_dot_general_with_batch_and_several_contracting_axes_matches_lax():
  a = jax.random.normal(jax.random.key(10), (2, 3, 4, 5))
  b = jax.random.normal(jax.random.key(11), (4, 2, 5, 6))
  dims = (((2, 3), (0, 2)), ((0,), (1,)))
  want = jax.lax.dot_general(a, b, dims)
  got = matmul.dot_general(a.astype(jnp.bfloat16), b.astype(jnp.bfloat16), dims,
                           preferred_element_type=jnp.float32)
  assert got.shape == want.shape == (2, 3, 6) and got.dtype == jnp.float32
  np.testing.assert_allclose(got, want, rtol=0.03, atol=0.1)


SRC = np.array([[4, 5, 6, 7, 2], [8, 9, 2, 0, 0]], np.int32)
TGT_IN = np.array([[1, 6, 7, 8], [1, 9, 10, 0]], np.int32)
TGT_OUT = np.array([[6, 7, 8, 2], [9, 10, 2, 0]], np.int32)
V = 12

FAMILIES = {
  'luong-general-feed': dict(attention=dict(score='general', timing='luong', input_feeding=True)),
  'luong-dot-all-steps': dict(attention=dict(score='dot', timing='luong', input_feeding=False)),
  'bahdanau-concat': dict(attention=dict(score='concat', timing='bahdanau', input_feeding=False)),
  'multi-head': dict(attention=dict(score='scaled_dot', num_heads=2)),
  'transformer': dict(
    kind='transformer', transformer=dict(num_heads=2, mlp_dim=16, max_length=8)
  ),
}


def _loss_and_grad(family: str, dtype: str):
  """A jitted loss-and-gradient function of one model family, and its float32 parameters."""
  fields = dict(FAMILIES[family])
  config = model_config(hidden_size=8, embed_dim=6, dropout=0.0, dtype=dtype, **fields)
  model = build_model(config, V, V)
  params = model.init(jax.random.key(0), SRC, TGT_IN)['params']

  def loss(params):
    logits = model.apply({'params': params}, SRC, TGT_IN)
    return optax.softmax_cross_entropy_with_integer_labels(logits, TGT_OUT).mean()

  return jax.jit(jax.value_and_grad(loss)), params


@pytest.mark.slow
@pytest.mark.parametrize('family', sorted(FAMILIES))
def test_bfloat16_training_step_has_no_bfloat16_accumulating_dot(family):
  step, params = _loss_and_grad(family, 'bfloat16')
  text = step.lower(params).as_text(debug_info=True)  # forward and backward, not compiled
  locations = dict(re.findall(r'^#(loc\d+) = (.*)$', text, re.M))
  kinds = set()
  for line in text.splitlines():
    for types in DOT_TYPES.findall(line):
      if types == ('f32', 'f32', 'f32'):
        # Only the context sum over float32 memory may stay float32 (its weights are a
        # float32 softmax and the RNN memory is kept float32); its gradient is float32 too.
        ref = re.search(r'loc\(#(loc\d+)\)', line)
        where = locations.get(ref.group(1), '') if ref else ''
        assert '...ts,...sh->...th' in where, (line, where)
      kinds.add(types)
  assert ('bf16', 'bf16', 'f32') in kinds
  assert kinds <= {('bf16', 'bf16', 'f32'), ('f32', 'f32', 'f32')}, sorted(kinds)


@pytest.mark.slow
def test_bfloat16_training_step_runs_and_tracks_float32():
  low_step, params = _loss_and_grad('luong-general-feed', 'bfloat16')
  full_step, _ = _loss_and_grad('luong-general-feed', 'float32')
  (low_loss, low_grads), (full_loss, full_grads) = low_step(params), full_step(params)
  assert abs(float(low_loss) - float(full_loss)) < 0.02 * float(full_loss)
  for low, full in zip(jax.tree.leaves(low_grads), jax.tree.leaves(full_grads), strict=True):
    assert low.dtype == jnp.float32
    np.testing.assert_allclose(low, full, rtol=0.1, atol=0.02)


# --- model.dtype=bfloat16_matmuls: a float32 model whose weight matmuls take bf16 operands ---


def test_weight_matmul_under_bfloat16_matmuls_sums_the_rounded_operands_in_float32():
  # Hand-derived: round each float32 operand to bf16, multiply exactly, sum, keep float32.
  a = jax.random.normal(jax.random.key(20), (8, 1024))
  w = jax.random.normal(jax.random.key(21), (1024, 6))
  want = np.asarray(a.astype(jnp.bfloat16), np.float64) @ np.asarray(w.astype(jnp.bfloat16),
                                                                   np.float64)
  with matmul.weight_operands('bfloat16_matmuls'):
    got = matmul.dot(a, w)
    dense = matmul.Dense(6, use_bias=False)
    got_dense = dense.apply({'params': {'kernel': w}}, a)
  for result in (got, got_dense):
    assert result.dtype == jnp.float32
    np.testing.assert_allclose(result, want, rtol=1e-5, atol=1e-4)
  # ... which is not the float32 product: the rounding took effect (K = 1024 products).
  assert float(jnp.max(jnp.abs(got - a @ w))) > 1e-3
  # Outside the scope (and under float32) the same call is the plain float32 matmul again.
  np.testing.assert_array_equal(matmul.dot(a, w), jnp.dot(a, w))
  with matmul.weight_operands('float32'):
    np.testing.assert_array_equal(matmul.dot(a, w), jnp.dot(a, w))


def test_bfloat16_matmuls_leaves_activation_matmuls_in_float32():
  # Scores and context sums (both operands activations) keep float32 operands.
  q = jax.random.normal(jax.random.key(22), (2, 3, 64))
  k = jax.random.normal(jax.random.key(23), (2, 5, 64))
  with matmul.weight_operands('bfloat16_matmuls'):
    got = matmul.einsum('btk,bsk->bts', q, k)
  np.testing.assert_array_equal(got, jnp.einsum('btk,bsk->bts', q, k))


@pytest.mark.parametrize('family', sorted(FAMILIES))
def test_bfloat16_matmuls_step_runs_weight_dots_on_bf16_and_the_rest_in_float32(family):
  step, params = _loss_and_grad(family, 'bfloat16_matmuls')
  text = step.lower(params).as_text()
  kinds = {types for line in text.splitlines() for types in DOT_TYPES.findall(line)}
  # Weight matmuls (and their gradients) bf16 x bf16 -> f32; scores/contexts f32. No dot
  # produces bf16, so no activation is ever rounded to bf16.
  assert kinds == {('bf16', 'bf16', 'f32'), ('f32', 'f32', 'f32')}, sorted(kinds)
  assert all(p.dtype == jnp.float32 for p in jax.tree.leaves(params))


@pytest.mark.slow
def test_bfloat16_matmuls_training_step_tracks_float32():
  full_step, params = _loss_and_grad('luong-general-feed', 'float32')
  mixed_step, _ = _loss_and_grad('luong-general-feed', 'bfloat16_matmuls')
  (full_loss, full_grads), (mixed_loss, mixed_grads) = full_step(params), mixed_step(params)
  assert mixed_loss.dtype == jnp.float32 and float(mixed_loss) != float(full_loss)
  assert abs(float(mixed_loss) - float(full_loss)) < 0.01 * float(full_loss)
  for mixed, full in zip(jax.tree.leaves(mixed_grads), jax.tree.leaves(full_grads), strict=True):
    assert mixed.dtype == jnp.float32
    np.testing.assert_allclose(mixed, full, rtol=0.05, atol=0.01)
