"""BLEU and chrF of detokenized text, through sacrebleu (scores 0-100).

- `bleu_chrf`: corpus BLEU and chrF, with their sacrebleu signatures on request.
- `bleu_statistics` / `bleu_from_statistics`: corpus BLEU of any resample of the sentences,
  tokenized once (the paired bootstrap, attnlab/reporting/stats.py).
- `bleu_by_length`: corpus BLEU per source-length bucket (Bahdanau et al. 2015, Fig. 2), the
  buckets of `metrics.by_length_bucket`.

Every function takes one hypothesis string per source and, per source, one reference string or
a list of them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import sacrebleu

from attnlab.metrics import check_pairs, length_buckets


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
  signatures = (
    f'BLEU {bleu_metric.get_signature().format()}; chrF {chrf_metric.get_signature().format()}'
  )
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
  check_pairs(name, hyps, refs)
  per_source = [[r] if isinstance(r, str) else list(r) for r in refs]
  if not all(per_source) or not all(isinstance(h, str) for h in hyps):
    raise ValueError(f'{name}: hyps must be strings and every source needs a reference string')
  return per_source


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

  Buckets and their names are those of `metrics.by_length_bucket` (edges (0, 10, ..., 50, inf) ->
  '0-9', '10-19', ..., '50+'); each is {'bucket', 'count', *BUCKET_SCORES}. Beside BLEU, what
  tells its length curve apart: chrF (character n-grams, no brevity penalty), BLEU's brevity
  penalty (1 when the bucket's output is not shorter than its references, exp(1 - r/c) below)
  and that length ratio c/r in BLEU's tokens. All None when the bucket is empty.
  """
  check_pairs('bleu_by_length', hyps, refs)
  lengths = np.asarray(lengths)
  if lengths.shape != (len(hyps),):
    raise ValueError(f'bleu_by_length: {lengths.size} lengths for {len(hyps)} hypotheses')
  edges = [float(e) for e in edges]
  buckets = []
  for name, chosen in length_buckets('bleu_by_length', lengths, edges):
    index = np.flatnonzero(chosen)
    bucket = {'bucket': name, 'count': int(index.size), **dict.fromkeys(BUCKET_SCORES)}
    if index.size:
      bleu, chrf, _ = _corpus_scores(
        'bleu_by_length', [hyps[i] for i in index], [refs[i] for i in index]
      )
      bucket.update(
        bleu=float(bleu.score),
        chrf=float(chrf.score),
        brevity_penalty=float(bleu.bp),
        length_ratio=bleu.sys_len / bleu.ref_len if bleu.ref_len else None,
      )
    buckets.append(bucket)
  return buckets
