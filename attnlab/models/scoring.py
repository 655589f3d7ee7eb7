"""Attention scores: the registry behind `model.attention.score` (docs/design.md, Attention).

Every score is a linen Module with two entry points:

  keys_BxSxK = score.project_keys(enc_BxSxH)   # once per source sequence
  scores_BxTxS = score(q_BxTxH, keys_BxSxK)    # every decoder step (float32)

Work that depends only on the source (W_a h for `general`, W_k h for `concat`) lives in
`project_keys`, so a decoder computes it once and passes the keys in; nothing is cached on
`self`. Matmuls take operands in the compute `dtype` (float32 or bfloat16) and sum in float32
(models/matmul.py), parameters stay float32 and scores are returned as float32 (never rounded
to bf16) so the softmax in `attention.attend` is always float32.

  dot         q . h
  scaled_dot  q . h / sqrt(H)
  general     q^T W_a h                   (keys = W_a h)
  concat      v^T tanh(W_q q + W_k h)     (Bahdanau additive; keys = W_k h; inner size H;
                                           + b_q inside the tanh with concat_bias)
  location    e_t = W_a q_t               (one score per source slot up to max_source_length,
                                           sliced to the first S; Luong 2015)

`addressable_keys(S)` says which of S key positions a score can address: None (all) for every
score but `location`, whose W_a has no row for positions >= max_source_length. Such positions
occur only in batches wider than the slots (eval padding has no cap: long eval examples,
length-generalisation splits); `attention.attention_step` masks them, so they get exactly zero
weight, whether they are padding or real tokens beyond what the score can address.
"""

from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from attnlab.config import model as model_config
from attnlab.models import matmul

Dtype = Any


class DotScore(nn.Module):
  """e_ti = q_t . h_i. The base of every score: fields, identity keys, float32 output."""

  hidden_size: int
  max_source_length: int = 0
  dtype: Dtype = jnp.float32

  def setup(self):
    pass

  def project_keys(self, enc_BxSxH):
    return enc_BxSxH

  def addressable_keys(self, num_keys: int):
    """Bool S mask of the key positions this score can address; None = all of them."""
    del num_keys
    return None

  def _dot(self, q_BxTxK, keys_BxSxK):
    return matmul.einsum(
      'btk,bsk->bts', q_BxTxK.astype(self.dtype), keys_BxSxK.astype(self.dtype),
      out_dtype=jnp.float32,
    )

  def __call__(self, q_BxTxH, keys_BxSxK):
    return self._dot(q_BxTxH, keys_BxSxK)


class ScaledDotScore(DotScore):
  """e_ti = q_t . h_i / sqrt(H), H the query/key size (Vaswani et al. 2017)."""

  def __call__(self, q_BxTxH, keys_BxSxK):
    # Scale in float32 after the product: bfloat16 keeps fewer mantissa bits than the scale.
    return self._dot(q_BxTxH, keys_BxSxK) / math.sqrt(q_BxTxH.shape[-1])


class GeneralScore(DotScore):
  """e_ti = q_t^T W_a h_i; W_a h_i is the key, computed once per source sequence."""

  def setup(self):
    self.w_a = matmul.Dense(self.hidden_size, use_bias=False, dtype=self.dtype)

  def project_keys(self, enc_BxSxH):
    return self.w_a(enc_BxSxH)

  def __call__(self, q_BxTxH, keys_BxSxH):
    return self._dot(q_BxTxH, keys_BxSxH)


class ConcatScore(DotScore):
  """e_ti = v^T tanh(W_q q_t + b_q + W_k h_i) (Bahdanau et al. 2015); inner size = hidden_size.

  b_q exists only with `query_bias` (`model.attention.concat_bias`): the papers' form has no
  bias, OpenNMT-py's and Sockeye's MLP attention put one on the query projection.
  """

  query_bias: bool = False

  def setup(self):
    dense = lambda features, bias=False: matmul.Dense(features, use_bias=bias, dtype=self.dtype)
    self.w_q = dense(self.hidden_size, self.query_bias)
    self.w_k = dense(self.hidden_size)
    self.v = dense(1)

  def project_keys(self, enc_BxSxH):
    return self.w_k(enc_BxSxH)

  def __call__(self, q_BxTxH, keys_BxSxK):
    return self._energies(self.w_q(q_BxTxH), keys_BxSxK.astype(self.dtype))

  # Rematerialised: the backward pass recomputes the B x T x S x K tanh instead of reading it
  # back. Stored, it is the largest residual of a decoder step (written every step, read back in
  # reverse order: memory-bound on CPU); recomputed, a Bible-sized step (S = T = 48, K = 128, one
  # core) trains 14% faster with Bahdanau timing and 22% with input feeding, bit for bit the
  # same gradients (benchmarks/OPTIMISATIONS.md).
  @nn.remat
  def _energies(self, query_BxTxK, keys_BxSxK):
    hidden_BxTxSxK = jnp.tanh(query_BxTxK[:, :, None, :] + keys_BxSxK[:, None, :, :])
    return self.v(hidden_BxTxSxK)[..., 0].astype(jnp.float32)


class LocationScore(DotScore):
  """e_t = W_a q_t: scores from the query alone, one per source slot (Luong et al. 2015).

  The keys only supply S; W_a has `max_source_length` outputs and the first S are used. A
  source wider than the slots gets zero scores past them, and `addressable_keys` masks those
  positions (module docstring).
  """

  def setup(self):
    if self.max_source_length <= 0:
      raise ValueError(f'location score needs max_source_length > 0 (got {self.max_source_length})')
    self.w_a = matmul.Dense(self.max_source_length, use_bias=False, dtype=self.dtype)

  def addressable_keys(self, num_keys: int):
    return jnp.arange(num_keys) < self.max_source_length

  def __call__(self, q_BxTxH, keys_BxSxK):
    num_keys = keys_BxSxK.shape[1]
    scores_BxTxL = self.w_a(q_BxTxH).astype(jnp.float32)  # L = max_source_length slots
    if num_keys <= self.max_source_length:
      return scores_BxTxL[..., :num_keys]
    beyond = num_keys - self.max_source_length
    return jnp.pad(scores_BxTxL, ((0, 0), (0, 0), (0, beyond)))


SCORES: dict[str, type[DotScore]] = {
  'dot': DotScore,
  'scaled_dot': ScaledDotScore,
  'general': GeneralScore,
  'concat': ConcatScore,
  'location': LocationScore,
}
assert tuple(SCORES) == model_config.SCORES, 'config/model.py SCORES names these'


def make_score(
  name: str,
  *,
  hidden_size: int,
  max_source_length: int = 0,
  concat_bias: bool = False,
  dtype: Dtype = jnp.float32,
  name_: str | None = None,
) -> DotScore:
  """Builds score `name` from SCORES; `name_` is the module name (None: Flax's default).

  `concat_bias` adds b_q to the concat score's query projection (concat only).
  """
  if name not in SCORES:
    raise ValueError(f'unknown score {name!r}; choose from {", ".join(sorted(SCORES))}')
  if name == 'location' and max_source_length <= 0:
    raise ValueError(f'location score needs max_source_length > 0 (got {max_source_length})')
  options = {}
  if concat_bias:
    if name != 'concat':
      raise ValueError(f'concat_bias applies to the concat score only (got {name!r})')
    options['query_bias'] = True
  return SCORES[name](
    hidden_size=hidden_size, max_source_length=max_source_length, dtype=dtype, name=name_,
    **options,
  )
