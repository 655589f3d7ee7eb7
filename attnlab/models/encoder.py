"""RNN encoder (embedding + stacked LSTM/GRU, uni- or bidirectional) and the bridge.

The encoder reads a padded source batch (PAD_ID at the end of each row) and returns
`enc_BxSxH` with zeros at padded positions plus the final state of every layer. Padding
never leaks into the results: each direction runs with `seq_lengths`, so a padded row gives
exactly the outputs and final states of the same sequence run alone (the backward direction
starts at the last real token, not at the padding).

A bidirectional layer gives each direction H/2 units and concatenates them, so outputs and
final states have size H either way (DESIGN.md section 1) and every score type-checks.

The bridge maps the encoder's final states to the decoder's initial states. Decoder layer l
starts from encoder layer min(l, encoder_layers - 1): equal depths pair up layer by layer, a
deeper decoder repeats the encoder's top layer state in its extra layers.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from attnlab.config import ModelConfig, check_choice
from attnlab.models import PAD_ID

CELLS = ('lstm', 'gru')
BRIDGES = ('dense', 'copy', 'zero')

# One layer's recurrent state: (c_BxH, h_BxH) for an LSTM, h_BxH for a GRU.
Carry = Any


def make_cell(kind: str, features: int, dtype: Any, name: str | None = None) -> nn.RNNCellBase:
  """An LSTM (flax OptimizedLSTMCell, carry (c, h)) or GRU (carry h) cell of `features` units."""
  check_choice('model.cell', kind, CELLS)
  if kind == 'lstm':
    return nn.OptimizedLSTMCell(features, dtype=dtype, name=name)
  return nn.GRUCell(features, dtype=dtype, name=name)


def source_lengths(src_BxS: jax.Array) -> jax.Array:
  """Number of non-PAD tokens per row (padding sits at the end)."""
  return jnp.sum(src_BxS != PAD_ID, axis=-1).astype(jnp.int32)


def _concat_carries(fwd: Carry, bwd: Carry) -> Carry:
  return jax.tree.map(lambda f, b: jnp.concatenate([f, b], axis=-1), fwd, bwd)


class RNNEncoder(nn.Module):
  """Embeds the source and runs `encoder_layers` recurrent layers over it.

  `__call__(src_BxS, *, train) -> (enc_BxSxH, final_states)`: `final_states` is a list with
  one carry per layer, each of size H (a bidirectional layer's forward and backward final
  carries are concatenated leaf by leaf: c = [c_fwd; c_bwd], h = [h_fwd; h_bwd]). Dropout
  (rng stream 'dropout') acts on the embeddings and between layers when `train` is True.
  """

  config: ModelConfig
  vocab_size: int

  @nn.compact
  def __call__(self, src_BxS: jax.Array, *, train: bool) -> tuple[jax.Array, list[Carry]]:
    cfg = self.config
    dtype = jnp.dtype(cfg.dtype)
    H = cfg.hidden_size
    lengths_B = source_lengths(src_BxS)
    mask_BxS = src_BxS != PAD_ID

    x_BxSxE = nn.Embed(self.vocab_size, cfg.embed_dim, dtype=dtype, name='embed')(src_BxS)
    x = nn.Dropout(cfg.dropout)(x_BxSxE, deterministic=not train)
    final_states = []
    for layer in range(cfg.encoder_layers):
      if layer > 0:
        x = nn.Dropout(cfg.dropout)(x, deterministic=not train)
      if cfg.bidirectional:
        units = H // 2
        # What nn.Bidirectional does; the cells (which hold the params) are named per layer.
        fwd_rnn = nn.RNN(make_cell(cfg.cell, units, dtype, name=f'layer_{layer}_fwd'))
        bwd_rnn = nn.RNN(make_cell(cfg.cell, units, dtype, name=f'layer_{layer}_bwd'))
        fwd, x_fwd = fwd_rnn(x, seq_lengths=lengths_B, return_carry=True)
        bwd, x_bwd = bwd_rnn(
          x, seq_lengths=lengths_B, return_carry=True, reverse=True, keep_order=True
        )
        x = jnp.concatenate([x_fwd, x_bwd], axis=-1)
        carry = _concat_carries(fwd, bwd)
      else:
        rnn = nn.RNN(make_cell(cfg.cell, H, dtype, name=f'layer_{layer}'))
        carry, x = rnn(x, seq_lengths=lengths_B, return_carry=True)
      # Outputs past a row's length are whatever the cell computed on padding: zero them.
      x = jnp.where(mask_BxS[:, :, None], x, jnp.zeros((), x.dtype))
      final_states.append(carry)
    enc_BxSxH = x
    assert enc_BxSxH.shape == (*src_BxS.shape, H), enc_BxSxH.shape
    return enc_BxSxH, final_states


class Bridge(nn.Module):
  """Encoder final states -> the decoder's initial state for each of `decoder_layers`.

  `dense`: h0 = tanh(W_h [h_fwd; h_bwd]) (and c0 = tanh(W_c [c_fwd; c_bwd]) for an LSTM),
  one weight matrix per decoder layer and state part, no bias. `copy`: the concatenated final
  state as is. `zero`: zeros. Decoder layer l reads encoder layer min(l, encoder_layers - 1).
  States come out in float32 (the decoder keeps its recurrent state in float32).
  """

  config: ModelConfig

  @nn.compact
  def __call__(self, final_states: list[Carry]) -> tuple[Carry, ...]:
    cfg = self.config
    check_choice('model.bridge', cfg.bridge, BRIDGES)
    dtype = jnp.dtype(cfg.dtype)
    num_encoder = len(final_states)
    init_states = []
    for layer in range(cfg.decoder_layers):
      source = final_states[min(layer, num_encoder - 1)]
      if cfg.bridge == 'zero':
        state = jax.tree.map(jnp.zeros_like, source)
      elif cfg.bridge == 'copy':
        state = source
      else:
        leaves, treedef = jax.tree.flatten(source)
        # LSTM leaves are (c, h); a GRU has h only.
        parts = ('c', 'h') if len(leaves) == 2 else ('h',)
        dense = [
          jnp.tanh(
            nn.Dense(cfg.hidden_size, use_bias=False, dtype=dtype, name=f'{part}_{layer}')(leaf)
          )
          for part, leaf in zip(parts, leaves, strict=True)
        ]
        state = jax.tree.unflatten(treedef, dense)
      init_states.append(jax.tree.map(lambda a: a.astype(jnp.float32), state))
    return tuple(init_states)
