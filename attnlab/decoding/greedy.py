"""Greedy search: the most probable token of every row each step, inside `lax.while_loop`."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
from jax import lax

from attnlab.decoding.hypotheses import (
  SearchResult,
  StepFn,
  check_sizes,
  most_probable_token,
  source_length,
)
from attnlab.tokens import BOS_ID, EOS_ID, PAD_ID


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
  check_sizes(batch_size, 1, max_length)
  B, T = batch_size, max_length
  bos_B = jnp.full((B,), bos_id, jnp.int32)
  S = source_length(step_fn, bos_B, init_carry, B)

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
