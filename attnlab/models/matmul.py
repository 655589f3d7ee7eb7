"""Every matmul in `attnlab/models` accumulates in float32, whatever the compute dtype.

With `model.dtype=bfloat16` the operands are bfloat16 and the products are summed in float32,
as matrix units do natively (GPU tensor cores, TPU MXU, CPU AMX / avx512_bf16). JAX's own
default for bf16 x bf16 is a bf16 result: XLA:CPU has no kernel for that, so it upcasts every
such dot to float32 with converts around it, and bf16 ran slower than float32
(benchmarks/OPTIMISATIONS.md, lever 2). For float32 operands these functions are exactly
`jax.lax.dot_general` / `jnp.einsum`.

Results come back in the operands' dtype unless `out_dtype` says otherwise (scores ask for
float32, so the softmax never sees a rounded score).
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

ACCUMULATION_DTYPE = jnp.float32


def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None,
                **kwargs):
  """`jax.lax.dot_general` with float32 accumulation; the `dot_general` of attnlab's Dense layers.

  The result has `preferred_element_type` if given, else the operands' promoted dtype.
  """
  out_dtype = preferred_element_type or jnp.result_type(lhs, rhs)
  out = jax.lax.dot_general(
    lhs, rhs, dimension_numbers, precision=precision,
    preferred_element_type=ACCUMULATION_DTYPE, **kwargs,
  )
  return out.astype(out_dtype)


def einsum(subscripts: str, *operands, out_dtype=None):
  """`jnp.einsum` with float32 accumulation; the result in `out_dtype` or the operands' dtype."""
  out_dtype = out_dtype or jnp.result_type(*operands)
  out = jnp.einsum(subscripts, *operands, preferred_element_type=ACCUMULATION_DTYPE)
  return out.astype(out_dtype)


def dot(a, b, out_dtype=None):
  """`jnp.dot` with float32 accumulation; the result in `out_dtype` or the operands' dtype."""
  out_dtype = out_dtype or jnp.result_type(a, b)
  return jnp.dot(a, b, preferred_element_type=ACCUMULATION_DTYPE).astype(out_dtype)


# attnlab's Dense layers: flax's, with the float32-accumulating dot_general (same parameters).
Dense = functools.partial(nn.Dense, dot_general=dot_general)
DenseGeneral = functools.partial(nn.DenseGeneral, dot_general=dot_general)
