"""The PyTorch reference Transformer (`TorchTransformer`), loading attnlab's Flax parameters.

`nn.TransformerEncoder/DecoderLayer` (pre-LN, ReLU, batch first) with sinusoidal positions.
Decoding recomputes the decoder over the prefix each step, because `nn.TransformerDecoder` has
no key/value cache (what its users do). Search and the train step: benchmarks/torch_reference.py.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from benchmarks.torch_reference import BOS_ID, PAD_ID, _t


def sinusoidal_positions(max_length: int, hidden_size: int) -> torch.Tensor:
  position = torch.arange(max_length, dtype=torch.float64)[:, None]
  inv_freq = 10000.0 ** (-torch.arange(0, hidden_size, 2, dtype=torch.float64) / hidden_size)
  table = torch.zeros(max_length, hidden_size, dtype=torch.float64)
  table[:, 0::2] = torch.sin(position * inv_freq)
  table[:, 1::2] = torch.cos(position * inv_freq)
  return table.float()


class TorchTransformer(nn.Module):
  """Pre-LN encoder-decoder Transformer from torch.nn's layers (attnlab's `Transformer`)."""

  def __init__(
    self,
    src_vocab: int,
    tgt_vocab: int,
    *,
    hidden_size: int,
    num_heads: int,
    mlp_dim: int,
    encoder_layers: int,
    decoder_layers: int,
    dropout: float,
    max_length: int = 512,
  ):
    super().__init__()
    H = hidden_size
    self.hidden_size = H
    layer = dict(
      d_model=H,
      nhead=num_heads,
      dim_feedforward=mlp_dim,
      dropout=dropout,
      batch_first=True,
      norm_first=True,
      layer_norm_eps=1e-6,
    )
    self.src_embed = nn.Embedding(src_vocab, H)
    self.tgt_embed = nn.Embedding(tgt_vocab, H)
    self.register_buffer('positions', sinusoidal_positions(max_length, H), persistent=False)
    self.encoder = nn.TransformerEncoder(
      nn.TransformerEncoderLayer(**layer),
      encoder_layers,
      norm=nn.LayerNorm(H, eps=1e-6),
      enable_nested_tensor=False,
    )
    self.decoder = nn.TransformerDecoder(
      nn.TransformerDecoderLayer(**layer), decoder_layers, norm=nn.LayerNorm(H, eps=1e-6)
    )
    self.logits = nn.Linear(H, tgt_vocab)
    self.drop = nn.Dropout(dropout)

  def _embed(self, embed: nn.Embedding, tokens: torch.Tensor) -> torch.Tensor:
    x = embed(tokens) * math.sqrt(self.hidden_size) + self.positions[: tokens.shape[1]]
    return self.drop(x)

  def encode(self, src: torch.Tensor):
    pad = src == PAD_ID
    return {
      'enc': self.encoder(self._embed(self.src_embed, src), src_key_padding_mask=pad),
      'pad': pad,
    }

  def decode(self, memory: dict, tgt_in: torch.Tensor) -> torch.Tensor:
    T = tgt_in.shape[1]
    causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)  # True = hidden
    x = self.decoder(
      self._embed(self.tgt_embed, tgt_in),
      memory['enc'],
      tgt_mask=causal,
      tgt_is_causal=True,
      memory_key_padding_mask=memory['pad'],
    )
    return self.logits(x)

  def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
    return self.decode(self.encode(src), tgt_in)

  def start(self, src: torch.Tensor):
    memory = self.encode(src)
    return memory, {'prefix': torch.full((src.shape[0], 0), BOS_ID, dtype=torch.long)}

  def decode_step(self, memory: dict, tokens: torch.Tensor, state):
    """No cache in nn.TransformerDecoder: rerun the decoder over the prefix (weights unused)."""
    prefix = torch.cat([state['prefix'], tokens[:, None]], 1)
    logits = self.decode(memory, prefix)[:, -1]
    return logits, None, {'prefix': prefix}

  @torch.no_grad()
  def load_flax_params(self, params: dict) -> None:
    """Copies attnlab Transformer parameters (pre-LN) into this module."""
    H = self.hidden_size
    mat = lambda k: _t(np.asarray(k).reshape(H, -1)).T  # Flax x @ K -> torch W = K^T
    vec = lambda b: _t(np.asarray(b).reshape(-1))

    def mha(torch_mha, p):
      torch_mha.in_proj_weight.copy_(
        torch.cat([mat(p[n]['kernel']) for n in ('query', 'key', 'value')])
      )
      torch_mha.in_proj_bias.copy_(
        torch.cat([vec(p[n]['bias']) for n in ('query', 'key', 'value')])
      )
      torch_mha.out_proj.weight.copy_(_t(np.asarray(p['out']['kernel']).reshape(-1, H)).T)
      torch_mha.out_proj.bias.copy_(vec(p['out']['bias']))

    def norm(torch_ln, p):
      torch_ln.weight.copy_(vec(p['scale']))
      torch_ln.bias.copy_(vec(p['bias']))

    def ffn(torch_layer, p):
      torch_layer.linear1.weight.copy_(_t(p['wi']['kernel']).T)
      torch_layer.linear1.bias.copy_(vec(p['wi']['bias']))
      torch_layer.linear2.weight.copy_(_t(p['wo']['kernel']).T)
      torch_layer.linear2.bias.copy_(vec(p['wo']['bias']))

    self.src_embed.weight.copy_(_t(params['src_embed']['embedding']))
    self.tgt_embed.weight.copy_(_t(params['tgt_embed']['embedding']))
    for i, layer in enumerate(self.encoder.layers):
      p = params[f'encoder_layers_{i}']
      mha(layer.self_attn, p['self_attn'])
      norm(layer.norm1, p['ln_attn'])
      norm(layer.norm2, p['ln_ffn'])
      ffn(layer, p['ffn'])
    for i, layer in enumerate(self.decoder.layers):
      p = params[f'decoder_layers_{i}']
      mha(layer.self_attn, p['self_attn'])
      mha(layer.multihead_attn, p['cross_attn'])
      norm(layer.norm1, p['ln_self'])
      norm(layer.norm2, p['ln_cross'])
      norm(layer.norm3, p['ln_ffn'])
      ffn(layer, p['ffn'])
    norm(self.encoder.norm, params['enc_final_ln'])
    norm(self.decoder.norm, params['dec_final_ln'])
    self.logits.weight.copy_(_t(params['logits_dense']['kernel']).T)
    self.logits.bias.copy_(vec(params['logits_dense']['bias']))
