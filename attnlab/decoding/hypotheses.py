"""What a search runs on and returns: the step callback, the result types and the token choice.

Models and search meet through one callback (`Seq2Seq` and `Transformer` both provide it):

    step_fn(tokens_N, carry) -> (logits_NxV, attn_NxS, carry)

with N = batch * beams. It embeds the previous token of every row, advances that row's decoder
state and returns the next-token logits and its cross-attention weights. The caller closes
over the encoder memory, tiled once with `expand_to_beams` for beam search; a search tiles
`init_carry` itself. decoding/greedy.py and decoding/beam.py are the two searches,
decoding/search.py runs either on a model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from attnlab.tokens import PAD_ID

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


def check_sizes(batch_size: int, beam_size: int, max_length: int) -> None:
  for name, value in (
    ('batch_size', batch_size),
    ('beam_size', beam_size),
    ('max_length', max_length),
  ):
    if not isinstance(value, int) or value < 1:
      raise ValueError(f'{name}={value!r} must be a positive Python int (a static size)')


def source_length(step_fn: StepFn, tokens_N: jax.Array, carry: Any, rows: int) -> int:
  """S of the attention buffer, read off step_fn without running it."""
  logits, attn, _ = jax.eval_shape(step_fn, tokens_N, carry)
  if logits.ndim != 2 or logits.shape[0] != rows or attn.ndim != 2 or attn.shape[0] != rows:
    raise ValueError(
      f'step_fn must return logits_NxV and attn_NxS with N={rows} rows; got '
      f'{logits.shape} and {attn.shape}'
    )
  return attn.shape[1]
