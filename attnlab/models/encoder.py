"""RNN encoder (embedding + stacked LSTM/GRU, uni- or bidirectional) and the bridge.

The encoder reads a padded source batch (PAD_ID at the end of each row) and returns
`enc_BxSxH` with zeros at padded positions plus the final state of every layer. Padding
never leaks into the results: a row's carry stops at its length and the backward direction
reads each row reversed within its length, so a padded row gives exactly the outputs and
final states of the same sequence run alone (the backward direction starts at the last real
token, not at the padding). Both directions run in one time loop after one input projection
for all steps (attnlab.models.recurrent); parameters are flax's LSTM/GRU cell trees.

A bidirectional layer gives each direction H/2 units and concatenates them, so outputs and
final states have size H either way (docs/design.md, Attention) and every score type-checks.

The bridge maps the encoder's final states to the decoder's initial states. Decoder layer l
starts from encoder layer min(l, encoder_layers - 1): equal depths pair up layer by layer, a
deeper decoder repeats the encoder's top layer state in its extra layers.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from attnlab.config.fields import check_choice
from attnlab.config.model import BRIDGES, ModelConfig
from attnlab.models import matmul, recurrent
from attnlab.tokens import PAD_ID

# One layer's recurrent state: (c_BxH, h_BxH) for an LSTM, h_BxH for a GRU.
Carry = Any


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
    dtype = matmul.compute_dtype(cfg.dtype)
    H = cfg.hidden_size
    lengths_B = source_lengths(src_BxS)
    mask_BxS = src_BxS != PAD_ID

    x_BxSxE = nn.Embed(self.vocab_size, cfg.embed_dim, dtype=dtype, name='embed')(src_BxS)
    x = nn.Dropout(cfg.dropout)(x_BxSxE, deterministic=not train)
    final_states = []
    for layer in range(cfg.encoder_layers):
      if layer > 0:
        x = nn.Dropout(cfg.dropout)(x, deterministic=not train)
      in_features = x.shape[-1]
      if cfg.bidirectional:
        # Both directions in one time loop; the backward one reads each row reversed within its
        # length, so it starts at the last real token (what nn.RNN(reverse=True) does).
        names, units = (f'layer_{layer}_fwd', f'layer_{layer}_bwd'), H // 2
      else:
        names, units = (f'layer_{layer}',), H
      kernels = [recurrent.CellParams(cfg.cell, in_features, units, name=n)() for n in names]
      # One input projection for all directions and steps: x [W_i_fwd, W_i_bwd].
      both = recurrent.CellKernels(
        w_i=jnp.concatenate([k.w_i for k in kernels], axis=-1),
        b_i=None if kernels[0].b_i is None else jnp.concatenate([k.b_i for k in kernels]),
        w_h=None,
        b_h=None,
      )
      gx_BxSxG = jnp.split(recurrent.input_gates(both, x, dtype), len(names), axis=-1)
      if cfg.bidirectional:
        gx_BxSxG[1] = recurrent.flip_within_lengths(gx_BxSxG[1], lengths_B)
      zero = recurrent.zero_carry(cfg.cell, x.shape[0], units, jnp.float32)
      finals, outs = recurrent.run_layers(
        cfg.cell, kernels, gx_BxSxG, [zero] * len(names), mask_BxS, dtype
      )
      if cfg.bidirectional:
        outs[1] = recurrent.flip_within_lengths(outs[1], lengths_B)
        x, carry = jnp.concatenate(outs, axis=-1), _concat_carries(*finals)
      else:
        x, carry = outs[0], finals[0]
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
    dtype = matmul.compute_dtype(cfg.dtype)
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
            matmul.Dense(cfg.hidden_size, use_bias=False, dtype=dtype, name=f'{part}_{layer}')(leaf)
          )
          for part, leaf in zip(parts, leaves, strict=True)
        ]
        state = jax.tree.unflatten(treedef, dense)
      init_states.append(jax.tree.map(lambda a: a.astype(jnp.float32), state))
    return tuple(init_states)
