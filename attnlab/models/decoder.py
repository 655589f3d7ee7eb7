"""One step of the attentional RNN decoder; training unrolls it with `nn.scan`, search loops it.

`DecoderCell` owns everything the decoder learns: the target embedding, the stacked LSTM/GRU
cells, the attention score (or multi-head cross attention), the local window, W_c and W_o.
`project_memory` turns the encoder outputs into what every step reads (projected keys, values)
ONCE per source sequence; `__call__` is one step.

The step, per `model.attention.timing` (DESIGN.md section 1; s = top layer's hidden state):

  bahdanau  c_t = attend(s_{t-1});  s_t = RNN(s_{t-1}, [emb(y_{t-1}); c_t])
  luong     s_t = RNN(s_{t-1}, [emb(y_{t-1}); h~_{t-1} if input_feeding]);  c_t = attend(s_t)
  none      s_t = RNN(s_{t-1}, emb(y_{t-1}))
  readout   h~_t = tanh(W_c [s_t; c_t]) (tanh(W_c s_t) for none, no bias);  logits = W_o h~_t + b

The attention input of a stacked decoder goes to its bottom layer; the query is the top layer's
hidden state. Dropout (rng 'dropout', train only) acts on the embedding, between layers and on
h~_t before W_o; input feeding carries h~_t before dropout.

Carry (every leaf has leading dim B so that search can tile and gather rows):
  states  tuple over layers of the cell carry ((c_BxH, h_BxH) LSTM, h_BxH GRU), float32
  feed    h~_{t-1}, BxH float32 (zeros at t = 0; read only with input feeding)
  step    int32 B, the 0-based index t of the token being predicted (local_m centres p_t = t)
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from attnlab.config import ModelConfig
from attnlab.models import attention, scoring
from attnlab.models.encoder import make_cell

Memory = dict[str, Any]
DecoderCarry = dict[str, Any]


def top_hidden(layer_carry) -> jax.Array:
  """h_BxH of one layer's carry: the LSTM's (c, h) or the GRU's h."""
  return layer_carry[1] if isinstance(layer_carry, tuple) else layer_carry


class DecoderCell(nn.Module):
  """One decoder step `(carry, y_prev_B, memory) -> (carry, (logits_BxV, attn_BxS))`."""

  config: ModelConfig
  vocab_size: int

  def setup(self):
    cfg = self.config
    att = cfg.attention
    dtype = jnp.dtype(cfg.dtype)
    H = cfg.hidden_size
    self.embed = nn.Embed(self.vocab_size, cfg.embed_dim, dtype=dtype)
    self.cells = [make_cell(cfg.cell, H, dtype) for _ in range(cfg.decoder_layers)]
    self.attentive = att.timing != 'none'
    self.multi_head = self.attentive and att.num_heads > 1
    if self.multi_head:
      self.mha = attention.MultiHeadAttention(att.num_heads, H, cfg.dropout, dtype)
    elif self.attentive:
      self.score = scoring.make_score(
        att.score, hidden_size=H, max_source_length=att.max_source_length, dtype=dtype
      )
      if att.window != 'global':
        self.window = attention.LocalWindow(att.window, att.window_radius, dtype)
    self.w_c = nn.Dense(H, use_bias=False, dtype=dtype)
    self.w_o = nn.Dense(self.vocab_size, dtype=dtype)
    self.dropout = nn.Dropout(cfg.dropout)

  def project_memory(self, enc_BxSxH: jax.Array) -> Memory:
    """Keys and values every step attends over, computed once per source sequence.

    Single head: keys = score.project_keys(enc), values = enc. Multi-head: the per-head
    projections (k_BxSxNxD, v_BxSxNxD). No attention: keys = values = enc (unread).
    """
    if self.multi_head:
      keys, values = self.mha.project_kv(enc_BxSxH)
    elif self.attentive:
      keys, values = self.score.project_keys(enc_BxSxH), enc_BxSxH
    else:
      keys, values = enc_BxSxH, enc_BxSxH
    return {'keys': keys, 'values': values}

  def initial_carry(self, memory: Memory) -> DecoderCarry:
    """Bridge states from `memory['init_states']`, zero h~_{-1}, step 0."""
    batch = memory['mask'].shape[0]
    H = self.config.hidden_size
    return {
      'states': memory['init_states'],
      'feed': jnp.zeros((batch, H), jnp.float32),
      'step': jnp.zeros((batch,), jnp.int32),
    }

  def _attend(self, q_BxH, memory: Memory, step_B, train: bool):
    """(c_BxH, weights_BxS) for the query q_BxH (T = 1)."""
    q_Bx1xH = q_BxH[:, None, :]
    mask_BxS = memory['mask']
    if self.multi_head:
      mask_Bx1x1xS = mask_BxS[:, None, None, :]
      k_BxSxNxD, v_BxSxNxD = memory['keys'], memory['values']
      context_Bx1xH, weights_BxNx1xS = self.mha.attend_projected(
        q_Bx1xH, k_BxSxNxD, v_BxSxNxD, mask_Bx1x1xS, deterministic=not train, return_weights=True
      )
      weights_Bx1xS = jnp.mean(weights_BxNx1xS, axis=1)
    else:
      context_Bx1xH, weights_Bx1xS = attention.attention_step(
        self.score,
        getattr(self, 'window', None),
        q_Bx1xH,
        memory['keys'],
        memory['values'],
        mask_BxS,
        # Every row of a batch (and every beam) is at the same step: one position serves all.
        positions_T=step_B[:1],
        lengths_B=memory['lengths'],
      )
    return context_Bx1xH[:, 0, :], weights_Bx1xS[:, 0, :]

  def _rnn(self, states, x_BxI, train: bool):
    """Runs the stacked cells one step; returns (new states, top layer's h_BxH)."""
    new_states = []
    for layer, cell in enumerate(self.cells):
      if layer > 0:
        x_BxI = self.dropout(x_BxI, deterministic=not train)
      state, x_BxI = cell(states[layer], x_BxI)
      # Keep the carry float32 whatever the compute dtype (nn.scan needs a fixed carry type).
      new_states.append(jax.tree.map(lambda a: a.astype(jnp.float32), state))
    return tuple(new_states), x_BxI

  def __call__(
    self, carry: DecoderCarry, y_prev_B: jax.Array, memory: Memory, *, train: bool = False
  ):
    timing = self.config.attention.timing
    states, step_B = carry['states'], carry['step']
    emb_BxE = self.dropout(self.embed(y_prev_B), deterministic=not train)
    if timing == 'bahdanau':
      context_BxH, weights_BxS = self._attend(top_hidden(states[-1]), memory, step_B, train)
      states, s_BxH = self._rnn(states, jnp.concatenate([emb_BxE, context_BxH], axis=-1), train)
    elif timing == 'luong':
      x_BxI = emb_BxE
      if self.config.attention.input_feeding:
        x_BxI = jnp.concatenate([emb_BxE, carry['feed'].astype(emb_BxE.dtype)], axis=-1)
      states, s_BxH = self._rnn(states, x_BxI, train)
      context_BxH, weights_BxS = self._attend(s_BxH, memory, step_B, train)
    else:
      states, s_BxH = self._rnn(states, emb_BxE, train)
      weights_BxS = jnp.zeros(memory['mask'].shape, jnp.float32)
    if self.attentive:
      readout_in = jnp.concatenate([s_BxH, context_BxH.astype(s_BxH.dtype)], axis=-1)
    else:
      readout_in = s_BxH
    h_tilde_BxH = jnp.tanh(self.w_c(readout_in))
    logits_BxV = self.w_o(self.dropout(h_tilde_BxH, deterministic=not train))
    new_carry = {
      'states': states,
      'feed': h_tilde_BxH.astype(jnp.float32),
      'step': step_B + 1,
    }
    return new_carry, (logits_BxV.astype(jnp.float32), weights_BxS)


def unroll(cell: DecoderCell, carry: DecoderCarry, tgt_in_BxT, memory: Memory, *, train: bool):
  """Teacher-forced unroll of `cell` over tgt_in_BxT with `nn.scan`.

  Params are broadcast (one set for all steps, the same the step uses in search), dropout
  draws fresh masks each step, memory is broadcast. Returns (carry, logits_BxTxV, attn_BxTxS).
  """

  def body(module, carry, y_prev_B, memory):
    return module(carry, y_prev_B, memory, train=train)

  scan = nn.scan(
    body,
    variable_broadcast='params',
    split_rngs={'params': False, 'dropout': True},
    in_axes=(1, nn.broadcast),
    out_axes=1,
  )
  carry, (logits_BxTxV, attn_BxTxS) = scan(cell, carry, tgt_in_BxT, memory)
  return carry, logits_BxTxV, attn_BxTxS
