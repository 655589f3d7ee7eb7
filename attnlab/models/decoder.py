"""One step of the attentional RNN decoder; training unrolls it with `nn.scan`, search loops it.

`DecoderCell` owns everything the decoder learns: the target embedding, the stacked LSTM/GRU
cells, the attention score (or multi-head cross attention), the local window, W_c and W_o.
`project_memory` turns the encoder outputs into what every step reads (projected keys, values;
the fixed context and its share of the input gates) ONCE per source sequence; `__call__` is one
step. Teacher forcing (`unroll`) scans that step when the RNN reads attention (bahdanau, input
feeding); otherwise s_1..s_T do not depend on attention, so `whole_sequence` runs the RNN over
all steps and then scores, softmax, context and readout for all T queries in batched matmuls.

The step, per `model.attention.timing` (docs/design.md, Attention; s = top layer's hidden
state):

  bahdanau  c_t = attend(s_{t-1});  s_t = RNN(s_{t-1}, [emb(y_{t-1}); c_t])
  luong     s_t = RNN(s_{t-1}, [emb(y_{t-1}); h~_{t-1} if input_feeding]);  c_t = attend(s_t)
  none      s_t = RNN(s_{t-1}, emb(y_{t-1}))  (Sutskever et al. 2014: the source reaches the
            decoder through the bridged initial state only)
  fixed     c = tanh(V h_N), h_N the top encoder layer's final hidden state ([h_fwd; h_bwd]);
            s_t = RNN(s_{t-1}, [emb(y_{t-1}); c]), c_t = c at every step (Cho et al. 2014's
            RNNencdec, the no-attention baseline of Bahdanau et al. 2015's Figure 2)
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

from attnlab.config.fields import check_choice
from attnlab.config.model import TIMINGS, ModelConfig
from attnlab.models import attention, matmul, recurrent, scoring

# model.attention.timing: when the decoder attends (DecoderCell.core implements each). The
# last two do not attend: no weights, no attention pictures (AttentionConfig.attends).

Memory = dict[str, Any]
DecoderCarry = dict[str, Any]


def rnn_reads_attention(config: ModelConfig) -> bool:
  """Whether s_t depends on attention: Bahdanau (c_t in the RNN input) or input feeding
  (h~_{t-1}). Otherwise teacher forcing runs `DecoderCell.whole_sequence`."""
  att = config.attention
  return att.timing == 'bahdanau' or (att.timing == 'luong' and att.input_feeding)


top_hidden = recurrent.hidden  # h_BxH of one layer's carry: the LSTM's (c, h) or the GRU's h


class DecoderCell(nn.Module):
  """One decoder step `(carry, y_prev_B, memory) -> (carry, (logits_BxV, attn_BxS))`."""

  config: ModelConfig
  vocab_size: int

  def setup(self):
    cfg = self.config
    att = cfg.attention
    dtype = matmul.compute_dtype(cfg.dtype)
    H = cfg.hidden_size
    check_choice('model.attention.timing', att.timing, TIMINGS)
    self.embed = nn.Embed(self.vocab_size, cfg.embed_dim, dtype=dtype)
    # Bottom layer input: [emb; c_t] (bahdanau, fixed), [emb; h~_{t-1}] (input feeding) or emb.
    self.fixed_context = att.timing == 'fixed'
    extra = H if self._has_extra_input() or self.fixed_context else 0
    self.cells = [
      recurrent.CellParams(cfg.cell, cfg.embed_dim + extra if layer == 0 else H, H)
      for layer in range(cfg.decoder_layers)
    ]
    self.attentive = att.attends
    self.multi_head = self.attentive and att.num_heads > 1
    if self.multi_head:
      self.mha = attention.MultiHeadAttention(att.num_heads, H, cfg.dropout, dtype)
    elif self.attentive:
      self.score = scoring.make_score(
        att.score, hidden_size=H, max_source_length=att.max_source_length,
        concat_bias=att.concat_bias, dtype=dtype,
      )
      if att.window != 'global':
        self.window = attention.LocalWindow(att.window, att.window_radius, dtype)
    if self.fixed_context:
      self.summary = matmul.Dense(H, use_bias=False, dtype=dtype)  # V of c = tanh(V h_N)
    self.w_c = matmul.Dense(H, use_bias=False, dtype=dtype)
    self.w_o = matmul.Dense(self.vocab_size, dtype=dtype)
    self.dropout = nn.Dropout(cfg.dropout)

  def project_memory(self, enc_BxSxH: jax.Array, final_h_BxH: jax.Array) -> Memory:
    """What every step reads, computed once per source sequence from the encoder outputs and
    the top encoder layer's final hidden state.

    Single head: keys = score.project_keys(enc), values = enc. Multi-head: the per-head
    projections, heads-major (k_BxNxSxD, v_BxNxSxD). No attention: keys = values = enc (unread).
    Fixed context: also `context` c = tanh(V h_N) and `context_gates`, c's share of the bottom
    layer's input gates (c W_i[E:]), added to every step's embedding gates.
    """
    if self.multi_head:
      keys, values = self.mha.project_kv(enc_BxSxH)
    elif self.attentive:
      keys, values = self.score.project_keys(enc_BxSxH), enc_BxSxH
    else:
      keys, values = enc_BxSxH, enc_BxSxH
    memory = {'keys': keys, 'values': values}
    if self.fixed_context:
      dtype = matmul.compute_dtype(self.config.dtype)
      context_BxH = jnp.tanh(self.summary(final_h_BxH))
      w_context = self.cells[0]().w_i[self.config.embed_dim:]
      memory['context'] = context_BxH
      memory['context_gates'] = matmul.dot(context_BxH.astype(dtype), w_context.astype(dtype))
    return memory

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
      k_BxNxSxD, v_BxNxSxD = memory['keys'], memory['values']
      context_Bx1xH, weights_BxNx1xS = self.mha.attend_projected(
        q_Bx1xH, k_BxNxSxD, v_BxNxSxD, mask_Bx1x1xS, deterministic=not train, return_weights=True
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

  def cell_kernels(self) -> list[recurrent.CellKernels]:
    """Every layer's concatenated kernels, computed once per call (outside time loops). The
    bottom layer's W_i rows for the context / h~ input are stacked onto W_h
    (`recurrent.stack_extra`), so each step does [extra; h] [W_x; W_h] as one matmul."""
    kernels = [cell() for cell in self.cells]
    E = self.config.embed_dim
    if self._has_extra_input():
      kernels[0] = recurrent.stack_extra(kernels[0], E)
    elif self.fixed_context:  # c's rows were applied once, in project_memory
      kernels[0] = kernels[0]._replace(w_i=kernels[0].w_i[:E])
    return kernels

  def _has_extra_input(self) -> bool:
    return rnn_reads_attention(self.config)

  def embed_gates(self, y_prev, kernels, train: bool):
    """The embeddings' share of the bottom layer's input gates, emb W_i[:E], for ...xE tokens.

    Without dropout this is a row of the V x G table (embedding W_i[:E]): decoding gathers
    rows instead of multiplying every step.
    """
    dtype = matmul.compute_dtype(self.config.dtype)
    if not train or self.config.dropout == 0.0:
      table_VxG = recurrent.input_gates(kernels[0], self.embed.embedding, dtype)
      return jnp.take(table_VxG, y_prev, axis=0)
    emb = self.dropout(self.embed(y_prev), deterministic=not train)
    return recurrent.input_gates(kernels[0], emb, dtype)

  def _rnn(self, states, gx0_BxG, kernels, train: bool, extra_BxK=None):
    """Runs the stacked cells one step from the bottom layer's input gates (plus its extra
    input); returns (new states, top layer's h_BxH)."""
    kind, dtype = self.config.cell, matmul.compute_dtype(self.config.dtype)
    new_states = []
    for layer, state in enumerate(states):
      if layer == 0:
        new_state = recurrent.cell_step(kind, kernels[0], state, gx0_BxG, dtype, extra_BxK)
      else:
        x_BxH = self.dropout(top_hidden(new_states[-1]), deterministic=not train)
        gx_BxG = recurrent.input_gates(kernels[layer], x_BxH, dtype)
        new_state = recurrent.cell_step(kind, kernels[layer], state, gx_BxG, dtype)
      # Keep the carry float32 whatever the compute dtype (nn.scan needs a fixed carry type).
      new_states.append(jax.tree.map(lambda a: a.astype(jnp.float32), new_state))
    return tuple(new_states), top_hidden(new_states[-1])

  def _readout(self, s, context):
    if context is not None:
      readout_in = jnp.concatenate([s, context.astype(s.dtype)], axis=-1)
    else:
      readout_in = s
    return jnp.tanh(self.w_c(readout_in))

  def core(self, carry: DecoderCarry, gx_emb_BxG, memory: Memory, kernels, *, train: bool):
    """One step up to h~_t, from the embedding's input gates: (carry, (h~_BxH, attn_BxS))."""
    timing = self.config.attention.timing
    states, step_B = carry['states'], carry['step']
    if timing == 'bahdanau':
      context_BxH, weights_BxS = self._attend(top_hidden(states[-1]), memory, step_B, train)
      states, s_BxH = self._rnn(states, gx_emb_BxG, kernels, train, extra_BxK=context_BxH)
    elif timing == 'luong':
      feed_BxH = carry['feed'] if self.config.attention.input_feeding else None
      states, s_BxH = self._rnn(states, gx_emb_BxG, kernels, train, extra_BxK=feed_BxH)
      context_BxH, weights_BxS = self._attend(s_BxH, memory, step_B, train)
    elif timing == 'fixed':
      states, s_BxH = self._rnn(states, gx_emb_BxG + memory['context_gates'], kernels, train)
      context_BxH, weights_BxS = memory['context'], jnp.zeros(memory['mask'].shape, jnp.float32)
    else:
      states, s_BxH = self._rnn(states, gx_emb_BxG, kernels, train)
      context_BxH, weights_BxS = None, jnp.zeros(memory['mask'].shape, jnp.float32)
    h_tilde_BxH = self._readout(s_BxH, context_BxH)
    new_carry = {
      'states': states,
      'feed': h_tilde_BxH.astype(jnp.float32),
      'step': step_B + 1,
    }
    return new_carry, (h_tilde_BxH, weights_BxS)

  def logits(self, h_tilde, *, train: bool):
    """W_o dropout(h~) + b for ...xH, float32."""
    return self.w_o(self.dropout(h_tilde, deterministic=not train)).astype(jnp.float32)

  def __call__(
    self, carry: DecoderCarry, y_prev_B: jax.Array, memory: Memory, *, train: bool = False
  ):
    kernels = self.cell_kernels()
    gx_emb_BxG = self.embed_gates(y_prev_B, kernels, train)
    carry, (h_tilde_BxH, weights_BxS) = self.core(carry, gx_emb_BxG, memory, kernels, train=train)
    return carry, (self.logits(h_tilde_BxH, train=train), weights_BxS)

  def whole_sequence(self, carry: DecoderCarry, tgt_in_BxT, memory: Memory, *, train: bool):
    """Teacher forcing when the RNN does not read attention (luong without input feeding,
    none, fixed): the RNN over all T steps, then attention and readout for all T queries."""
    kind, dtype = self.config.cell, matmul.compute_dtype(self.config.dtype)
    kernels = self.cell_kernels()
    gx_BxTxG = self.embed_gates(tgt_in_BxT, kernels, train)
    if self.fixed_context:
      gx_BxTxG = gx_BxTxG + memory['context_gates'][:, None, :]
    states, out_BxTxH = [], None
    for layer, state in enumerate(carry['states']):
      if layer > 0:
        x_BxTxH = self.dropout(out_BxTxH, deterministic=not train)
        gx_BxTxG = recurrent.input_gates(kernels[layer], x_BxTxH, dtype)
      finals, (out_BxTxH,) = recurrent.run_layers(
        kind, [kernels[layer]], [gx_BxTxG], [state], None, dtype
      )
      states.append(jax.tree.map(lambda a: a.astype(jnp.float32), finals[0]))
    s_BxTxH = out_BxTxH
    B, T = tgt_in_BxT.shape
    if self.attentive:
      positions_T = carry['step'][0] + jnp.arange(T, dtype=jnp.int32)
      context_BxTxH, attn_BxTxS = self._attend_all(s_BxTxH, memory, positions_T, train)
    else:
      context_BxTxH = None
      if self.fixed_context:
        context_BxTxH = jnp.broadcast_to(memory['context'][:, None, :], s_BxTxH.shape)
      attn_BxTxS = jnp.zeros((B, T, memory['mask'].shape[1]), jnp.float32)
    h_tilde_BxTxH = self._readout(s_BxTxH, context_BxTxH)
    new_carry = {
      'states': tuple(states),
      'feed': h_tilde_BxTxH[:, -1].astype(jnp.float32),
      'step': carry['step'] + T,
    }
    return new_carry, self.logits(h_tilde_BxTxH, train=train), attn_BxTxS

  def _attend_all(self, q_BxTxH, memory: Memory, positions_T, train: bool):
    """(c_BxTxH, weights_BxTxS) for T queries at the decoder steps positions_T."""
    mask_BxS = memory['mask']
    if self.multi_head:
      context_BxTxH, weights_BxNxTxS = self.mha.attend_projected(
        q_BxTxH,
        memory['keys'],
        memory['values'],
        mask_BxS[:, None, None, :],
        deterministic=not train,
        return_weights=True,
      )
      return context_BxTxH, jnp.mean(weights_BxNxTxS, axis=1)
    return attention.attention_step(
      self.score,
      getattr(self, 'window', None),
      q_BxTxH,
      memory['keys'],
      memory['values'],
      mask_BxS,
      positions_T=positions_T,
      lengths_B=memory['lengths'],
    )


def unroll(cell: DecoderCell, carry: DecoderCarry, tgt_in_BxT, memory: Memory, *, train: bool):
  """Teacher-forced unroll of `cell` over tgt_in_BxT: returns (carry, logits_BxTxV, attn_BxTxS).

  A decoder whose RNN reads attention loops the step (`unroll_steps`); one whose RNN does not
  (Luong without input feeding, none, fixed) runs the RNN over all T steps and attends for all T
  queries at once (`DecoderCell.whole_sequence`); the two are equal
  (tests/models/test_rnn_decoder_unroll.py).
  """
  if rnn_reads_attention(cell.config):
    return unroll_steps(cell, carry, tgt_in_BxT, memory, train=train)
  return cell.whole_sequence(carry, tgt_in_BxT, memory, train=train)


def unroll_steps(cell: DecoderCell, carry, tgt_in_BxT, memory: Memory, *, train: bool):
  """`unroll` as an `nn.scan` over the step that search runs, for every timing.

  Params are broadcast (one set for all steps), dropout draws fresh masks each step, memory is
  broadcast; only step-dependent work is inside the scan (module docstring).
  """
  kernels = cell.cell_kernels()
  gx_BxTxG = cell.embed_gates(tgt_in_BxT, kernels, train)

  def body(module, carry, gx_emb_BxG, memory, kernels):
    return module.core(carry, gx_emb_BxG, memory, kernels, train=train)

  scan = nn.scan(
    body,
    variable_broadcast='params',
    split_rngs={'params': False, 'dropout': True},
    in_axes=(1, nn.broadcast, nn.broadcast),
    out_axes=1,
  )
  carry, (h_tilde_BxTxH, attn_BxTxS) = scan(cell, carry, gx_BxTxG, memory, kernels)
  return carry, cell.logits(h_tilde_BxTxH, train=train), attn_BxTxS
