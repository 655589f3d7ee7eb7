"""Transformer encoder-decoder (Vaswani et al. 2017) built on the shared MultiHeadAttention.

Sinusoidal positions, token embeddings scaled by sqrt(H), pre- or post-LN blocks
(`model.transformer.norm`) of multi-head attention + ReLU feed-forward with residuals and
dropout (`model.dropout`, also on the attention weights; models/dropout.py: flax's masks,
drawn in one fused kernel on CPU). The encoder uses padding-masked self
attention; the decoder causal self attention and cross attention over the encoder output.
Pre-LN stacks end with a LayerNorm. H = `model.hidden_size`; `model.embed_dim` is not used
(embeddings must have size H to be added to the residual stream).

The interface is the RNN Seq2Seq's, so training and search never ask which family they run:
* `__call__(src_BxS, tgt_in_BxT, *, train)` -> float32 logits_BxTxV (teacher forcing); sows
  the last decoder layer's cross attention, mean over heads, as ('intermediates',
  'cross_attention') BxTxS.
* `encode(src_BxS)` -> memory: encoder output, source mask and the cross-attention K/V of every
  decoder layer, projected once per source.
* `init_decode_carry(memory, max_length)` -> a self-attention K/V cache per decoder layer and
  the position of every row. Every leaf of memory and carry has leading dim B.
* `decode_step(memory, tokens_B, carry)` -> (logits_BxV, attn_BxS, carry): one cached step.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from attnlab.config.fields import check_choice
from attnlab.config.model import NORMS, ModelConfig
from attnlab.models import attention as attn_lib
from attnlab.models import matmul
from attnlab.models.dropout import Dropout
from attnlab.tokens import PAD_ID

Memory = dict[str, Any]
Carry = dict[str, Any]


def sinusoidal_positions(max_length: int, hidden_size: int) -> np.ndarray:
  """PE[p, 2i] = sin(p / 10000^(2i/H)), PE[p, 2i+1] = cos(p / 10000^(2i/H)); float32 LxH."""
  if hidden_size % 2:
    raise ValueError(f'sinusoidal positions need an even hidden_size, got {hidden_size}')
  position_Lx1 = np.arange(max_length, dtype=np.float64)[:, None]
  inv_freq_1xH2 = 10000.0 ** (-np.arange(0, hidden_size, 2, dtype=np.float64) / hidden_size)
  table_LxH = np.zeros((max_length, hidden_size), np.float64)
  table_LxH[:, 0::2] = np.sin(position_Lx1 * inv_freq_1xH2[None, :])
  table_LxH[:, 1::2] = np.cos(position_Lx1 * inv_freq_1xH2[None, :])
  return table_LxH.astype(np.float32)


class FeedForward(nn.Module):
  hidden_size: int
  mlp_dim: int
  dropout: float
  dtype: Any

  @nn.compact
  def __call__(self, x_BxTxH, *, deterministic: bool):
    h_BxTxF = nn.relu(matmul.Dense(self.mlp_dim, dtype=self.dtype, name='wi')(x_BxTxH))
    h_BxTxF = Dropout(self.dropout)(h_BxTxF, deterministic=deterministic)
    return matmul.Dense(self.hidden_size, dtype=self.dtype, name='wo')(h_BxTxF)


class _Block(nn.Module):
  """Shared pieces of both layer kinds: the residual wrapper and the modules' settings."""

  hidden_size: int
  num_heads: int
  mlp_dim: int
  dropout: float
  norm: str
  dtype: Any

  def _mha(self):
    return attn_lib.MultiHeadAttention(self.num_heads, self.hidden_size, self.dropout, self.dtype)

  def _ffn(self):
    return FeedForward(self.hidden_size, self.mlp_dim, self.dropout, self.dtype)

  def _residual(self, x_BxTxH, sublayer, layer_norm, deterministic: bool):
    """pre: x + drop(f(LN(x)));  post: LN(x + drop(f(x)))."""
    drop = lambda y: self.drop(y, deterministic=deterministic)
    if self.norm == 'pre':
      return x_BxTxH + drop(sublayer(layer_norm(x_BxTxH)))
    return layer_norm(x_BxTxH + drop(sublayer(x_BxTxH)))


class EncoderLayer(_Block):
  def setup(self):
    self.self_attn = self._mha()
    self.ffn = self._ffn()
    self.drop = Dropout(self.dropout)
    self.ln_attn = nn.LayerNorm(dtype=self.dtype)
    self.ln_ffn = nn.LayerNorm(dtype=self.dtype)

  def __call__(self, x_BxSxH, mask_Bx1x1xS, *, deterministic: bool):
    attend = lambda y: self.self_attn(y, y, mask_Bx1x1xS, deterministic=deterministic)
    x_BxSxH = self._residual(x_BxSxH, attend, self.ln_attn, deterministic)
    ffn = functools.partial(self.ffn, deterministic=deterministic)
    return self._residual(x_BxSxH, ffn, self.ln_ffn, deterministic)


class DecoderLayer(_Block):
  """Causal self attention, cross attention, feed-forward; full sequence or one cached step."""

  def setup(self):
    self.self_attn = self._mha()
    self.cross_attn = self._mha()
    self.ffn = self._ffn()
    self.drop = Dropout(self.dropout)
    self.ln_self = nn.LayerNorm(dtype=self.dtype)
    self.ln_cross = nn.LayerNorm(dtype=self.dtype)
    self.ln_ffn = nn.LayerNorm(dtype=self.dtype)

  def project_memory(self, enc_BxSxH):
    return self.cross_attn.project_kv(enc_BxSxH)

  def _cross_and_ffn(self, x_BxTxH, cross_kv, cross_mask, deterministic, with_weights):
    weights = []

    def cross(y_BxTxH):
      out_BxTxH, weights_BxNxTxS = self.cross_attn.attend_projected(
        y_BxTxH, *cross_kv, cross_mask, deterministic=deterministic, return_weights=True
      )
      if with_weights:
        weights.append(weights_BxNxTxS.mean(axis=1))
      return out_BxTxH

    x_BxTxH = self._residual(x_BxTxH, cross, self.ln_cross, deterministic)
    ffn = functools.partial(self.ffn, deterministic=deterministic)
    x_BxTxH = self._residual(x_BxTxH, ffn, self.ln_ffn, deterministic)
    return x_BxTxH, (weights[0] if with_weights else None)

  def __call__(
    self, x_BxTxH, cross_kv, cross_mask, *, deterministic: bool, with_weights: bool = False
  ):
    """Teacher forcing over all T positions; returns (x_BxTxH, cross weights BxTxS or None)."""
    causal_1x1xTxT = attn_lib.causal_mask(x_BxTxH.shape[1])
    attend = lambda y: self.self_attn(y, y, causal_1x1xTxT, deterministic=deterministic)
    x_BxTxH = self._residual(x_BxTxH, attend, self.ln_self, deterministic)
    return self._cross_and_ffn(x_BxTxH, cross_kv, cross_mask, deterministic, with_weights)

  def step(self, x_Bx1xH, cache, pos_B, cross_kv, cross_mask, *, with_weights: bool = False):
    """One position per row: writes its K/V at pos_B into the (heads-major) cache, attends
    over <= pos_B."""
    cache_k_BxNxLxD, cache_v_BxNxLxD = cache
    L = cache_k_BxNxLxD.shape[2]
    at_pos_BxL = jnp.arange(L)[None, :] == pos_B[:, None]
    write_Bx1xLx1 = at_pos_BxL[:, None, :, None]
    new_cache = []

    def attend(y_Bx1xH):
      k_BxNx1xD, v_BxNx1xD = self.self_attn.project_kv(y_Bx1xH)
      k_BxNxLxD = jnp.where(write_Bx1xLx1, k_BxNx1xD, cache_k_BxNxLxD)
      v_BxNxLxD = jnp.where(write_Bx1xLx1, v_BxNx1xD, cache_v_BxNxLxD)
      new_cache.append((k_BxNxLxD, v_BxNxLxD))
      seen_Bx1x1xL = (jnp.arange(L)[None, :] <= pos_B[:, None])[:, None, None, :]
      return self.self_attn.attend_projected(y_Bx1xH, k_BxNxLxD, v_BxNxLxD, seen_Bx1x1xL)

    x_Bx1xH = self._residual(x_Bx1xH, attend, self.ln_self, True)
    x_Bx1xH, weights = self._cross_and_ffn(x_Bx1xH, cross_kv, cross_mask, True, with_weights)
    return x_Bx1xH, new_cache[0], weights


class Transformer(nn.Module):
  """Encoder-decoder Transformer with the Seq2Seq interface (module docstring)."""

  config: ModelConfig
  source_vocab_size: int
  target_vocab_size: int

  def setup(self):
    c = self.config
    check_choice('model.transformer.norm', c.transformer.norm, NORMS)
    H, tc = c.hidden_size, c.transformer
    self.dtype = matmul.compute_dtype(c.dtype)
    self.positions_LxH = sinusoidal_positions(tc.max_length, H)
    # std H^-1/2, so that the sqrt(H)-scaled embeddings have unit scale like the positions.
    embed = functools.partial(
      nn.Embed, features=H, dtype=self.dtype, embedding_init=nn.initializers.normal(stddev=H**-0.5)
    )
    self.src_embed = embed(self.source_vocab_size)
    self.tgt_embed = embed(self.target_vocab_size)
    block = dict(
      hidden_size=H,
      num_heads=tc.num_heads,
      mlp_dim=tc.mlp_dim,
      dropout=c.dropout,
      norm=tc.norm,
      dtype=self.dtype,
    )
    self.encoder_layers = [EncoderLayer(**block) for _ in range(c.encoder_layers)]
    self.decoder_layers = [DecoderLayer(**block) for _ in range(c.decoder_layers)]
    if tc.norm == 'pre':
      self.enc_final_ln = nn.LayerNorm(dtype=self.dtype)
      self.dec_final_ln = nn.LayerNorm(dtype=self.dtype)
    self.logits_dense = matmul.Dense(self.target_vocab_size, dtype=self.dtype)
    self.embed_dropout = Dropout(c.dropout)

  def _check_length(self, length: int, what: str):
    if length > self.config.transformer.max_length:
      raise ValueError(
        f'{what} length {length} exceeds model.transformer.max_length='
        f'{self.config.transformer.max_length}; raise it in the config'
      )

  def _embed(self, embed, tokens_BxT, positions_BxTxH, deterministic: bool):
    x_BxTxH = embed(tokens_BxT) * jnp.asarray(math.sqrt(self.config.hidden_size), self.dtype)
    x_BxTxH = x_BxTxH + positions_BxTxH.astype(self.dtype)
    return self.embed_dropout(x_BxTxH, deterministic=deterministic)

  @matmul.with_model_dtype
  def encode(self, src_BxS, *, train: bool = False) -> Memory:
    B, S = src_BxS.shape
    self._check_length(S, 'source')
    mask_BxS = src_BxS != PAD_ID
    x_BxSxH = self._embed(self.src_embed, src_BxS, self.positions_LxH[None, :S], not train)
    self_mask_Bx1x1xS = attn_lib.padding_mask(None, mask_BxS)
    for layer in self.encoder_layers:
      x_BxSxH = layer(x_BxSxH, self_mask_Bx1x1xS, deterministic=not train)
    if self.config.transformer.norm == 'pre':
      x_BxSxH = self.enc_final_ln(x_BxSxH)
    cross_kv = [layer.project_memory(x_BxSxH) for layer in self.decoder_layers]
    return {
      'enc_BxSxH': x_BxSxH,
      'mask_BxS': mask_BxS,
      'cross_k': tuple(k for k, _ in cross_kv),
      'cross_v': tuple(v for _, v in cross_kv),
    }

  def _logits(self, x_BxTxH):
    if self.config.transformer.norm == 'pre':
      x_BxTxH = self.dec_final_ln(x_BxTxH)
    return self.logits_dense(x_BxTxH).astype(jnp.float32)

  @matmul.with_model_dtype
  def __call__(self, src_BxS, tgt_in_BxT, *, train: bool = False):
    T = tgt_in_BxT.shape[1]
    self._check_length(T, 'target')
    memory = self.encode(src_BxS, train=train)
    x_BxTxH = self._embed(self.tgt_embed, tgt_in_BxT, self.positions_LxH[None, :T], not train)
    cross_mask_Bx1x1xS = attn_lib.padding_mask(None, memory['mask_BxS'])
    last = len(self.decoder_layers) - 1
    for idx, layer in enumerate(self.decoder_layers):
      kv = (memory['cross_k'][idx], memory['cross_v'][idx])
      x_BxTxH, weights_BxTxS = layer(
        x_BxTxH, kv, cross_mask_Bx1x1xS, deterministic=not train, with_weights=idx == last
      )
    self.sow('intermediates', 'cross_attention', weights_BxTxS)
    return self._logits(x_BxTxH)

  @matmul.with_model_dtype
  def init_decode_carry(self, memory: Memory, max_length: int) -> Carry:
    self._check_length(max_length, 'decode')
    B = memory['enc_BxSxH'].shape[0]
    c = self.config
    N = c.transformer.num_heads
    zeros = jnp.zeros((B, N, max_length, c.hidden_size // N), self.dtype)  # heads-major
    return {
      'k': tuple(zeros for _ in self.decoder_layers),
      'v': tuple(zeros for _ in self.decoder_layers),
      'pos_B': jnp.zeros((B,), jnp.int32),
    }

  @matmul.with_model_dtype
  def decode_step(self, memory: Memory, tokens_B, carry: Carry):
    pos_B = carry['pos_B']
    positions_Bx1xH = jnp.take(jnp.asarray(self.positions_LxH), pos_B, axis=0)[:, None, :]
    x_Bx1xH = self._embed(self.tgt_embed, tokens_B[:, None], positions_Bx1xH, True)
    cross_mask_Bx1x1xS = attn_lib.padding_mask(None, memory['mask_BxS'])
    last = len(self.decoder_layers) - 1
    ks, vs = [], []
    for idx, layer in enumerate(self.decoder_layers):
      kv = (memory['cross_k'][idx], memory['cross_v'][idx])
      cache = (carry['k'][idx], carry['v'][idx])
      x_Bx1xH, (k, v), weights_Bx1xS = layer.step(
        x_Bx1xH, cache, pos_B, kv, cross_mask_Bx1x1xS, with_weights=idx == last
      )
      ks.append(k)
      vs.append(v)
    logits_BxV = self._logits(x_Bx1xH)[:, 0]
    return logits_BxV, weights_Bx1xS[:, 0], {'k': tuple(ks), 'v': tuple(vs), 'pos_B': pos_B + 1}
