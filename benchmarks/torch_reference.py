"""The PyTorch reference: the same models as attnlab, written the way PyTorch users write them.

Benchmark-only (optional dependency: the CPU wheel `torch==2.13.0`). Each model loads attnlab's
Flax parameters (`load_flax_params`), so both frameworks run literally the same network on the
same batches; `benchmarks.run` checks the logits agree before timing anything.

RNN (`TorchSeq2Seq`, docs/design.md, Attention): embedding + bidirectional `nn.LSTM` over a
packed batch (H/2 units per direction), a dense tanh bridge, then the attentional decoder as a
Python loop over `nn.LSTMCell` steps (bahdanau, luong with input feeding). Luong without input
feeding has no step-to-step dependency outside the LSTM, so it runs `nn.LSTM` over the whole
target and attends once for all steps: the fastest honest way in PyTorch. Source keys (W_a h,
W_k h) are projected once per batch and W_o is applied to all steps at once, as OpenNMT-py does.

Transformer: benchmarks/torch_transformer.py.

Search (`greedy`, `beam`) follows attnlab/decoding/greedy.py and beam.py: batched over rows (and
beams), never emits PAD or BOS, stops once every row is done; beam search keeps finished
hypotheses in their own set and ranks them with the GNMT length penalty. Everything runs under
`torch.inference_mode()`.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

PAD_ID, BOS_ID, EOS_ID = 0, 1, 2  # attnlab.models' token ids
NEG_INF = -1.0e9


def _t(x) -> torch.Tensor:
  return torch.from_numpy(np.array(x, np.float32))


def _gates(group: dict, prefix: str, bias: bool = False) -> torch.Tensor:
  """Flax OptimizedLSTMCell gate kernels (I x H each, order i f g o) -> torch's 4H x I."""
  key = 'bias' if bias else 'kernel'
  parts = [np.asarray(group[f'{prefix}{g}'][key]) for g in 'ifgo']
  return _t(np.concatenate(parts, axis=-1).T if not bias else np.concatenate(parts))


# --- RNN encoder-decoder -------------------------------------------------------------------


class TorchSeq2Seq(nn.Module):
  """Bi-LSTM encoder, dense bridge, attentional LSTM decoder (one layer each)."""

  def __init__(
    self,
    src_vocab: int,
    tgt_vocab: int,
    *,
    embed_dim: int,
    hidden_size: int,
    timing: str,
    score: str,
    input_feeding: bool,
    dropout: float,
  ):
    super().__init__()
    if timing not in ('bahdanau', 'luong') or score not in ('dot', 'general', 'concat'):
      raise ValueError(
        f'reference supports timing bahdanau|luong and score dot|general|concat, '
        f'got {timing!r}, {score!r}'
      )
    E, H = embed_dim, hidden_size
    self.timing, self.score, self.input_feeding = timing, score, input_feeding
    self.whole_sequence = timing == 'luong' and not input_feeding
    self.src_embed = nn.Embedding(src_vocab, E)
    self.encoder = nn.LSTM(E, H // 2, batch_first=True, bidirectional=True)
    self.bridge_c = nn.Linear(H, H, bias=False)
    self.bridge_h = nn.Linear(H, H, bias=False)
    self.tgt_embed = nn.Embedding(tgt_vocab, E)
    rnn_in = E + H if (timing == 'bahdanau' or input_feeding) else E
    self.cell = (
      nn.LSTM(rnn_in, H, batch_first=True) if self.whole_sequence else nn.LSTMCell(rnn_in, H)
    )
    if score == 'general':
      self.w_a = nn.Linear(H, H, bias=False)
    elif score == 'concat':
      self.w_q = nn.Linear(H, H, bias=False)
      self.w_k = nn.Linear(H, H, bias=False)
      self.v = nn.Linear(H, 1, bias=False)
    self.w_c = nn.Linear(2 * H, H, bias=False)
    self.w_o = nn.Linear(H, tgt_vocab)
    self.drop = nn.Dropout(dropout)

  # The encoder and the memory every step reads.
  def encode(self, src: torch.Tensor):
    lengths = (src != PAD_ID).sum(1)
    x = self.drop(self.src_embed(src))
    packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    out, (h_n, c_n) = self.encoder(packed)
    enc, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])
    h0 = torch.tanh(self.bridge_h(torch.cat([h_n[0], h_n[1]], -1)))
    c0 = torch.tanh(self.bridge_c(torch.cat([c_n[0], c_n[1]], -1)))
    if self.score == 'general':
      keys = self.w_a(enc)
    elif self.score == 'concat':
      keys = self.w_k(enc)
    else:
      keys = enc
    return {'values': enc, 'keys': keys, 'mask': src != PAD_ID}, (h0, c0)

  def attend(self, q: torch.Tensor, memory: dict):
    """q: B x T x H -> (context B x T x H, weights B x T x S)."""
    if self.score == 'concat':
      hidden = torch.tanh(self.w_q(q).unsqueeze(2) + memory['keys'].unsqueeze(1))
      scores = self.v(hidden).squeeze(-1)
    else:
      scores = torch.bmm(q, memory['keys'].transpose(1, 2))
    scores = scores.masked_fill(~memory['mask'].unsqueeze(1), float('-inf'))
    weights = torch.softmax(scores, dim=-1)
    return torch.bmm(weights, memory['values']), weights

  def readout(self, s: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
    return torch.tanh(self.w_c(torch.cat([s, context], -1)))

  def step(self, memory: dict, y_prev: torch.Tensor, state):
    """One decoder step; state = (h, c, feed). Returns (h~_t, weights_BxS, new state)."""
    h, c, feed = state
    emb = self.drop(self.tgt_embed(y_prev))
    if self.timing == 'bahdanau':
      context, weights = self.attend(h.unsqueeze(1), memory)
      context = context.squeeze(1)
      h, c = self.cell(torch.cat([emb, context], -1), (h, c))
    else:
      x = torch.cat([emb, feed], -1) if self.input_feeding else emb
      if self.whole_sequence:
        _, (h1, c1) = self.cell(x.unsqueeze(1), (h.unsqueeze(0), c.unsqueeze(0)))
        h, c = h1[0], c1[0]
      else:
        h, c = self.cell(x, (h, c))
      context, weights = self.attend(h.unsqueeze(1), memory)
      context = context.squeeze(1)
    h_tilde = self.readout(h, context)
    return h_tilde, weights.squeeze(1), (h, c, h_tilde)

  def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
    """Teacher forcing: logits B x T x V."""
    memory, (h, c) = self.encode(src)
    if self.whole_sequence:
      emb = self.drop(self.tgt_embed(tgt_in))
      s, _ = self.cell(emb, (h.unsqueeze(0), c.unsqueeze(0)))
      context, _ = self.attend(s, memory)
      h_tilde = self.readout(s, context)
    else:
      state = (h, c, torch.zeros_like(h))
      outputs = []
      for t in range(tgt_in.shape[1]):
        h_tilde_t, _, state = self.step(memory, tgt_in[:, t], state)
        outputs.append(h_tilde_t)
      h_tilde = torch.stack(outputs, 1)
    return self.w_o(self.drop(h_tilde))

  # Search interface: memory/state rows can be repeated and gathered like attnlab's carries.
  def start(self, src: torch.Tensor):
    memory, (h, c) = self.encode(src)
    return memory, (h, c, torch.zeros_like(h))

  def decode_step(self, memory: dict, tokens: torch.Tensor, state):
    h_tilde, weights, state = self.step(memory, tokens, state)
    return self.w_o(h_tilde), weights, state

  @torch.no_grad()
  def load_flax_params(self, params: dict) -> None:
    """Copies attnlab Seq2Seq parameters (nested dict of arrays) into this module."""
    enc, dec, bridge = params['encoder'], params['decoder'], params['bridge']
    self.src_embed.weight.copy_(_t(enc['embed']['embedding']))
    for suffix, name in (('', 'layer_0_fwd'), ('_reverse', 'layer_0_bwd')):
      cell = enc[name]
      getattr(self.encoder, f'weight_ih_l0{suffix}').copy_(_gates(cell, 'i'))
      getattr(self.encoder, f'weight_hh_l0{suffix}').copy_(_gates(cell, 'h'))
      getattr(self.encoder, f'bias_hh_l0{suffix}').copy_(_gates(cell, 'h', bias=True))
      getattr(self.encoder, f'bias_ih_l0{suffix}').zero_()
    self.bridge_c.weight.copy_(_t(bridge['c_0']['kernel']).T)
    self.bridge_h.weight.copy_(_t(bridge['h_0']['kernel']).T)
    self.tgt_embed.weight.copy_(_t(dec['embed']['embedding']))
    cell = dec['cells_0']
    suffix = '_l0' if self.whole_sequence else ''
    getattr(self.cell, f'weight_ih{suffix}').copy_(_gates(cell, 'i'))
    getattr(self.cell, f'weight_hh{suffix}').copy_(_gates(cell, 'h'))
    getattr(self.cell, f'bias_hh{suffix}').copy_(_gates(cell, 'h', bias=True))
    getattr(self.cell, f'bias_ih{suffix}').zero_()
    for name in ('w_a', 'w_q', 'w_k', 'v'):
      if hasattr(self, name):
        getattr(self, name).weight.copy_(_t(dec['score'][name]['kernel']).T)
    self.w_c.weight.copy_(_t(dec['w_c']['kernel']).T)
    self.w_o.weight.copy_(_t(dec['w_o']['kernel']).T)
    self.w_o.bias.copy_(_t(dec['w_o']['bias']))


# --- training step and search --------------------------------------------------------------


def precision(autocast: bool):
  """The forward pass's precision: `torch.autocast` to bfloat16 (attnlab's
  model.dtype=bfloat16_matmuls counterpart) or plain float32."""
  return torch.autocast('cpu', dtype=torch.bfloat16, enabled=autocast)


def make_train_step(model: nn.Module, *, learning_rate: float = 3e-3, clip_norm: float = 1.0,
                    autocast: bool = False):
  """Adam (b2 0.98, eps 1e-9, as attnlab's defaults) with global-norm clipping; with
  `autocast` the forward pass and loss run under torch.autocast (backward outside, as its
  documentation asks)."""
  opt = torch.optim.Adam(model.parameters(), lr=learning_rate, betas=(0.9, 0.98), eps=1e-9)

  def train_step(src: torch.Tensor, target: torch.Tensor) -> float:
    model.train()
    tgt_in = torch.cat([torch.full_like(target[:, :1], BOS_ID), target[:, :-1]], 1)
    with precision(autocast):
      logits = model(src, tgt_in).float()
    loss = F.cross_entropy(
      logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=PAD_ID
    )
    opt.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    opt.step()
    return loss

  return train_step


def _log_probs(logits: torch.Tensor) -> torch.Tensor:
  """Like attnlab.decoding.hypotheses.next_token_log_probs: PAD and BOS are never emitted."""
  logits = logits.clone()
  logits[:, [PAD_ID, BOS_ID]] = NEG_INF
  return torch.log_softmax(logits, -1)


def _gather(tree, index: torch.Tensor):
  if tree is None:
    return None
  if isinstance(tree, dict):
    return {k: _gather(v, index) for k, v in tree.items()}
  if isinstance(tree, (tuple, list)):
    return type(tree)(_gather(v, index) for v in tree)
  return tree.index_select(0, index)


@torch.inference_mode()
def greedy(model: nn.Module, src: torch.Tensor, max_length: int) -> torch.Tensor:
  """Most probable token each step until every row emitted EOS (B x T tokens, PAD after)."""
  model.eval()
  memory, state = model.start(src)
  B = src.shape[0]
  tokens = torch.full((B,), BOS_ID, dtype=torch.long)
  done = torch.zeros(B, dtype=torch.bool)
  out = torch.full((B, max_length), PAD_ID, dtype=torch.long)
  for t in range(max_length):
    logits, _, state = model.decode_step(memory, tokens, state)
    tokens = _log_probs(logits).argmax(-1)
    out[:, t] = tokens.masked_fill(done, PAD_ID)
    done |= tokens == EOS_ID
    if bool(done.all()):
      break
  return out


@torch.inference_mode()
def beam(
  model: nn.Module,
  src: torch.Tensor,
  max_length: int,
  beam_size: int = 5,
  length_penalty: float = 0.6,
) -> torch.Tensor:
  """attnlab/decoding/beam.py's beam search (2W candidates, finished set, GNMT penalty),
  batched."""
  model.eval()
  B, W = src.shape[0], beam_size
  memory, state = model.start(src)
  rep = torch.arange(B).repeat_interleave(W)
  memory, state = _gather(memory, rep), _gather(state, rep)
  tokens = torch.full((B * W,), BOS_ID, dtype=torch.long)
  alive_logp = torch.full((B, W), NEG_INF)
  alive_logp[:, 0] = 0.0
  alive_seqs = torch.full((B, W, max_length), PAD_ID, dtype=torch.long)
  fin_scores = torch.full((B, W), NEG_INF)
  fin_seqs = torch.full((B, W, max_length), PAD_ID, dtype=torch.long)
  fin_count = torch.zeros(B, dtype=torch.long)
  base = (torch.arange(B) * W)[:, None]
  for t in range(max_length):
    logits, _, state = model.decode_step(memory, tokens, state)
    V = logits.shape[-1]
    logp = _log_probs(logits).view(B, W, V)
    cand = (alive_logp[:, :, None] + logp).view(B, W * V)
    top_logp, top_idx = cand.topk(2 * W, dim=1)
    origin, token = top_idx // V, top_idx % V
    seqs = alive_seqs.gather(1, origin[:, :, None].expand(-1, -1, max_length)).clone()
    seqs[:, :, t] = token
    ends = (top_logp > NEG_INF / 2) & ((token == EOS_ID) | (t + 1 == max_length))
    finish = ends[:, :W] & (fin_count < W)[:, None]
    new_scores = torch.where(
      finish,
      top_logp[:, :W] / ((5.0 + t + 1) / 6.0) ** length_penalty,
      torch.full_like(top_logp[:, :W], NEG_INF),
    )
    fin_scores, keep = torch.cat([fin_scores, new_scores], 1).topk(W, dim=1)
    pool = torch.cat([fin_seqs, seqs[:, :W]], 1)
    fin_seqs = pool.gather(1, keep[:, :, None].expand(-1, -1, max_length))
    fin_count += finish.sum(1)
    alive_logp, sel = top_logp.masked_fill(ends, NEG_INF).topk(W, dim=1)
    alive_seqs = seqs.gather(1, sel[:, :, None].expand(-1, -1, max_length))
    tokens = token.gather(1, sel).view(-1)
    state = _gather(state, (base + origin.gather(1, sel)).view(-1))
    if bool((fin_count >= W).all()):
      break
  return fin_seqs[:, 0]
