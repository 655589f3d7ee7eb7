"""Evaluation metrics on the host: pure NumPy / Python functions (sacrebleu for BLEU and chrF).

- `summarize`: per-device metric *sums* from train/eval steps -> loss, perplexity, accuracies.
- Decoded outputs: `edit_distance`, `error_rates` (WER / PER with several references per
  source), `sequence_accuracy`, `bleu_chrf`, `bleu_statistics` / `bleu_from_statistics`
  (corpus BLEU of any resample of the sentences, for the paired bootstrap), and
  `by_length_bucket` / `bleu_by_length` for length generalisation.
- Attention: `attention_entropy` and `alignment_error_rate` of one example's weights (steps
  with all-zero weights, from local_m past the source, are skipped or count as misses).

Sequences are lists, tuples or 1-D arrays of tokens (ids or strings); tokens compare with `==`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import sacrebleu

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


def _check_pairs(name: str, hyps: Sequence, refs: Sequence) -> None:
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
  _check_pairs('error_rates', hyps, refs_lists)
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
  _check_pairs('sequence_accuracy', hyps, refs)
  return sum(_same(h, r) for h, r in zip(hyps, refs, strict=True)) / len(hyps)


def bleu_chrf(
  hyps: Sequence[str],
  refs: Sequence[str] | Sequence[Sequence[str]],
  *,
  tokenize: str = '13a',
  signature: bool = False,
) -> dict[str, Any]:
  """Corpus BLEU and chrF (sacrebleu, 0-100) of detokenized strings; with `signature`, also
  'sacrebleu': both metrics' sacrebleu signatures (references, case, tokenizer, smoothing,
  version), so that a reader can compare the numbers with others' or recompute them.

  Args:
    hyps: one detokenized output string per source.
    refs: one reference string per source, or per source a list of reference strings (the
      number may vary between sources).
    tokenize: sacrebleu's BLEU tokenizer ('13a' is its default; 'none' for pre-split text).
  """
  bleu, chrf, signatures = _corpus_scores('bleu_chrf', hyps, refs, tokenize)
  out = {'bleu': float(bleu.score), 'chrf': float(chrf.score)}
  if signature:
    out['sacrebleu'] = signatures
  return out


def _corpus_scores(name: str, hyps, refs, tokenize: str = '13a'):
  """sacrebleu's corpus BLEU and chrF score objects and their signatures, `BLEU ...; chrF ...`
  (arguments as `bleu_chrf`)."""
  per_source = _references_per_source(name, hyps, refs)
  # sacrebleu takes reference *streams* (the k-th reference of every source); None marks a
  # source with fewer references.
  num_streams = max(len(r) for r in per_source)
  streams = [[r[k] if k < len(r) else None for r in per_source] for k in range(num_streams)]
  bleu_metric, chrf_metric = sacrebleu.metrics.BLEU(tokenize=tokenize), sacrebleu.metrics.CHRF()
  bleu = bleu_metric.corpus_score(list(hyps), streams)
  chrf = chrf_metric.corpus_score(list(hyps), streams)
  signatures = (f'BLEU {bleu_metric.get_signature().format()}; '
                f'chrF {chrf_metric.get_signature().format()}')
  return bleu, chrf, signatures


# bleu_statistics() columns: hypothesis length, closest reference length, matching n-grams for
# n = 1..4, hypothesis n-grams for n = 1..4.
BLEU_STATISTICS = 10


def bleu_statistics(
  hyps: Sequence[str], refs: Sequence[str] | Sequence[Sequence[str]], *, tokenize: str = '13a'
) -> np.ndarray:
  """Per-sentence sufficient statistics of corpus BLEU (N x BLEU_STATISTICS integers).

  Corpus BLEU of any subset of the sentences, or of a resample with repeats, is
  `bleu_from_statistics` of the sum of their rows: the paired bootstrap of BLEU tokenizes once.
  Arguments as `bleu_chrf`.
  """
  per_source = _references_per_source('bleu_statistics', hyps, refs)
  # effective_order only changes a sentence's own score (unused here) and quiets sacrebleu's
  # warning about sentence-level BLEU; the counts are the corpus statistics either way.
  bleu = sacrebleu.metrics.BLEU(tokenize=tokenize, effective_order=True)
  rows = []
  for hyp, references in zip(hyps, per_source, strict=True):
    s = bleu.sentence_score(hyp, references)
    rows.append([s.sys_len, s.ref_len, *s.counts, *s.totals])
  return np.asarray(rows, np.int64).reshape(len(rows), BLEU_STATISTICS)


def bleu_from_statistics(sums: Sequence[int]) -> float:
  """Corpus BLEU (0-100) from summed `bleu_statistics` rows, smoothed as sacrebleu's corpus
  BLEU is (its default 'exp' method)."""
  sys_len, ref_len, *ngrams = (int(x) for x in sums)
  score = sacrebleu.metrics.BLEU.compute_bleu(
    ngrams[:4], ngrams[4:], sys_len, ref_len, smooth_method='exp'
  )
  return float(score.score)


def _references_per_source(name: str, hyps, refs) -> list[list[str]]:
  _check_pairs(name, hyps, refs)
  per_source = [[r] if isinstance(r, str) else list(r) for r in refs]
  if not all(per_source) or not all(isinstance(h, str) for h in hyps):
    raise ValueError(f'{name}: hyps must be strings and every source needs a reference string')
  return per_source


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
  for name, chosen in _length_buckets('by_length_bucket', lengths, edges):
    selected = values[chosen]
    mean = float(selected.mean()) if selected.size else None
    buckets.append({'bucket': name, 'count': int(selected.size), 'mean': mean})
  return buckets


def _length_buckets(caller: str, lengths: np.ndarray, edges: Sequence[float]):
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


# Source length in words: [0, 10), [10, 20), ..., [50, inf) (Bahdanau et al. 2015, Fig. 2).
BLEU_LENGTH_EDGES = (0, 10, 20, 30, 40, 50, math.inf)

# What each bucket of `bleu_by_length` holds besides its name and count (None when empty).
BUCKET_SCORES = ('bleu', 'chrf', 'brevity_penalty', 'length_ratio')


def bleu_by_length(
  hyps: Sequence[str],
  refs: Sequence[str] | Sequence[Sequence[str]],
  lengths: Sequence[int],
  edges: Sequence[float],
) -> list[dict]:
  """Corpus BLEU of the sentences in each source-length bucket (Bahdanau et al. 2015, Fig. 2).

  Buckets and their names are those of `by_length_bucket` (edges (0, 10, ..., 50, inf) ->
  '0-9', '10-19', ..., '50+'); each is {'bucket', 'count', *BUCKET_SCORES}. Beside BLEU, what
  tells its length curve apart: chrF (character n-grams, no brevity penalty), BLEU's brevity
  penalty (1 when the bucket's output is not shorter than its references, exp(1 - r/c) below)
  and that length ratio c/r in BLEU's tokens. All None when the bucket is empty.
  """
  _check_pairs('bleu_by_length', hyps, refs)
  lengths = np.asarray(lengths)
  if lengths.shape != (len(hyps),):
    raise ValueError(f'bleu_by_length: {lengths.size} lengths for {len(hyps)} hypotheses')
  edges = [float(e) for e in edges]
  buckets = []
  for name, chosen in _length_buckets('bleu_by_length', lengths, edges):
    index = np.flatnonzero(chosen)
    bucket = {'bucket': name, 'count': int(index.size), **dict.fromkeys(BUCKET_SCORES)}
    if index.size:
      bleu, chrf, _ = _corpus_scores('bleu_by_length', [hyps[i] for i in index],
                                  [refs[i] for i in index])
      bucket.update(bleu=float(bleu.score), chrf=float(chrf.score), brevity_penalty=float(bleu.bp),
                    length_ratio=bleu.sys_len / bleu.ref_len if bleu.ref_len else None)
    buckets.append(bucket)
  return buckets


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
