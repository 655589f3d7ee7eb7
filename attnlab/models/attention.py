"""One attention path: mask -> float32 softmax -> weighted sum, and the modules built on it.

* `attend(scores, mask, values)`: the single softmax-and-sum used by every score, the Luong
  local windows and every head of `MultiHeadAttention`.
* `LocalWindow` + `attention_step`: Luong (2015) global / local-m / local-p attention for the
  RNN decoder (docs/design.md, Attention).
* `MultiHeadAttention`: self, causal and cross attention with the parameter tree of
  `flax.linen.MultiHeadDotProductAttention`; weights exposed through `sow`.

Masks are bool with True = may attend, and have the rank of the scores they mask
(`...xTxS`; size-1 axes broadcast). Masked keys get exactly zero weight; a query whose keys are
all masked gets zero weights and a zero context, with finite gradients.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from attnlab.config.model import WINDOWS
from attnlab.models import matmul
from attnlab.models.dropout import Dropout

Dtype = Any


# Finite stand-in for -inf: exp underflows to 0, and x - max never overflows to -inf - -inf.
_BIG_NEG = -0.7 * float(jnp.finfo(jnp.float32).max)


def masked_softmax(scores_BxTxS, mask):
  """Float32 softmax over the last axis restricted to `mask`; masked entries are exactly 0."""
  scores_BxTxS = scores_BxTxS.astype(jnp.float32)
  if mask is None:
    return jax.nn.softmax(scores_BxTxS, axis=-1)
  if mask.ndim != scores_BxTxS.ndim:
    raise ValueError(
      f'mask of shape {mask.shape} must have the rank of the scores {scores_BxTxS.shape} '
      '(add size-1 axes explicitly, e.g. mask_BxS[:, None, :])'
    )
  mask = jnp.broadcast_to(mask, scores_BxTxS.shape)
  weights_BxTxS = jax.nn.softmax(jnp.where(mask, scores_BxTxS, _BIG_NEG), axis=-1)
  # A row with every key masked is uniform over _BIG_NEG here; zeroing makes it all zero.
  return jnp.where(mask, weights_BxTxS, 0.0)


def weighted_sum(weights_BxTxS, values_BxSxH):
  """c_t = sum_i a_ti v_i, in the values' dtype."""
  return matmul.einsum(
    '...ts,...sh->...th', weights_BxTxS.astype(values_BxSxH.dtype), values_BxSxH
  )


def attend(scores_BxTxS, mask, values_BxSxH):
  """Returns (context_BxTxH, weights_BxTxS) for scores `...xTxS` and values `...xSxH`.

  Weights are float32; `mask` (bool, True = may attend, same rank as the scores) may be None.
  """
  weights_BxTxS = masked_softmax(scores_BxTxS, mask)
  return weighted_sum(weights_BxTxS, values_BxSxH), weights_BxTxS


def window_mask(centre_BxT, radius: int, num_keys: int):
  """Luong's window of half-width D=radius around float centres p_t over key slots i = 0..S-1:
  mask_BxTxS = |i - p_t| <= D (the padding mask is applied by the caller)."""
  distance_BxTxS = jnp.arange(num_keys, dtype=jnp.float32)[None, None, :] - centre_BxT[:, :, None]
  return jnp.abs(distance_BxTxS) <= radius


def window_gaussian(centre_BxT, radius: int, num_keys: int):
  """local-p's favour for slots near p_t (Luong eq. 10): exp(-(i - p_t)^2 / (2 (D/2)^2))."""
  distance_BxTxS = jnp.arange(num_keys, dtype=jnp.float32)[None, None, :] - centre_BxT[:, :, None]
  sigma = radius / 2
  return jnp.exp(-jnp.square(distance_BxTxS) / (2 * sigma * sigma))


class LocalWindow(nn.Module):
  """Where a Luong decoder looks: `global`, `local_m` (p_t = t) or `local_p` (predicted).

  Call with the queries, the 0-based decoder step of each query (`positions_T`, int), the
  unpadded source lengths (`lengths_B`, used by local_p) and the number of key slots S; returns
  (window_mask_BxTxS, gaussian_BxTxS or None). Only local_p has a Gaussian (Luong eq. 10):
  it predicts p_t = S_b * sigmoid(v_p^T tanh(W_p q_t)) in (0, S_b) with W_p of size H x H
  (H = query size) and no biases. local_m uses p_t = t and the plain windowed softmax (eq. 7),
  so its Gaussian is None. `global` gives an all-True mask and None.
  """

  window: str
  radius: int
  dtype: Dtype = jnp.float32

  def __post_init__(self):
    if self.window not in WINDOWS:
      raise ValueError(f'unknown window {self.window!r}; choose from {", ".join(WINDOWS)}')
    if self.radius <= 0:
      raise ValueError(f'window radius must be a positive integer (got {self.radius})')
    super().__post_init__()

  @nn.compact
  def __call__(self, q_BxTxH, *, positions_T, lengths_B, num_keys: int):
    B, T = q_BxTxH.shape[:2]
    if self.window == 'global':
      return jnp.ones((B, T, num_keys), bool), None
    if self.window == 'local_m':
      if positions_T is None:
        raise ValueError('window local_m needs positions_T (the decoder step of each query)')
      centre_BxT = jnp.broadcast_to(positions_T.astype(jnp.float32)[None, :], (B, T))
      return window_mask(centre_BxT, self.radius, num_keys), None
    if lengths_B is None:
      raise ValueError('window local_p needs lengths_B (the unpadded source lengths)')
    dense = functools.partial(matmul.Dense, use_bias=False, dtype=self.dtype)
    hidden_BxTxH = jnp.tanh(dense(q_BxTxH.shape[-1], name='w_p')(q_BxTxH))
    logit_BxT = dense(1, name='v_p')(hidden_BxTxH)[..., 0].astype(jnp.float32)
    centre_BxT = lengths_B.astype(jnp.float32)[:, None] * jax.nn.sigmoid(logit_BxT)
    return (window_mask(centre_BxT, self.radius, num_keys),
            window_gaussian(centre_BxT, self.radius, num_keys))


def attention_step(
  score_module,
  window_module,
  q_BxTxH,
  keys_BxSxK,
  values_BxSxH,
  mask_BxS,
  *,
  positions_T=None,
  lengths_B=None,
):
  """The RNN decoder's whole attention: score -> window mask -> attend (-> Gaussian, local_p).

  1. scores_BxTxS = score_module(q_BxTxH, keys_BxSxK) (keys from `score_module.project_keys`).
  2. mask = mask_BxS (True = real source token; None = all) AND the positions the score can
     address (`score_module.addressable_keys`: location's slots) AND, for local windows, the
     window |i - p_t| <= D from `window_module` (a `LocalWindow`, or None for global).
  3. weights = float32 softmax over the unmasked keys (`masked_softmax`): for local_m this is
     the whole alignment (Luong eq. 7 over the window; the weights sum to 1).
  4. local_p only: weights *= exp(-(i - p_t)^2 / (2 (D/2)^2)) (Luong eq. 10, NOT
     renormalised), and the context uses these scaled weights.
  5. context_BxTxH = weights @ values_BxSxH (values' dtype). Returns (context, weights).

  positions_T: int 0-based decoder step of each of the T queries (local_m). lengths_B: unpadded
  source lengths S_b (local_p); defaults to mask_BxS.sum(-1), or S without a mask. A query whose
  window holds no real key (local_m decoding past the source) gets an all-zero weight row and
  a zero context, by design: metrics treat such rows as "attends nowhere".
  """
  scores_BxTxS = score_module(q_BxTxH, keys_BxSxK)
  B, T, S = scores_BxTxS.shape
  mask_BxTxS = None if mask_BxS is None else jnp.broadcast_to(mask_BxS[:, None, :], (B, T, S))
  addressable_S = score_module.addressable_keys(S)
  if addressable_S is not None:  # location score: no slot for positions >= max_source_length
    mask_BxTxS = combine_masks(mask_BxTxS, jnp.broadcast_to(addressable_S, (B, T, S)))
  if window_module is None or window_module.window == 'global':
    return attend(scores_BxTxS, mask_BxTxS, values_BxSxH)
  if lengths_B is None:
    lengths_B = jnp.full((B,), S) if mask_BxS is None else mask_BxS.sum(axis=-1)
  window_BxTxS, gaussian_BxTxS = window_module(
    q_BxTxH, positions_T=positions_T, lengths_B=lengths_B, num_keys=S
  )
  window_BxTxS = combine_masks(window_BxTxS, mask_BxTxS)
  weights_BxTxS = masked_softmax(scores_BxTxS, window_BxTxS)
  if gaussian_BxTxS is not None:
    weights_BxTxS = weights_BxTxS * gaussian_BxTxS
  return weighted_sum(weights_BxTxS, values_BxSxH), weights_BxTxS


def causal_mask(length: int):
  """1x1xTxT: query t may attend to keys j <= t."""
  return jnp.tril(jnp.ones((length, length), bool))[None, None, :, :]


def padding_mask(q_valid_BxT, k_valid_BxS):
  """Bx1xTxS (query AND key valid) or, with q_valid_BxT=None, the key-only Bx1x1xS."""
  k_valid_Bx1x1xS = k_valid_BxS.astype(bool)[:, None, None, :]
  if q_valid_BxT is None:
    return k_valid_Bx1x1xS
  return q_valid_BxT.astype(bool)[:, None, :, None] & k_valid_Bx1x1xS


def combine_masks(*masks):
  """Logical AND of the masks that are not None (None if all are None)."""
  masks = [m for m in masks if m is not None]
  if not masks:
    return None
  return functools.reduce(jnp.logical_and, masks)


class MultiHeadAttention(nn.Module):
  """softmax(Q K^T / sqrt(D) + mask) V per head, heads concatenated, W_o (Vaswani et al. 2017).

  Parameters `query`, `key`, `value` (kernel HxNxD) and `out` (kernel NxDxH) form the same tree
  as `flax.linen.MultiHeadDotProductAttention(num_heads=N, qkv_features=H)`. Cross attention
  computes `project_kv` once per source and calls `attend_projected` per step; a decoder's
  key/value cache stores `project_kv` outputs itself (nothing is cached on `self`). Projected
  keys and values are heads-major, BxNxSxD: the batched dots over heads read them as they are,
  so a decoding step does not transpose the memory's and the cache's K/V every time (it did,
  ~10% of a Transformer beam search on CPU). Weights BxNxTxS (pre-dropout) are sown as
  ('intermediates', 'attention_weights').
  """

  num_heads: int
  hidden_size: int
  dropout_rate: float = 0.0
  dtype: Dtype = jnp.float32
  use_bias: bool = True

  def setup(self):
    if self.hidden_size % self.num_heads:
      raise ValueError(f'num_heads={self.num_heads} does not divide hidden_size={self.hidden_size}')
    head_dim = self.hidden_size // self.num_heads
    dense = functools.partial(
      matmul.DenseGeneral,
      features=(self.num_heads, head_dim),
      axis=-1,
      dtype=self.dtype,
      use_bias=self.use_bias,
    )
    self.query = dense()
    self.key = dense()
    self.value = dense()
    self.out = matmul.DenseGeneral(
      features=self.hidden_size, axis=(-2, -1), dtype=self.dtype, use_bias=self.use_bias
    )
    self.dropout = Dropout(rate=self.dropout_rate)

  def project_kv(self, kv_BxSxH):
    """(k_BxNxSxD, v_BxNxSxD) of the memory, heads-major; compute once per source sequence."""
    return (self.key(kv_BxSxH).transpose(0, 2, 1, 3),
            self.value(kv_BxSxH).transpose(0, 2, 1, 3))

  def attention_weights(self, q_BxTxH, k_BxNxSxD, mask=None):
    """softmax(Q K^T / sqrt(D)) over the keys in `mask`: float32 BxNxTxS (no dropout, no sow).

    Search can call this for per-step weights without making 'intermediates' mutable.
    """
    if mask is not None and mask.ndim != 4:
      raise ValueError(f'attention mask must be rank 4 (BxNxTxS), got shape {mask.shape}')
    q_BxTxNxD = self.query(q_BxTxH)
    # Scale the queries (TxD) rather than the scores (TxS): same result, less work.
    q_BxTxNxD = q_BxTxNxD / jnp.asarray(math.sqrt(q_BxTxNxD.shape[-1]), q_BxTxNxD.dtype)
    scores_BxNxTxS = matmul.einsum(
      'btnd,bnsd->bnts', q_BxTxNxD, k_BxNxSxD, out_dtype=jnp.float32
    )
    return masked_softmax(scores_BxNxTxS, mask)

  def attend_projected(self, q_BxTxH, k_BxNxSxD, v_BxNxSxD, mask=None, *, deterministic=True,
                       return_weights=False):
    """Attends queries q_BxTxH over projected (`project_kv`) keys/values; mask broadcastable to
    BxNxTxS.

    Returns out_BxTxH, or (out_BxTxH, weights_BxNxTxS) with `return_weights` (the pre-dropout
    weights, for callers such as search that need them every step without 'intermediates').
    """
    weights_BxNxTxS = self.attention_weights(q_BxTxH, k_BxNxSxD, mask)
    self.sow('intermediates', 'attention_weights', weights_BxNxTxS)
    dropped_BxNxTxS = weights_BxNxTxS
    if self.dropout_rate > 0.0:
      dropped_BxNxTxS = self.dropout(weights_BxNxTxS, deterministic=deterministic)
    context_BxNxTxD = weighted_sum(dropped_BxNxTxS, v_BxNxSxD)
    out_BxTxH = self.out(context_BxNxTxD.transpose(0, 2, 1, 3))
    return (out_BxTxH, weights_BxNxTxS) if return_weights else out_BxTxH

  def __call__(self, q_BxTxH, kv_BxSxH, mask=None, *, deterministic=True):
    k_BxNxSxD, v_BxNxSxD = self.project_kv(kv_BxSxH)
    return self.attend_projected(q_BxTxH, k_BxNxSxD, v_BxNxSxD, mask, deterministic=deterministic)
