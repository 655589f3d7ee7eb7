"""Which variant is best, and how much of a gap is test-set noise: ranking and paired bootstraps.

Variants (reporting/sweep_report.py) are compared with the best one of their group on the test
split, paired by seed and example index: a synthetic task's test set depends on the seed, and
the same seed gives every variant the same examples. The paired bootstrap (Koehn 2004)
resamples those pairs with replacement: per-example exact-match correctness, or, where the
variants are ranked by BLEU, corpus BLEU of the resampled sentences (its statistics summed, as
BLEU is not a mean over sentences). The models stay fixed, so it measures test-set noise, not
training variance; the test across seeds is reporting/seed_tests.py's.
"""

from __future__ import annotations

import numpy as np

from attnlab import bleu_scores, metrics
from attnlab.sweeps.trials import SEED_KEY

BOOTSTRAP_SAMPLES = 2000


def paired_bootstrap(a, b, *, samples: int = BOOTSTRAP_SAMPLES, seed: int = 0) -> dict:
  """Paired bootstrap of mean(b) - mean(a) over examples (0/1 or real per-example scores).

  Returns {'delta', 'ci_low', 'ci_high' (95% percentile interval), 'p_value' (two-sided: twice
  the smaller share of resampled differences on either side of zero, at most 1), 'n',
  'samples'}.
  """
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  if a.shape != b.shape or a.ndim != 1 or not a.size:
    raise ValueError(
      f'paired_bootstrap: need two equal non-empty 1-D arrays, got {a.shape} and {b.shape}'
    )
  diff = b - a
  rng = np.random.default_rng(seed)
  means = np.array([diff[rng.integers(0, diff.size, diff.size)].mean() for _ in range(samples)])
  return _summary(float(diff.mean()), means, diff.size)


def paired_bootstrap_bleu(a, b, *, samples: int = BOOTSTRAP_SAMPLES, seed: int = 0) -> dict:
  """Paired bootstrap of corpus BLEU(b) - BLEU(a): `a`, `b` are N x BLEU_STATISTICS rows of
  `bleu_scores.bleu_statistics` for the same N sentences; both systems get the same resamples.
  Returns what `paired_bootstrap` does, in BLEU points."""
  a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
  if (
    a.shape != b.shape or a.ndim != 2 or not a.shape[0] or a.shape[1] != bleu_scores.BLEU_STATISTICS
  ):
    raise ValueError(
      f'paired_bootstrap_bleu: need two equal N x {bleu_scores.BLEU_STATISTICS} arrays, got '
      f'{a.shape} and {b.shape}'
    )
  n = a.shape[0]
  rng = np.random.default_rng(seed)
  draws = rng.multinomial(n, np.full(n, 1.0 / n), size=samples)  # times each sentence is drawn
  deltas = np.array(
    [
      bleu_scores.bleu_from_statistics(y) - bleu_scores.bleu_from_statistics(x)
      for x, y in zip(draws @ a, draws @ b, strict=True)
    ]
  )
  delta = bleu_scores.bleu_from_statistics(b.sum(0)) - bleu_scores.bleu_from_statistics(a.sum(0))
  return _summary(delta, deltas, n)


def _summary(delta: float, resampled, n: int) -> dict:
  p = min(1.0, 2.0 * min(np.mean(resampled <= 0.0), np.mean(resampled >= 0.0)))
  low, high = np.percentile(resampled, [2.5, 97.5])
  return {
    'delta': float(delta),
    'ci_low': float(low),
    'ci_high': float(high),
    'p_value': float(p),
    'n': int(n),
    'samples': len(resampled),
  }


def p_resolution(samples: int) -> float:
  """The smallest non-zero bootstrap p of `samples` resamples: twice one resample's share."""
  return 2.0 / samples


def bootstrap_cells(test: dict | None) -> list[str]:
  """A report's 'Δ [95% CI]' and 'p' cells for a `paired_test` result ('–' and '' without);
  a p of 0 reads '< ' the resolution its resamples give, as no finer p can be told apart."""
  if not test:
    return ['–', '']
  p = test['p_value']
  return [
    f'{test["delta"]:+.3f} [{test["ci_low"]:+.3f}, {test["ci_high"]:+.3f}]',
    f'< {p_resolution(test["samples"]):.2g}' if p == 0 else f'{p:.3f}',
  ]


def paired_correctness(best, other) -> tuple[list[bool], list[bool]]:
  """Correctness of both variants on the test examples they share, seed by seed."""
  return _paired(best, other, 'predictions')


def paired_bleu_statistics(best, other) -> tuple[list, list]:
  """`bleu_scores.bleu_statistics` rows of both variants on the test sentences they share."""
  return _paired(best, other, 'bleu_statistics')


def _paired(best, other, field: str) -> tuple[list, list]:
  # field: a TrialResult attribute, {example index: value} or None
  by_seed = lambda v: {
    r.trial.overrides.get(SEED_KEY): getattr(r, field)
    for r in v.finished
    if getattr(r, field) is not None
  }
  mine, theirs = by_seed(best), by_seed(other)
  a, b = [], []
  for seed in sorted(set(mine) & set(theirs), key=str):
    for index in sorted(set(mine[seed]) & set(theirs[seed])):
      a.append(mine[seed][index])
      b.append(theirs[seed][index])
  return a, b


def rank(variants: list, metric: str):
  """The variant with the best mean `metric` (first listed among ties)."""
  scored = [(v.stat(metric)[0], i, v) for i, v in enumerate(variants) if v.stat(metric)]
  if not scored:
    return None
  sign = 1.0 if metrics.lower_is_better(metric) else -1.0
  return min(scored, key=lambda s: (sign * s[0], s[1]))[2]


def primary_metric(variants: list, requested: str) -> str:
  """`requested`, or for 'auto': the metric the trials were selected on (final_metrics.json
  `selection`: WER for G2P, BLEU for translation), else WER where the task reports it, else
  sequence accuracy."""
  if requested != 'auto':
    return requested
  selected = {
    ((r.final or {}).get('selection') or {}).get('metric') for v in variants for r in v.finished
  }
  if len(selected) == 1 and None not in selected:
    metric = selected.pop()
    if any(v.values(metric) for v in variants):
      return metric
  return 'wer' if any(v.values('wer') for v in variants) else 'sequence_accuracy'


def paired_test(first, second, metric: str) -> dict | None:
  """Paired bootstrap of variant `second` against `first` on their shared test examples (what
  `paired_bootstrap` returns, of corpus BLEU when `metric` is BLEU, else of exact-match
  correctness); None when they share none (a variant not run, no predictions written)."""
  pairs, test = (
    (paired_bleu_statistics, paired_bootstrap_bleu)
    if metric == 'bleu'
    else (paired_correctness, paired_bootstrap)
  )
  a, b = pairs(first, second)
  return test(a, b) if a else None


def significance(variants: list, best, metric: str) -> dict[str, dict]:
  """Variant label -> `paired_test` of that variant against `best` (none for `best`)."""
  out = {}
  for v in variants:
    if best is None or v is best:
      continue
    test = paired_test(best, v, metric)
    if test:
      out[v.label] = test
  return out
