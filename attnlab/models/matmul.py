"""Every matmul in `attnlab/models` accumulates in float32, whatever the compute dtype.

With `model.dtype=bfloat16` the operands are bfloat16 and the products are summed in float32,
forward and backward, as matrix units do natively (GPU tensor cores, TPU MXU, CPU AMX /
avx512_bf16). JAX's own default for bf16 x bf16 is a bf16 result: XLA:CPU has no kernel for
that, so it upcasts every such dot to float32 with converts around it, and bf16 ran slower
than float32 (benchmarks/OPTIMISATIONS.md, lever 2). `preferred_element_type=float32` alone
fixes the forward pass only: the cotangent of a float32 result is float32, so JAX's transposed
dots get one float32 operand and run as f32 x f32. Here the backward rule rounds the
cotangent to the operands' dtype first, so the gradient dots are bf16 x bf16 -> f32 too.

Float32 operands take plain `jnp.einsum` (and its own gradient): bit for bit what they were.
Results come back in the operands' dtype unless `out_dtype` says otherwise (scores ask for
float32, so the softmax never sees a rounded score).
"""

from __future__ import annotations

import functools
import string

import flax.linen as nn
import jax
import jax.numpy as jnp

ACCUMULATION_DTYPE = jnp.float32


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


def dot(a, b, out_dtype=None):
  """`jnp.dot` of a ...xK array and a KxN matrix with float32 accumulation."""
  if b.ndim != 2:
    raise ValueError(f'matmul.dot takes a KxN matrix on the right, got shape {b.shape}')
  return einsum('...k,kn->...n', a, b, out_dtype)


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
  layers. The result has `preferred_element_type` if given, else the operands' dtype."""
  if jnp.result_type(lhs, rhs) == ACCUMULATION_DTYPE:
    out = jax.lax.dot_general(lhs, rhs, dimension_numbers, precision=precision, **kwargs)
    return out.astype(preferred_element_type or out.dtype)
  subscripts = _dot_general_subscripts(lhs.ndim, rhs.ndim, dimension_numbers)
  return einsum(subscripts, lhs, rhs, out_dtype=preferred_element_type)


# attnlab's Dense layers: flax's, with the float32-accumulating dot_general (same parameters).
Dense = functools.partial(nn.Dense, dot_general=dot_general)
DenseGeneral = functools.partial(nn.DenseGeneral, dot_general=dot_general)
