"""The RNN encoder-decoder with every attention timing (`model.kind = 'rnn'`).

Interface shared with the Transformer (training and search call only these):

  model.apply(v, src_BxS, tgt_in_BxT, train=)                -> logits_BxTxV (teacher forcing)
  memory = model.apply(v, src_BxS, method='encode')           -> pytree, leading dim B
  carry = model.apply(v, memory, max_length, method='init_decode_carry')
  logits_BxV, attn_BxS, carry = model.apply(v, memory, tokens_B, carry, method='decode_step')

Training unrolls the same `DecoderCell` (same parameters) that `decode_step` runs, so
`model.init(rng, src, tgt_in)` creates every parameter search needs. The whole unroll's
attention weights are sown as ('intermediates', 'cross_attention') with shape BxTxS.

Memory (computed once per source): `values` and `keys` (the encoder outputs and their
projections, see `DecoderCell.project_memory`; timing fixed adds `context` and `context_gates`),
`mask` (BxS bool, True = real token), `lengths` (B int32) and `init_states` (the bridged initial
decoder states).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from attnlab.config.model import ModelConfig
from attnlab.models import matmul, recurrent
from attnlab.models.decoder import DecoderCarry, DecoderCell, Memory, unroll
from attnlab.models.encoder import Bridge, RNNEncoder, source_lengths
from attnlab.tokens import PAD_ID


class Seq2Seq(nn.Module):
  """Embedding + RNN encoder, bridge, attentional RNN decoder (docs/design.md, Attention)."""

  config: ModelConfig
  source_vocab_size: int
  target_vocab_size: int

  def setup(self):
    self.encoder = RNNEncoder(self.config, self.source_vocab_size)
    self.bridge = Bridge(self.config)
    self.decoder = DecoderCell(self.config, self.target_vocab_size)

  @matmul.with_model_dtype
  def encode(self, src_BxS: jax.Array, *, train: bool = False) -> Memory:
    enc_BxSxH, final_states = self.encoder(src_BxS, train=train)
    memory = self.decoder.project_memory(enc_BxSxH, recurrent.hidden(final_states[-1]))
    memory['mask'] = src_BxS != PAD_ID
    memory['lengths'] = source_lengths(src_BxS)
    memory['init_states'] = self.bridge(final_states)
    return memory

  @matmul.with_model_dtype
  def init_decode_carry(self, memory: Memory, max_length: int) -> DecoderCarry:
    del max_length  # An RNN's state does not grow with the output.
    return self.decoder.initial_carry(memory)

  @matmul.with_model_dtype
  def decode_step(self, memory: Memory, tokens_B: jax.Array, carry: DecoderCarry):
    """One inference step (no dropout): (logits_BxV float32, attn_BxS, new carry)."""
    carry, (logits_BxV, attn_BxS) = self.decoder(carry, tokens_B, memory, train=False)
    return logits_BxV, attn_BxS, carry

  @matmul.with_model_dtype
  def __call__(self, src_BxS: jax.Array, tgt_in_BxT: jax.Array, *, train: bool = False):
    memory = self.encode(src_BxS, train=train)
    carry = self.init_decode_carry(memory, tgt_in_BxT.shape[1])
    _, logits_BxTxV, attn_BxTxS = unroll(self.decoder, carry, tgt_in_BxT, memory, train=train)
    self.sow('intermediates', 'cross_attention', attn_BxTxS)
    assert logits_BxTxV.shape == (*tgt_in_BxT.shape, self.target_vocab_size)
    return logits_BxTxV.astype(jnp.float32)
