"""Evaluation metrics on the host: pure NumPy / Python functions (BLEU and chrF, through
sacrebleu, are in attnlab/bleu_scores.py).

- `summarize`: per-device metric *sums* from train/eval steps -> loss, perplexity, accuracies.
- Decoded outputs: `edit_distance`, `error_rates` (WER / PER with several references per
  source), `sequence_accuracy`, and `by_length_bucket` for length generalisation.
- Attention: `attention_entropy` and `alignment_error_rate` of one example's weights (steps
  with all-zero weights, from local_m past the source, are skipped or count as misses).

Sequences are lists, tuples or 1-D arrays of tokens (ids or strings); tokens compare with `==`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

# summarize(): output name -> (numerator sum, denominator count). The train and eval steps
# (attnlab/train/steps.py) produce these keys, each summed over the tokens / sequences / steps it
# covers (padding excluded):
#   loss_sum       sum over target tokens of -log p(y_t | y_<t, x) (plain cross-entropy, without
#                  label smoothing, so that perplexity means perplexity)
#   objective_sum  the same with label smoothing: what training minimises (train only)
#   token_correct  target tokens whose argmax prediction equals the reference token
#   token_count    target tokens (EOS included, padding excluded)
#   seq_correct    targets with every token correct (teacher-forced) or, for decoded output,
#                  equal to the reference
#   seq_count      target sequences (padding rows of a batch excluded)
#   grad_norm_sum  global gradient norms, one per optimiser step (train only)
#   steps          optimiser steps covered by the sums (train only)
RATIOS = {
  'loss': ('loss_sum', 'token_count'),
  'objective': ('objective_sum', 'token_count'),
  'token_accuracy': ('token_correct', 'token_count'),
  'sequence_accuracy': ('seq_correct', 'seq_count'),
  'grad_norm': ('grad_norm_sum', 'steps'),
}
SUM_KEYS = (
  'loss_sum',
  'objective_sum',
  'token_correct',
  'token_count',
  'seq_correct',
  'seq_count',
  'grad_norm_sum',
  'steps',
)


# 'max': higher is better; 'min': lower is better. Names as evaluation reports them;
# model selection, reports and statistics read them here.
DIRECTIONS = {
  'sequence_accuracy': 'max',  # exact match of the decoded output (dates, synthetic tasks)
  'token_accuracy': 'max',  # teacher-forced
  'teacher_forced_sequence_accuracy': 'max',
  'bleu': 'max',  # sacrebleu corpus BLEU, 0-100
  'chrf': 'max',
  'wer': 'min',  # G2P word error rate
  'per': 'min',  # G2P phone error rate
  'loss': 'min',  # teacher-forced cross-entropy per token
  'perplexity': 'min',
  'alignment_error_rate': 'min',
}


# Points per stored unit of each metric in DIRECTIONS: rates stored as fractions count in
# percentage points, BLEU and chrF in their own 0-100 points, loss and perplexity in their own
# units. Convergence (reports) and train.min_improvement (selection) are stated in points.
POINTS_PER_UNIT = {
  'sequence_accuracy': 100.0,
  'token_accuracy': 100.0,
  'teacher_forced_sequence_accuracy': 100.0,
  'wer': 100.0,
  'per': 100.0,
  'alignment_error_rate': 100.0,
  'bleu': 1.0,
  'chrf': 1.0,
  'loss': 1.0,
  'perplexity': 1.0,
}


def lower_is_better(metric: str) -> bool:
  return DIRECTIONS[metric] == 'min'


def is_number(value) -> bool:
  """A finite int or float, not a bool: a metric value that tables and curves can show."""
  return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def summarize(sums: Mapping[str, Any]) -> dict[str, float]:
  """Turns metric sums into scalars: loss (per token), perplexity, accuracies, grad norm.

  Args:
    sums: the keys of `SUM_KEYS` (any subset whose ratios are complete). A value may be a
      scalar or an array of partial sums (e.g. one per device), which are added up. Any other
      key must hold a single value and is passed through as a float (e.g. 'learning_rate').

  Returns:
    Each `RATIOS` name whose numerator is present ('loss', 'objective', 'token_accuracy',
    'sequence_accuracy', 'grad_norm'), 'perplexity' = exp(loss), and the pass-through keys.

  Raises:
    ValueError: a numerator without its denominator, a zero denominator, or a pass-through
      key holding several values.
  """
  totals = {k: float(np.sum(np.asarray(v, np.float64))) for k, v in sums.items() if k in SUM_KEYS}
  out = {}
  for name, (num, den) in RATIOS.items():
    if num not in totals:
      continue
    if den not in totals:
      raise ValueError(
        f'summarize: {num!r} needs {den!r} to compute {name!r}; got keys {", ".join(sorted(sums))}'
      )
    if totals[den] <= 0:
      raise ValueError(f'summarize: {den}={totals[den]} must be > 0 to compute {name!r}')
    out[name] = totals[num] / totals[den]
  if 'loss' in out:
    out['perplexity'] = math.exp(out['loss']) if out['loss'] < 700 else math.inf
  for key, value in sums.items():
    if key in SUM_KEYS:
      continue
    value = np.asarray(value)
    if value.size != 1:
      raise ValueError(
        f'summarize: {key!r} holds {value.size} values; only the sums '
        f'{", ".join(SUM_KEYS)} are added up, other keys must be scalars'
      )
    out[key] = float(value.reshape(()))
  return out


def edit_distance(a: Sequence, b: Sequence) -> int:
  """Levenshtein distance: fewest insertions, deletions and substitutions turning a into b."""
  a, b = list(a), list(b)
  prev = list(range(len(b) + 1))
  for i, x in enumerate(a, start=1):
    cur = [i] + [0] * len(b)
    for j, y in enumerate(b, start=1):
      cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y))
    prev = cur
  return prev[-1]


def _same(a: Sequence, b: Sequence) -> bool:
  a, b = list(a), list(b)
  return len(a) == len(b) and all(x == y for x, y in zip(a, b, strict=True))


def check_pairs(name: str, hyps: Sequence, refs: Sequence) -> None:
  """ValueError, naming the metric, unless there are as many references as hypotheses (>0)."""
  if len(hyps) != len(refs):
    raise ValueError(f'{name}: {len(hyps)} hypotheses but {len(refs)} references')
  if not len(hyps):
    raise ValueError(f'{name}: no hypotheses to score')


def error_rates(hyps: Sequence[Sequence], refs_lists: Sequence[Sequence[Sequence]]) -> dict:
  """Word and phoneme error rates (grapheme-to-phoneme style), several references per source.

  Args:
    hyps: one output sequence per source ("word").
    refs_lists: for each source, a non-empty list of acceptable reference sequences.

  Returns:
    {'wer', 'per', 'count'}:
      wer = share of sources whose output equals none of their references.
      per = sum_i d_i / sum_i len(r_i), where r_i is the reference closest to hyps[i] in edit
            distance (the first one listed among ties) and d_i that distance. Normalising by the
            lengths of the closest references (not the longest or the first) makes a correct
            output score 0 and an output matching a short variant be judged against that variant.
      count = number of sources.
  """
  check_pairs('error_rates', hyps, refs_lists)
  wrong, errors, length = 0, 0, 0
  for i, (hyp, refs) in enumerate(zip(hyps, refs_lists, strict=True)):
    if isinstance(refs, str) or not len(refs):
      raise ValueError(
        f'error_rates: refs_lists[{i}] must be a non-empty list of reference '
        f'sequences, got {refs!r}'
      )
    dists = [edit_distance(hyp, ref) for ref in refs]
    best = int(np.argmin(dists))  # argmin returns the first minimum: ties go to the first ref
    wrong += dists[best] != 0
    errors += dists[best]
    length += len(refs[best])
  if length == 0:
    raise ValueError('error_rates: the closest references are all empty; PER is undefined')
  return {'wer': wrong / len(hyps), 'per': errors / length, 'count': len(hyps)}


def sequence_accuracy(hyps: Sequence[Sequence], refs: Sequence[Sequence]) -> float:
  """Share of hypotheses exactly equal to their (single) reference."""
  check_pairs('sequence_accuracy', hyps, refs)
  return sum(_same(h, r) for h, r in zip(hyps, refs, strict=True)) / len(hyps)


def by_length_bucket(
  lengths: Sequence[int], values: Sequence[float], edges: Sequence[float]
) -> list[dict]:
  """Mean of `values` per source-length bucket, e.g. sequence accuracy by length.

  Bucket k holds lengths in [edges[k], edges[k+1]) and is named by the integer lengths it
  holds: edges (1, 6, 11) -> '1-5', '6-10'. A last edge of `math.inf` makes an open bucket
  named '11+'. An empty bucket has count 0 and mean None.

  Raises:
    ValueError: edges not strictly increasing, or a length outside [edges[0], edges[-1]).
  """
  lengths = np.asarray(lengths)
  values = np.asarray(values, np.float64)
  edges = [float(e) for e in edges]
  if lengths.shape != values.shape or lengths.ndim != 1:
    raise ValueError(
      f'by_length_bucket: lengths {lengths.shape} and values {values.shape} '
      'must be 1-D and of equal length'
    )
  buckets = []
  for name, chosen in length_buckets('by_length_bucket', lengths, edges):
    selected = values[chosen]
    mean = float(selected.mean()) if selected.size else None
    buckets.append({'bucket': name, 'count': int(selected.size), 'mean': mean})
  return buckets


def length_buckets(caller: str, lengths: np.ndarray, edges: Sequence[float]):
  """(name, boolean mask) of each bucket [edges[k], edges[k+1]); see `by_length_bucket`."""
  if len(edges) < 2 or any(b <= a for a, b in zip(edges, edges[1:], strict=False)):
    raise ValueError(f'{caller}: edges {edges} must be at least 2 strictly increasing numbers')
  outside = lengths[(lengths < edges[0]) | (lengths >= edges[-1])]
  if outside.size:
    raise ValueError(
      f'{caller}: length {outside[0]} is outside the buckets [{edges[0]:g}, {edges[-1]:g})'
    )
  for lo, hi in zip(edges, edges[1:], strict=False):
    name = f'{lo:g}+' if math.isinf(hi) else f'{lo:g}-{math.ceil(hi) - 1:g}'
    yield name, (lengths >= lo) & (lengths < hi)


def _valid_block(name: str, weights_TxS, src_len: int | None, tgt_len: int | None) -> np.ndarray:
  weights_TxS = np.asarray(weights_TxS, np.float64)
  if weights_TxS.ndim != 2:
    raise ValueError(f'{name}: weights must be 2-D [target, source], got {weights_TxS.shape}')
  T, S = weights_TxS.shape
  src_len = S if src_len is None else src_len
  tgt_len = T if tgt_len is None else tgt_len
  if not (0 < src_len <= S and 0 < tgt_len <= T):
    raise ValueError(
      f'{name}: src_len={src_len}, tgt_len={tgt_len} must be in 1..{S} and '
      f'1..{T} for weights of shape {weights_TxS.shape}'
    )
  return weights_TxS[:tgt_len, :src_len]


def attention_entropy(weights_TxS, src_len: int | None = None, tgt_len: int | None = None) -> float:
  """Mean over target steps of the entropy (nats) of the attention over the source.

  Only the [:tgt_len, :src_len] block (no padding) counts; None means the whole axis (weights
  already sliced to the unpadded lengths). Each row is renormalised to sum to
  1 first, which changes nothing for softmax attention and makes the rows of Luong's local-p
  attention (softmax times a Gaussian) distributions. 0 log 0 = 0. Uniform attention over S
  positions gives log(S); attending to one position gives 0.

  A step whose weights are all zero attends nowhere (a local_m window past the end of the
  source, by design): it has no distribution and is left out of the mean. A block where no
  step attends anywhere raises ValueError (it can only come from wrong src_len/tgt_len: local_m
  step 0 always sees source position 0).
  """
  w_TxS = _valid_block('attention_entropy', weights_TxS, src_len, tgt_len)
  if np.any(w_TxS < 0):
    raise ValueError('attention_entropy: attention weights must be non-negative')
  row_T = w_TxS.sum(axis=1)
  attends_T = row_T > 0
  if not attends_T.any():
    raise ValueError(
      f'attention_entropy: no target step has weight on the first {w_TxS.shape[1]} source '
      'positions; check src_len/tgt_len'
    )
  p_TxS = w_TxS[attends_T] / row_T[attends_T, None]
  logp_TxS = np.log(np.where(p_TxS > 0, p_TxS, 1.0))
  return float(np.mean(-np.sum(p_TxS * logp_TxS, axis=1)))


def alignment_error_rate(
  weights_TxS, gold_alignment: Sequence[int], src_len: int | None = None, tgt_len: int | None = None
) -> float:
  """Hard-alignment error: share of target steps whose argmax source position is not the gold.

  This is simpler than the AER of word alignment (Och & Ney 2003, with sure and possible
  links): each target step has at most one gold source position, and the attention's argmax
  over the first `src_len` positions either hits it or not.

  Args:
    weights_TxS: attention weights of one example.
    gold_alignment: gold source position for each of the first `tgt_len` target steps; a
      negative entry means "no gold link" (e.g. the EOS step) and the step is not scored.
    src_len, tgt_len: the unpadded lengths; None means the whole axis of `weights_TxS`.
  """
  w_TxS = _valid_block('alignment_error_rate', weights_TxS, src_len, tgt_len)
  tgt_len, src_len = w_TxS.shape
  gold_T = np.asarray(gold_alignment, np.int64)
  if gold_T.ndim != 1 or gold_T.shape[0] < tgt_len:
    raise ValueError(
      f'alignment_error_rate: gold_alignment needs one entry per target step '
      f'(tgt_len={tgt_len}), got shape {gold_T.shape}'
    )
  gold_T = gold_T[:tgt_len]
  if np.any(gold_T >= src_len):
    raise ValueError(
      f'alignment_error_rate: gold position {int(gold_T.max())} is not a source '
      f'position (src_len={src_len})'
    )
  scored_T = gold_T >= 0
  if not scored_T.any():
    raise ValueError('alignment_error_rate: no target step has a gold link')
  hit_T = (np.argmax(w_TxS, axis=1) == gold_T) & (w_TxS.sum(axis=1) > 0)
  return float(np.mean(~hit_T[scored_T]))
