"""Matmul FLOPs of a JAX function, counted from its jaxpr (loops multiplied out).

XLA's `compiled.cost_analysis()['flops']` counts the body of a while loop once, whatever its
trip count, so for a scanned RNN it reports roughly one time step. This counter walks the
jaxpr instead: every `dot_general` costs 2 * (batch * free * contracted) elements, a `scan`
body counts `length` times, and nested jaxprs (jit, custom_vjp, remat, cond) are entered.
Elementwise work is not counted: MFU here is matmul FLOPs over the matmul peak, the usual
convention. While loops (search) are rejected, because their trip count is data-dependent.
"""

from __future__ import annotations

import math

import jax
from jax.extend import core as jex_core


def _dot_flops(eqn) -> int:
  lhs, rhs = (v.aval.shape for v in eqn.invars[:2])
  (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = eqn.params['dimension_numbers']
  contract = math.prod(lhs[d] for d in lhs_contract)
  batch = math.prod(lhs[d] for d in lhs_batch)
  lhs_free = math.prod(s for d, s in enumerate(lhs) if d not in (*lhs_contract, *lhs_batch))
  rhs_free = math.prod(s for d, s in enumerate(rhs) if d not in (*rhs_contract, *rhs_batch))
  return 2 * batch * lhs_free * rhs_free * contract


def _sub_jaxprs(eqn):
  for value in eqn.params.values():
    for item in value if isinstance(value, (tuple, list)) else (value,):
      if isinstance(item, jex_core.ClosedJaxpr):
        yield item.jaxpr
      elif isinstance(item, jex_core.Jaxpr):
        yield item


def jaxpr_matmul_flops(jaxpr) -> int:
  total = 0
  for eqn in jaxpr.eqns:
    name = eqn.primitive.name
    if name == 'dot_general':
      total += _dot_flops(eqn)
    elif name == 'while':
      raise ValueError('while loops have a data-dependent trip count; count FLOPs per step')
    elif name == 'scan':
      total += eqn.params['length'] * jaxpr_matmul_flops(eqn.params['jaxpr'].jaxpr)
    elif name == 'cond':
      total += max(jaxpr_matmul_flops(b.jaxpr) for b in eqn.params['branches'])
    else:
      total += sum(jaxpr_matmul_flops(sub) for sub in _sub_jaxprs(eqn))
  return total


def matmul_flops(fn, *args, **kwargs) -> int:
  """Matmul FLOPs of one call of `fn(*args, **kwargs)` (traced, not run)."""
  return jaxpr_matmul_flops(jax.make_jaxpr(fn)(*args, **kwargs).jaxpr)
