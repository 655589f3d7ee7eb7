"""Every matmul in `attnlab/models` accumulates in float32, whatever the compute dtype.

With `model.dtype=bfloat16` the operands are bfloat16 and the products are summed in float32,
forward and backward, as matrix units do natively (GPU tensor cores, TPU MXU, CPU AMX /
avx512_bf16). JAX's own default for bf16 x bf16 is a bf16 result: XLA:CPU has no kernel for
that, so it upcasts every such dot to float32 with converts around it, and bf16 would run
slower than float32 (benchmarks/OPTIMISATIONS.md: what XLA:CPU offers). `preferred_element_type`
float32 alone fixes the forward pass only: the cotangent of a float32 result is float32, so
JAX's transposed dots get one float32 operand and run as f32 x f32. Here the backward rule
rounds the cotangent to the operands' dtype first, so the gradient dots are bf16 x bf16 -> f32
too.

Float32 operands take plain `jnp.einsum` (and its own gradient): bit for bit what they were.
Results come back in the operands' dtype unless `out_dtype` says otherwise (scores ask for
float32, so the softmax never sees a rounded score).

`model.dtype=bfloat16_matmuls` is mixed precision as `torch.autocast(dtype=bfloat16)` does it: a
float32 model (activations, elementwise ops, attention scores and context sums all float32)
whose *weight* matmuls (the Dense layers' `dot_general` and `dot`: every matmul with a parameter
matrix on the right, including the LSTM's input and recurrent kernels) round both operands to
bfloat16 and sum in float32. On XLA:CPU this reaches the AMX / avx512_bf16 dot kernels without
paying bf16's converts around every elementwise op (benchmarks/OPTIMISATIONS.md, Intel). The
top-level models' methods enter `weight_operands(config.dtype)` (`with_model_dtype`), the way
`jax.default_matmul_precision` scopes a trace; matmuls traced outside any model stay as given.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import string

import flax.linen as nn
import jax
import jax.numpy as jnp

from attnlab.config import model as model_config

ACCUMULATION_DTYPE = jnp.float32

# model.dtype -> (compute dtype of activations, operand dtype of weight matmuls). The one
# definition of the choices (attnlab/config/model.py validates against it).
MODEL_DTYPES = {
  'float32': (jnp.float32, jnp.float32),
  'bfloat16': (jnp.bfloat16, jnp.bfloat16),
  'bfloat16_matmuls': (jnp.float32, jnp.bfloat16),
}
assert tuple(MODEL_DTYPES) == model_config.DTYPES, 'config/model.py DTYPES names these'

# The operand dtype of weight matmuls in the model being traced (None: the operands' own).
_WEIGHT_OPERANDS = contextvars.ContextVar('attnlab_weight_operands', default=None)


def compute_dtype(model_dtype: str):
  """The dtype activations are computed in under `model.dtype=model_dtype`."""
  return jnp.dtype(MODEL_DTYPES[model_dtype][0])


@contextlib.contextmanager
def weight_operands(model_dtype: str):
  """Within: float32 weight matmuls take operands in `model.dtype`'s weight-operand dtype."""
  operands = jnp.dtype(MODEL_DTYPES[model_dtype][1])
  token = _WEIGHT_OPERANDS.set(None if operands == compute_dtype(model_dtype) else operands)
  try:
    yield
  finally:
    _WEIGHT_OPERANDS.reset(token)


def with_model_dtype(method):
  """Decorates a top-level model method: its trace runs in `weight_operands(config.dtype)`."""

  @functools.wraps(method)
  def wrapped(self, *args, **kwargs):
    with weight_operands(self.config.dtype):
      return method(self, *args, **kwargs)

  return wrapped


def _weight_operands(x, w):
  """(x, w) rounded to the traced model's weight-operand dtype, if it has one and they are f32."""
  operands = _WEIGHT_OPERANDS.get()
  if operands is None or jnp.result_type(x, w) != ACCUMULATION_DTYPE:
    return x, w
  return x.astype(operands), w.astype(operands)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _einsum_low(subscripts: str, x, y):
  """A two-operand einsum of low-precision operands, summed in float32 (float32 result)."""
  return jnp.einsum(subscripts, x, y, preferred_element_type=ACCUMULATION_DTYPE)


def _einsum_low_fwd(subscripts, x, y):
  return _einsum_low(subscripts, x, y), (x, y)


def _einsum_low_bwd(subscripts, residuals, g):
  # d/dx of einsum('X,Y->Z') is einsum('Z,Y->X') (every index of X is in Y or Z: no index is
  # summed within one operand), and likewise for y; the cotangent is rounded like the operands.
  x, y = residuals
  inputs, out = subscripts.split('->')
  xs, ys = inputs.split(',')
  g = g.astype(jnp.result_type(x, y))
  dx = jnp.einsum(f'{out},{ys}->{xs}', g, y, preferred_element_type=ACCUMULATION_DTYPE)
  dy = jnp.einsum(f'{xs},{out}->{ys}', x, g, preferred_element_type=ACCUMULATION_DTYPE)
  return dx.astype(x.dtype), dy.astype(y.dtype)


_einsum_low.defvjp(_einsum_low_fwd, _einsum_low_bwd)


def einsum(subscripts: str, x, y, out_dtype=None):
  """`jnp.einsum` of two operands with float32 accumulation; the result in `out_dtype` or the
  operands' dtype. `subscripts` must be explicit ('...ts,...sh->...th')."""
  dtype = jnp.result_type(x, y)
  out_dtype = out_dtype or dtype
  if dtype == ACCUMULATION_DTYPE:
    return jnp.einsum(subscripts, x, y).astype(out_dtype)
  return _einsum_low(subscripts.replace(' ', ''), x, y).astype(out_dtype)


def dot(a, w, out_dtype=None):
  """`jnp.dot` of a ...xK array and a KxN weight matrix with float32 accumulation (a weight
  matmul: under `model.dtype=bfloat16_matmuls` float32 operands are rounded to bfloat16)."""
  if w.ndim != 2:
    raise ValueError(f'matmul.dot takes a KxN matrix on the right, got shape {w.shape}')
  out_dtype = out_dtype or jnp.result_type(a, w)
  return einsum('...k,kn->...n', *_weight_operands(a, w), out_dtype)


def _dot_general_subscripts(lhs_ndim: int, rhs_ndim: int, dimension_numbers) -> str:
  """The einsum string of a `lax.dot_general` (output: batch, lhs free, rhs free axes)."""
  (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
  letters = iter(string.ascii_letters)
  lhs = [next(letters) for _ in range(lhs_ndim)]
  rhs = [''] * rhs_ndim
  for i, j in zip(lhs_contract, rhs_contract, strict=True):
    rhs[j] = lhs[i]
  for i, j in zip(lhs_batch, rhs_batch, strict=True):
    rhs[j] = lhs[i]
  rhs = [r or next(letters) for r in rhs]
  batch = [lhs[i] for i in lhs_batch]
  lhs_free = [c for i, c in enumerate(lhs) if i not in (*lhs_contract, *lhs_batch)]
  rhs_free = [c for j, c in enumerate(rhs) if j not in (*rhs_contract, *rhs_batch)]
  return f'{"".join(lhs)},{"".join(rhs)}->{"".join(batch + lhs_free + rhs_free)}'


def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None,
                **kwargs):
  """`jax.lax.dot_general` with float32 accumulation: the `dot_general` of attnlab's Dense
  layers (weight matmuls, see `dot`). The result has `preferred_element_type` if given, else
  the operands' dtype (float32 under `model.dtype=bfloat16_matmuls`)."""
  preferred_element_type = preferred_element_type or jnp.result_type(lhs, rhs)
  lhs, rhs = _weight_operands(lhs, rhs)
  if jnp.result_type(lhs, rhs) == ACCUMULATION_DTYPE:
    out = jax.lax.dot_general(lhs, rhs, dimension_numbers, precision=precision, **kwargs)
    return out.astype(preferred_element_type)
  subscripts = _dot_general_subscripts(lhs.ndim, rhs.ndim, dimension_numbers)
  return einsum(subscripts, lhs, rhs, out_dtype=preferred_element_type)


# attnlab's Dense layers: flax's, with the float32-accumulating dot_general (same parameters).
Dense = functools.partial(nn.Dense, dot_general=dot_general)
DenseGeneral = functools.partial(nn.DenseGeneral, dot_general=dot_general)
