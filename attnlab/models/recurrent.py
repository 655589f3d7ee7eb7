"""LSTM and GRU layers whose input projection is hoisted out of the time loop.

A recurrent layer spends most of its time in two matmuls per step: x_t W_i and h_{t-1} W_h.
Only the second depends on the previous step, so `input_gates` applies W_i to every time step
at once (one large matmul instead of S small ones, and one weight gradient instead of S) and
the loop (`lstm_step` / `gru_step`) does the recurrent half only. The kernels are concatenated
once per call, outside the loop.

`CellParams` declares exactly the parameter tree of flax's `OptimizedLSTMCell` (input kernels
ii, if, ig, io without bias; recurrent kernels hi, hf, hg, ho with bias) or `GRUCell` (ir, iz,
in with bias; hr, hz without, hn with), with the same initialisers, so checkpoints and the
NumPy references in the tests read the same names. Gate equations are flax's:

  LSTM  i, f, o = sigmoid(.), g = tanh(.);  c' = f c + i g;  h' = o tanh(c')
  GRU   r, z = sigmoid(x W_i + b_i + h W_h);  n = tanh(x W_in + b_in + r (h W_hn + b_hn));
        h' = (1 - z) n + z h

Matmuls take operands in the compute dtype and sum in float32 (models/matmul.py); the carry
keeps the dtype it is given (float32 in attnlab).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from attnlab.config.fields import check_choice
from attnlab.config.model import CELLS
from attnlab.models import matmul

GATES = {'lstm': 'ifgo', 'gru': 'rzn'}

# One layer's recurrent state: (c_BxH, h_BxH) for an LSTM, h_BxH for a GRU.
Carry = Any


class CellKernels(NamedTuple):
  """One layer's kernels with its G gates concatenated (G*H columns, gate order of GATES)."""

  w_i: jax.Array | None  # I x GH input kernel (None where only the recurrent half is needed)
  b_i: jax.Array | None  # GH input bias (GRU) or None (LSTM)
  w_h: jax.Array | None  # H x GH recurrent kernel, or [W_x; W_h] after `stack_extra`
  b_h: jax.Array | None  # GH recurrent bias (GRU: zeros for r and z, hn's bias for n)


class _Kernel(nn.Module):
  """kernel (in x out) and optional bias, named like flax.linen.Dense's parameters."""

  in_features: int
  features: int
  use_bias: bool
  kernel_init: Any

  @nn.compact
  def __call__(self):
    kernel = self.param('kernel', self.kernel_init, (self.in_features, self.features))
    bias = (
      self.param('bias', nn.initializers.zeros_init(), (self.features,)) if self.use_bias else None
    )
    return kernel, bias


class CellParams(nn.Module):
  """One recurrent layer's parameters; `__call__()` returns its concatenated `CellKernels`."""

  kind: str
  in_features: int
  features: int

  @nn.compact
  def __call__(self) -> CellKernels:
    check_choice('model.cell', self.kind, CELLS)
    n_in, H = self.in_features, self.features
    lecun, orthogonal = nn.initializers.lecun_normal(), nn.initializers.orthogonal()
    if self.kind == 'lstm':
      inputs = [_Kernel(n_in, H, False, lecun, name=f'i{g}')() for g in GATES['lstm']]
      recurrent = [_Kernel(H, H, True, orthogonal, name=f'h{g}')() for g in GATES['lstm']]
    else:
      inputs = [_Kernel(n_in, H, True, lecun, name=f'i{g}')() for g in GATES['gru']]
      recurrent = [_Kernel(H, H, g == 'n', orthogonal, name=f'h{g}')() for g in GATES['gru']]
    w_i = jnp.concatenate([k for k, _ in inputs], axis=-1)
    b_i = None if inputs[0][1] is None else jnp.concatenate([b for _, b in inputs])
    w_h = jnp.concatenate([k for k, _ in recurrent], axis=-1)
    if self.kind == 'lstm':
      b_h = jnp.concatenate([b for _, b in recurrent])
    else:  # only hn has a bias; r and z get zeros so that every kind adds one GH vector
      (_, _), (_, _), (_, bias_n) = recurrent  # gates r, z, n
      b_h = jnp.concatenate([jnp.zeros((2 * H,), bias_n.dtype), bias_n])
    return CellKernels(w_i=w_i, b_i=b_i, w_h=w_h, b_h=b_h)


def input_gates(kernels: CellKernels, x_BxTxI: jax.Array, dtype) -> jax.Array:
  """x W_i (+ b_i) for every step at once: ...xI -> ...xGH in `dtype`."""
  gates = matmul.dot(x_BxTxI.astype(dtype), kernels.w_i.astype(dtype))
  if kernels.b_i is not None:
    gates = gates + kernels.b_i.astype(dtype).reshape((1,) * (gates.ndim - 1) + (-1,))
  return gates


def _recurrent_matmul(w_h, h_BxH, extra_BxK, dtype):
  """h W_h, or [extra; h] [W_x; W_h] when the step has an extra input (one larger matmul)."""
  x = h_BxH if extra_BxK is None else jnp.concatenate([extra_BxK.astype(h_BxH.dtype), h_BxH], -1)
  return matmul.dot(x.astype(dtype), w_h.astype(dtype))


def lstm_step(w_h, b_h, carry: Carry, gx_BxG: jax.Array, dtype, extra_BxK=None) -> Carry:
  c_BxH, h_BxH = carry
  g_BxG = gx_BxG + _recurrent_matmul(w_h, h_BxH, extra_BxK, dtype) + b_h.astype(dtype)[None, :]
  i, f, g, o = jnp.split(g_BxG, 4, axis=-1)
  new_c = jax.nn.sigmoid(f) * c_BxH + jax.nn.sigmoid(i) * jnp.tanh(g)
  new_h = jax.nn.sigmoid(o) * jnp.tanh(new_c)
  return new_c.astype(c_BxH.dtype), new_h.astype(h_BxH.dtype)


def gru_step(w_h, b_h, h_BxH: jax.Array, gx_BxG: jax.Array, dtype, extra_BxK=None) -> jax.Array:
  if extra_BxK is not None:  # the extra input feeds all three gates, not only r and z
    K = extra_BxK.shape[-1]
    gx_BxG = gx_BxG + matmul.dot(extra_BxK.astype(dtype), w_h[:K].astype(dtype))
    w_h = w_h[K:]
  gh_BxG = matmul.dot(h_BxH.astype(dtype), w_h.astype(dtype)) + b_h.astype(dtype)[None, :]
  x_r, x_z, x_n = jnp.split(gx_BxG, 3, axis=-1)
  h_r, h_z, h_n = jnp.split(gh_BxG, 3, axis=-1)
  r, z = jax.nn.sigmoid(x_r + h_r), jax.nn.sigmoid(x_z + h_z)
  n = jnp.tanh(x_n + r * h_n)
  return ((1.0 - z) * n + z * h_BxH).astype(h_BxH.dtype)


def cell_step(
  kind: str, kernels: CellKernels, carry: Carry, gx_BxG: jax.Array, dtype, extra_BxK=None
) -> Carry:
  """One step given the step's input gates; returns the new carry.

  With `extra_BxK` (an input known only inside the loop, e.g. the context or h~_{t-1}),
  kernels.w_h must be the stacked [W_x; W_h] of `stack_extra`; for an LSTM the two products
  are one matmul.
  """
  step = lstm_step if kind == 'lstm' else gru_step
  return step(kernels.w_h, kernels.b_h, carry, gx_BxG, dtype, extra_BxK)


def stack_extra(kernels: CellKernels, first: int) -> CellKernels:
  """Splits W_i after its first `first` rows: W_i[:first] stays the input kernel and
  W_i[first:] is stacked onto W_h ([W_x; W_h]), for an input known only inside the loop."""
  w_i = kernels.w_i
  return kernels._replace(w_i=w_i[:first], w_h=jnp.concatenate([w_i[first:], kernels.w_h], 0))


def hidden(carry: Carry) -> jax.Array:
  """h_BxH of a layer's carry: the LSTM's (c, h) or the GRU's h."""
  return carry[1] if isinstance(carry, tuple) else carry


def zero_carry(kind: str, batch: int, features: int, dtype=jnp.float32) -> Carry:
  zeros = jnp.zeros((batch, features), dtype)
  return (zeros, zeros) if kind == 'lstm' else zeros


def flip_within_lengths(x_BxTx, lengths_B: jax.Array) -> jax.Array:
  """Reverses each row's first lengths_B[b] steps; padding stays in place (an involution)."""
  T = x_BxTx.shape[1]
  t_T = jnp.arange(T)
  idx_BxT = jnp.where(
    t_T[None, :] < lengths_B[:, None], lengths_B[:, None] - 1 - t_T[None, :], t_T[None, :]
  )
  idx = idx_BxT.reshape(idx_BxT.shape + (1,) * (x_BxTx.ndim - 2))
  return jnp.take_along_axis(x_BxTx, idx, axis=1)


def run_layers(
  kind: str,
  kernels: list[CellKernels],
  gx: list[jax.Array],
  carries: list[Carry],
  valid_BxT: jax.Array | None,
  dtype,
) -> tuple[list[Carry], list[jax.Array]]:
  """Runs independent recurrences (e.g. the two directions of a layer) in ONE time loop.

  gx[k]: BxTxG input gates of recurrence k. A step past a row's length (valid_BxT False)
  leaves its carry unchanged, so the final carries are those at each row's last real step.
  Returns (final carries, outputs BxTxH per recurrence; outputs past a row's length are
  unspecified).
  """
  B, T = gx[0].shape[:2]
  valid_TxB = jnp.ones((T, B), bool) if valid_BxT is None else valid_BxT.T
  # Only the recurrent half runs in the loop; cast it once here, not every step.
  kernels = [
    CellKernels(w_i=None, b_i=None, w_h=k.w_h.astype(dtype), b_h=k.b_h.astype(dtype))
    for k in kernels
  ]

  def step(carries, gx_t, valid_B):
    new = []
    for k, carry in enumerate(carries):
      stepped = cell_step(kind, kernels[k], carry, gx_t[k], dtype)
      if valid_BxT is not None:
        stepped = jax.tree.map(lambda n, o: jnp.where(valid_B[:, None], n, o), stepped, carry)
      new.append(stepped)
    return new, [hidden(c) for c in new]

  def body(carries, xs):
    return step(carries, *xs)

  gx_T = [jnp.swapaxes(g, 0, 1) for g in gx]
  finals, outs_T = jax.lax.scan(body, carries, (gx_T, valid_TxB))
  return finals, [jnp.swapaxes(o, 0, 1) for o in outs_T]
