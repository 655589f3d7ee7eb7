"""Greedy and beam search over a model's decode step, inside `lax.while_loop`.

Models and search meet through one callback (`Seq2Seq` and `Transformer` both provide it):

    step_fn(tokens_N, carry) -> (logits_NxV, attn_NxS, carry)

with N = batch * beams. It embeds the previous token of every row, advances that row's decoder
state and returns the next-token logits and its cross-attention weights. The caller closes
over the encoder memory, tiled once with `expand_to_beams`; search tiles `init_carry` itself.

Beam search keeps finished hypotheses in their own set, as fairseq does: each step takes the
2W best (origin beam, token) extensions by summed log-probability; an EOS extension among the
top W ranks moves to the finished set with the GNMT length-penalised score
logp / ((5 + len) / 6) ** alpha (len counts EOS); the W best extensions that do not end become
the next alive beams, and the carry rows follow their origin beam. Attention is not copied
along with them: each step stores its alive beams' weights and origins, and the finished
hypotheses' histories are followed back through those origins once, after the loop. A
batch row is done once it has finished W hypotheses; at max_length the top W extensions are
finished as they are. With W = 1 this is exactly greedy search for every alpha (a penalty only
compares hypotheses of different lengths), which the tests pin.

`beam_search_nbest` returns the whole finished set, W distinct hypotheses per row sorted by
score (an n-best list); `NBestResult.best()` keeps the first of each row.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import flax.struct
import jax
import jax.numpy as jnp
from jax import lax

from attnlab.tokens import BOS_ID, EOS_ID, PAD_ID

# Finite on purpose: dead beams are added to and divided, and -inf - -inf would make NaNs.
NEG_INF = -1.0e9

StepFn = Callable[[jax.Array, Any], tuple[jax.Array, jax.Array, Any]]


@flax.struct.dataclass
class SearchResult:
  """The chosen hypothesis of every batch row."""

  tokens_BxT: jax.Array  # int32, EOS included, PAD_ID after the end
  lengths_B: jax.Array  # int32, tokens including EOS (max_length when it never ended)
  scores_B: jax.Array  # ranking score: greedy = log_probs_B, beam = length-penalised
  log_probs_B: jax.Array  # sum of the token log-probabilities
  attention_BxTxS: jax.Array  # float32 cross attention per output step, zero after the end


@flax.struct.dataclass
class NBestResult:
  """The K best finished hypotheses of every batch row, best first (K = beam size).

  Slots whose score is NEG_INF hold no hypothesis (only when fewer than K could finish, e.g.
  a vocabulary smaller than the beam); `valid_BxK` marks the real ones.
  """

  tokens_BxKxT: jax.Array
  lengths_BxK: jax.Array
  scores_BxK: jax.Array
  log_probs_BxK: jax.Array
  attention_BxKxTxS: jax.Array

  @property
  def valid_BxK(self) -> jax.Array:
    return self.scores_BxK > NEG_INF / 2

  def best(self) -> SearchResult:
    return SearchResult(
      tokens_BxT=self.tokens_BxKxT[:, 0],
      lengths_B=self.lengths_BxK[:, 0],
      scores_B=self.scores_BxK[:, 0],
      log_probs_B=self.log_probs_BxK[:, 0],
      attention_BxTxS=self.attention_BxKxTxS[:, 0],
    )

  @classmethod
  def of(cls, result: SearchResult) -> NBestResult:
    """A one-entry list (K = 1), e.g. of greedy search."""
    return cls(
      tokens_BxKxT=result.tokens_BxT[:, None],
      lengths_BxK=result.lengths_B[:, None],
      scores_BxK=result.scores_B[:, None],
      log_probs_BxK=result.log_probs_B[:, None],
      attention_BxKxTxS=result.attention_BxTxS[:, None],
    )


def length_penalty_factor(length: jax.Array, alpha: float) -> jax.Array:
  """GNMT (Wu et al. 2016): ((5 + len) / 6) ** alpha; alpha = 0 ranks by plain log-prob."""
  return ((5.0 + length.astype(jnp.float32)) / 6.0) ** alpha


def _emittable_logits(logits_NxV: jax.Array, bos_id: int) -> jax.Array:
  """float32 logits with PAD and BOS at NEG_INF: a hypothesis never emits them.

  An untrained (or unlucky) model can put mass on them; emitting either would end up as a
  hole in the output, so they are excluded and the rest renormalised.
  """
  index_V = jnp.arange(logits_NxV.shape[-1])
  banned_V = (index_V == PAD_ID) | (index_V == bos_id)
  return jnp.where(banned_V[None, :], NEG_INF, logits_NxV.astype(jnp.float32))


def next_token_log_probs(logits_NxV: jax.Array, bos_id: int) -> jax.Array:
  """float32 log-probabilities over the tokens a hypothesis may emit: never PAD or BOS."""
  return jax.nn.log_softmax(_emittable_logits(logits_NxV, bos_id), axis=-1)


def most_probable_token(logits_NxV: jax.Array, bos_id: int) -> tuple[jax.Array, jax.Array]:
  """(token_N, log_prob_N): the most probable token a hypothesis may emit (the first, on a
  tie) and its log-probability, as `next_token_log_probs` gives them.

  Computed from the logits' maximum: its first index, and -log sum exp(logits - max), so the
  V-wide log-probabilities are never written and no argmax runs: XLA:CPU does not vectorise
  argmax's (value, index) reduction (13% of a greedy search over 2,000 pieces). A row with NaN
  logits (a diverged model) gets a NaN log-probability and a token it may emit.
  """
  logits_NxV = _emittable_logits(logits_NxV, bos_id)
  V = logits_NxV.shape[-1]
  index_V = jnp.arange(V)
  best_N = jnp.max(logits_NxV, axis=-1)
  at_best_NxV = (logits_NxV == best_N[:, None]) | jnp.isnan(logits_NxV)
  token_N = jnp.min(jnp.where(at_best_NxV, index_V, V), axis=-1).astype(jnp.int32)
  log_prob_N = -jnp.log(jnp.sum(jnp.exp(logits_NxV - best_N[:, None]), axis=-1))
  return token_N, log_prob_N


def expand_to_beams(tree: Any, beam_size: int) -> Any:
  """Repeats every leaf's leading axis B -> B*W (row b*W + w is beam w of example b)."""
  return jax.tree.map(lambda x: jnp.repeat(x, beam_size, axis=0), tree)


def _check_sizes(batch_size: int, beam_size: int, max_length: int) -> None:
  for name, value in (
    ('batch_size', batch_size),
    ('beam_size', beam_size),
    ('max_length', max_length),
  ):
    if not isinstance(value, int) or value < 1:
      raise ValueError(f'{name}={value!r} must be a positive Python int (a static size)')


def _source_length(step_fn: StepFn, tokens_N: jax.Array, carry: Any, rows: int) -> int:
  """S of the attention buffer, read off step_fn without running it."""
  logits, attn, _ = jax.eval_shape(step_fn, tokens_N, carry)
  if logits.ndim != 2 or logits.shape[0] != rows or attn.ndim != 2 or attn.shape[0] != rows:
    raise ValueError(
      f'step_fn must return logits_NxV and attn_NxS with N={rows} rows; got '
      f'{logits.shape} and {attn.shape}'
    )
  return attn.shape[1]


def greedy_search(
  step_fn: StepFn,
  init_carry: Any,
  *,
  batch_size: int,
  max_length: int,
  bos_id: int = BOS_ID,
  eos_id: int = EOS_ID,
) -> SearchResult:
  """Takes the most probable token each step until every row emitted EOS or max_length."""
  _check_sizes(batch_size, 1, max_length)
  B, T = batch_size, max_length
  bos_B = jnp.full((B,), bos_id, jnp.int32)
  S = _source_length(step_fn, bos_B, init_carry, B)

  def cond(state):
    return (state['i'] < T) & ~jnp.all(state['done_B'])

  def body(state):
    i, live_B = state['i'], ~state['done_B']
    logits_BxV, attn_BxS, carry = step_fn(state['last_B'], state['carry'])
    tok_B, tok_logp_B = most_probable_token(logits_BxV, bos_id)
    attn_BxS = jnp.where(live_B[:, None], attn_BxS.astype(jnp.float32), 0.0)
    return dict(
      i=i + 1,
      last_B=tok_B,
      carry=carry,
      seqs_BxT=state['seqs_BxT'].at[:, i].set(jnp.where(live_B, tok_B, PAD_ID)),
      attn_BxTxS=state['attn_BxTxS'].at[:, i].set(attn_BxS),
      logp_B=jnp.where(live_B, state['logp_B'] + tok_logp_B, state['logp_B']),
      lengths_B=state['lengths_B'] + live_B.astype(jnp.int32),
      done_B=state['done_B'] | (tok_B == eos_id),
    )

  state = dict(
    i=jnp.array(0, jnp.int32),
    last_B=bos_B,
    carry=init_carry,
    seqs_BxT=jnp.full((B, T), PAD_ID, jnp.int32),
    attn_BxTxS=jnp.zeros((B, T, S), jnp.float32),
    logp_B=jnp.zeros((B,), jnp.float32),
    lengths_B=jnp.zeros((B,), jnp.int32),
    done_B=jnp.zeros((B,), bool),
  )
  state = lax.while_loop(cond, body, state)
  return SearchResult(
    tokens_BxT=state['seqs_BxT'],
    lengths_B=state['lengths_B'],
    scores_B=state['logp_B'],
    log_probs_B=state['logp_B'],
    attention_BxTxS=state['attn_BxTxS'],
  )


def top_k(x_BxN: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
  """`lax.top_k` over the last axis (ties to the lowest index), behind an optimization barrier.

  XLA:CPU runs `lax.top_k` as its TopK kernel only when the sort it lowers to is used through
  one [:k] slice. Beam search also slices the values it gets to [:W]; XLA folds the two slices
  into the sort's output, and the rewrite then falls back to a full stable sort of every row of
  W * V candidates (9.6 s of a 10.5 s Bible-sized beam batch). The barrier keeps the slice
  whole, so all three calls in a beam step run as TopK (tests/decoding/test_search.py checks the
  compiled program; benchmarks/OPTIMISATIONS.md has the numbers). One barrier per output: XLA's
  SPMD partitioner crashes on a barrier over the pair inside shard_map (decoding/spread.py).
  """
  values, indices = lax.top_k(x_BxN, k)
  return lax.optimization_barrier(values), lax.optimization_barrier(indices)


def _take_rows(x_BxK: jax.Array, idx_BxJ: jax.Array) -> jax.Array:
  """x[b, idx[b, j], ...] for arrays laid out B x K x ...."""
  idx = idx_BxJ.reshape(idx_BxJ.shape + (1,) * (x_BxK.ndim - 2))
  return jnp.take_along_axis(x_BxK, idx, axis=1)


def _gather_carry(carry: Any, origin_BxW: jax.Array, beam_size: int) -> Any:
  """Carry rows (leading dim B*W) of the origin beams, per example."""
  B = origin_BxW.shape[0]
  flat_N = (jnp.arange(B, dtype=jnp.int32)[:, None] * beam_size + origin_BxW).reshape(-1)
  return jax.tree.map(lambda x: jnp.take(x, flat_N, axis=0), carry)


def beam_search_nbest(
  step_fn: StepFn,
  init_carry: Any,
  *,
  batch_size: int,
  beam_size: int,
  max_length: int,
  length_penalty: float = 0.6,
  bos_id: int = BOS_ID,
  eos_id: int = EOS_ID,
) -> NBestResult:
  """Beam search (module docstring) from `init_carry`'s batch_size rows, tiled here to B*W.

  `length_penalty` is the GNMT alpha (0 ranks finished hypotheses by summed log-prob).
  Returns every finished hypothesis: W per row, sorted by score.

  They are distinct: alive beams are distinct prefixes (distinct (origin, token) pairs of
  distinct origins), so hypotheses finished at one step differ, and ones finished at
  different steps differ in length.
  """
  _check_sizes(batch_size, beam_size, max_length)
  B, W, T = batch_size, beam_size, max_length
  alpha = float(length_penalty)
  carry0 = expand_to_beams(init_carry, W)
  bos_N = jnp.full((B * W,), bos_id, jnp.int32)
  S = _source_length(step_fn, bos_N, carry0, B * W)

  def cond(state):
    return (state['i'] < T) & ~jnp.all(state['fin_count_B'] >= W)

  body = functools.partial(_beam_step, step_fn=step_fn, max_length=T,
                           alpha=alpha, bos_id=bos_id, eos_id=eos_id)
  state = lax.while_loop(cond, body, _beam_start(bos_N, carry0, B=B, W=W, T=T, S=S))
  # top_k keeps the finished set sorted, so slot 0 is the best; the last step always finishes
  # at least beam 0, so slot 0 is a real hypothesis.
  return NBestResult(
    tokens_BxKxT=state['fin_seqs_BxWxT'],
    lengths_BxK=state['fin_lengths_BxW'],
    scores_BxK=state['fin_scores_BxW'],
    log_probs_BxK=state['fin_logp_BxW'],
    attention_BxKxTxS=_finished_attention(state),
  )


def _beam_start(bos_N: jax.Array, carry0: Any, *, B: int, W: int, T: int, S: int) -> dict:
  """The loop state before the first step: the alive beams and the (empty) finished set."""
  # Only beam 0 is alive at the start, so the W copies of BOS do not fill the beam with
  # duplicates of the same hypothesis.
  beam0_BxW = jnp.broadcast_to(jnp.arange(W) == 0, (B, W))
  return dict(
    i=jnp.array(0, jnp.int32),
    last_N=bos_N,
    carry=carry0,
    alive_logp_BxW=jnp.where(beam0_BxW, 0.0, NEG_INF).astype(jnp.float32),
    alive_seqs_BxWxT=jnp.full((B, W, T), PAD_ID, jnp.int32),
    step_attn_TxBxWxS=jnp.zeros((T, B, W, S), jnp.float32),  # step t's alive beams' weights
    parent_TxBxW=jnp.zeros((T, B, W), jnp.int32),  # the step-t beam each step-t+1 beam extends
    fin_scores_BxW=jnp.full((B, W), NEG_INF, jnp.float32),
    fin_logp_BxW=jnp.full((B, W), NEG_INF, jnp.float32),
    fin_lengths_BxW=jnp.zeros((B, W), jnp.int32),
    fin_seqs_BxWxT=jnp.full((B, W, T), PAD_ID, jnp.int32),
    fin_origin_BxW=jnp.zeros((B, W), jnp.int32),  # the beam of its last step
    fin_count_B=jnp.zeros((B,), jnp.int32),
  )


class _Extensions(NamedTuple):
  """The 2W best (origin beam, token) extensions of every row, best first, with their
  summed log-probability and token sequence."""

  logp_Bx2W: jax.Array
  origin_Bx2W: jax.Array
  token_Bx2W: jax.Array
  seqs_Bx2WxT: jax.Array


def _beam_step(state: dict, *, step_fn: StepFn, max_length: int, alpha: float, bos_id: int,
               eos_id: int) -> dict:
  """One step: every alive beam extended by every token; the extensions that end join the
  finished set, the W best of the others stay alive."""
  i = state['i']
  B, W = state['alive_logp_BxW'].shape
  logits_NxV, attn_NxS, carry = step_fn(state['last_N'], state['carry'])
  ext = _extend(state, logits_NxV, bos_id=bos_id)
  # Finish: EOS (or any extension at max_length) among the top W ranks of live rows.
  valid_Bx2W = ext.logp_Bx2W > NEG_INF / 2
  ends_Bx2W = valid_Bx2W & ((ext.token_Bx2W == eos_id) | (i + 1 == max_length))
  finished = _finish(state, ext, ends_Bx2W, alpha=alpha)
  alive, origin_BxW = _stay_alive(ext, ends_Bx2W, carry)
  step_attn_BxWxS = attn_NxS.astype(jnp.float32).reshape(B, W, -1)
  return dict(
    i=i + 1,
    **alive,
    **finished,
    step_attn_TxBxWxS=state['step_attn_TxBxWxS'].at[i].set(step_attn_BxWxS),
    parent_TxBxW=state['parent_TxBxW'].at[i].set(origin_BxW),
  )


def _extend(state: dict, logits_NxV: jax.Array, *, bos_id: int) -> _Extensions:
  """Every alive beam extended by every token; the 2W best extensions of each row."""
  i = state['i']
  B, W = state['alive_logp_BxW'].shape
  V = logits_NxV.shape[-1]
  if V < 2:
    raise ValueError(f'beam search needs a vocabulary of at least 2 tokens, got V={V}')
  logp_BxWxV = next_token_log_probs(logits_NxV, bos_id).reshape(B, W, V)
  cand_BxWxV = state['alive_logp_BxW'][:, :, None] + logp_BxWxV
  # 2W candidates: at most W of them (one per origin) end in EOS, so W always stay alive.
  top_logp_Bx2W, top_idx_Bx2W = top_k(cand_BxWxV.reshape(B, W * V), 2 * W)
  origin_Bx2W = (top_idx_Bx2W // V).astype(jnp.int32)
  token_Bx2W = (top_idx_Bx2W % V).astype(jnp.int32)
  seqs_Bx2WxT = _take_rows(state['alive_seqs_BxWxT'], origin_Bx2W).at[:, :, i].set(token_Bx2W)
  return _Extensions(top_logp_Bx2W, origin_Bx2W, token_Bx2W, seqs_Bx2WxT)


def _finish(state: dict, ext: _Extensions, ends_Bx2W: jax.Array, *, alpha: float) -> dict:
  """The finished set after this step: the W best of those finished before and the ending
  extensions among the top W ranks, scored with the length penalty; rows already done take
  no more."""
  i = state['i']
  B, W = state['fin_scores_BxW'].shape
  done_B = state['fin_count_B'] >= W
  finish_BxW = ends_Bx2W[:, :W] & ~done_B[:, None]
  new_scores_BxW = jnp.where(
    finish_BxW, ext.logp_Bx2W[:, :W] / length_penalty_factor(i + 1, alpha), NEG_INF
  )
  pool_scores_Bx2W = jnp.concatenate([state['fin_scores_BxW'], new_scores_BxW], axis=1)
  fin_scores_BxW, keep_BxW = top_k(pool_scores_Bx2W, W)
  pool = lambda old, new: _take_rows(jnp.concatenate([old, new[:, :W]], axis=1), keep_BxW)
  new_lengths_Bx2W = jnp.full((B, 2 * W), i + 1, jnp.int32)
  return dict(
    fin_scores_BxW=fin_scores_BxW,
    fin_logp_BxW=pool(state['fin_logp_BxW'], ext.logp_Bx2W),
    fin_lengths_BxW=pool(state['fin_lengths_BxW'], new_lengths_Bx2W),
    fin_seqs_BxWxT=pool(state['fin_seqs_BxWxT'], ext.seqs_Bx2WxT),
    fin_origin_BxW=pool(state['fin_origin_BxW'], ext.origin_Bx2W),
    fin_count_B=state['fin_count_B'] + jnp.sum(finish_BxW, axis=1, dtype=jnp.int32),
  )


def _stay_alive(ext: _Extensions, ends_Bx2W: jax.Array, carry: Any) -> tuple[dict, jax.Array]:
  """The next alive beams: the W best extensions that did not end, with their origin's carry;
  and those origins (the beams they extend)."""
  B, W = ends_Bx2W.shape[0], ends_Bx2W.shape[1] // 2
  alive_scores_Bx2W = jnp.where(ends_Bx2W, NEG_INF, ext.logp_Bx2W)
  alive_logp_BxW, sel_BxW = top_k(alive_scores_Bx2W, W)
  alive_origin_BxW = _take_rows(ext.origin_Bx2W, sel_BxW)
  alive = dict(
    last_N=_take_rows(ext.token_Bx2W, sel_BxW).reshape(B * W),
    carry=_gather_carry(carry, alive_origin_BxW, W),
    alive_logp_BxW=alive_logp_BxW,
    alive_seqs_BxWxT=_take_rows(ext.seqs_Bx2WxT, sel_BxW),
  )
  return alive, alive_origin_BxW


def _finished_attention(state: dict) -> jax.Array:
  """Every finished hypothesis's attention, B x W x T x S: at each step t before its end, the
  weights of the beam it descends from at t, found by following the stored origins back from
  the beam of its last step; zero from its end on."""
  step_attn_TxBxWxS, parent_TxBxW = state['step_attn_TxBxWxS'], state['parent_TxBxW']
  last_BxW = state['fin_lengths_BxW'] - 1  # -1 for an empty slot: zero throughout
  origin_BxW = state['fin_origin_BxW']

  def back(beam_next_BxW, t):
    from_next_BxW = jnp.take_along_axis(parent_TxBxW[t], beam_next_BxW, axis=1)
    beam_BxW = jnp.where(t == last_BxW, origin_BxW, from_next_BxW)
    attn_BxWxS = _take_rows(step_attn_TxBxWxS[t], beam_BxW)
    return beam_BxW, jnp.where((t <= last_BxW)[..., None], attn_BxWxS, 0.0)

  T = step_attn_TxBxWxS.shape[0]
  _, attn_TxBxWxS = lax.scan(back, jnp.zeros_like(origin_BxW), jnp.arange(T), reverse=True)
  return attn_TxBxWxS.transpose(1, 2, 0, 3)


def search_batch(model, params, src_BxS, *, method: str, beam_size: int, max_length: int,
                 length_penalty: float) -> NBestResult:
  """Encodes once, then searches over `model.decode_step`; jit with the sizes static.

  Returns every hypothesis the search finished (beam: beam_size per row, best first; greedy:
  one), so evaluation and `attnlab.decode` run the same search.
  """
  variables = {'params': params}
  memory = model.apply(variables, src_BxS, method='encode')
  carry = model.apply(variables, memory, max_length, method='init_decode_carry')
  batch_size = src_BxS.shape[0]
  if method == 'beam':
    memory = expand_to_beams(memory, beam_size)
  step_fn = lambda tokens, c: model.apply(variables, memory, tokens, c, method='decode_step')
  if method == 'beam':
    return beam_search_nbest(step_fn, carry, batch_size=batch_size, beam_size=beam_size,
                                    max_length=max_length, length_penalty=length_penalty)
  return NBestResult.of(
      greedy_search(step_fn, carry, batch_size=batch_size, max_length=max_length))


def decode_batch(model, params, src_BxS, *, method: str, beam_size: int, max_length: int,
                 length_penalty: float) -> SearchResult:
  """The best hypothesis of every row (`search_batch`'s first entry)."""
  return search_batch(model, params, src_BxS, method=method, beam_size=beam_size,
                      max_length=max_length, length_penalty=length_penalty).best()
