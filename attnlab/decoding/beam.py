"""Beam search inside `lax.while_loop`, keeping finished hypotheses in their own set.

As fairseq does: each step takes the 2W best (origin beam, token) extensions by summed
log-probability; an EOS extension among the top W ranks moves to the finished set with the GNMT
length-penalised score logp / ((5 + len) / 6) ** alpha (len counts EOS); the W best extensions
that do not end become the next alive beams, and the carry rows follow their origin beam.
Attention is not copied along with them: each step stores its alive beams' weights and origins,
and the finished hypotheses' histories are followed back through those origins once, after the
loop. A batch row is done once it has finished W hypotheses; at max_length the top W extensions
are finished as they are. With W = 1 this is exactly greedy search for every alpha (a penalty
only compares hypotheses of different lengths), which the tests pin.

`beam_search_nbest` returns the whole finished set, W distinct hypotheses per row sorted by
score (an n-best list); `NBestResult.best()` keeps the first of each row.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from attnlab.decoding.hypotheses import (
  NEG_INF,
  NBestResult,
  StepFn,
  check_sizes,
  expand_to_beams,
  length_penalty_factor,
  next_token_log_probs,
  source_length,
)
from attnlab.tokens import BOS_ID, EOS_ID, PAD_ID


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
  check_sizes(batch_size, beam_size, max_length)
  B, W, T = batch_size, beam_size, max_length
  alpha = float(length_penalty)
  carry0 = expand_to_beams(init_carry, W)
  bos_N = jnp.full((B * W,), bos_id, jnp.int32)
  S = source_length(step_fn, bos_N, carry0, B * W)

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
