"""Which variant is best, and is the difference real: ranking and paired bootstrap tests.

Variants (attnlab/report.py) are compared with the best one of their group on per-example
exact-match correctness of the test split, paired by seed and example index: a synthetic
task's test set depends on the seed, and the same seed gives every variant the same examples.
The paired bootstrap (Koehn 2004) resamples those pairs with replacement.
"""

from __future__ import annotations

import numpy as np

from attnlab.sweeps.trials import SEED_KEY

BOOTSTRAP_SAMPLES = 2000
LOWER_IS_BETTER = ('loss', 'perplexity', 'per', 'wer', 'alignment_error_rate')


def paired_bootstrap(a, b, *, samples: int = BOOTSTRAP_SAMPLES, seed: int = 0) -> dict:
  """Paired bootstrap of mean(b) - mean(a) over examples (0/1 or real per-example scores).

  Returns {'delta', 'ci_low', 'ci_high' (95% percentile interval), 'p_value' (two-sided: twice
  the smaller share of resampled differences on either side of zero, at most 1), 'n'}.
  """
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  if a.shape != b.shape or a.ndim != 1 or not a.size:
    raise ValueError(
      f'paired_bootstrap: need two equal non-empty 1-D arrays, got {a.shape} and {b.shape}'
    )
  diff = b - a
  rng = np.random.default_rng(seed)
  means = np.array([diff[rng.integers(0, diff.size, diff.size)].mean() for _ in range(samples)])
  p = min(1.0, 2.0 * min(np.mean(means <= 0.0), np.mean(means >= 0.0)))
  low, high = np.percentile(means, [2.5, 97.5])
  return {
    'delta': float(diff.mean()),
    'ci_low': float(low),
    'ci_high': float(high),
    'p_value': float(p),
    'n': int(diff.size),
  }


def paired_correctness(best, other) -> tuple[list[bool], list[bool]]:
  """Correctness of both variants on the test examples they share, seed by seed."""
  by_seed = lambda v: {
    r.trial.overrides.get(SEED_KEY): r.predictions for r in v.finished if r.predictions is not None
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
  sign = 1.0 if metric in LOWER_IS_BETTER else -1.0
  return min(scored, key=lambda s: (sign * s[0], s[1]))[2]


def primary_metric(variants: list, requested: str) -> str:
  """`requested`, or for 'auto': WER where the task reports it, else sequence accuracy."""
  if requested != 'auto':
    return requested
  return 'wer' if any(v.values('wer') for v in variants) else 'sequence_accuracy'


def significance(variants: list, best) -> dict[str, dict]:
  """Variant label -> paired bootstrap of that variant against `best` (none for `best`)."""
  out = {}
  for v in variants:
    if best is None or v is best:
      continue
    a, b = paired_correctness(best, v)
    if a:
      out[v.label] = paired_bootstrap(a, b)
  return out
