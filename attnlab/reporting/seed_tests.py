"""Is a difference between two variants larger than training noise: tests across seeds.

The unit of evidence is the seed: each finished trial contributes one number, its test metric,
so a variant with n seeds is n independent draws of the whole training (initialisation, data
order, dropout). Two variants are compared by Welch's t-test on those numbers (unequal
variances, Welch–Satterthwaite degrees of freedom), all finished seeds of each, unpaired:

    Δ = mean(b) - mean(a);   se = sqrt(s_a^2 / n_a + s_b^2 / n_b)   (s^2: sample variances)
    df = se^4 / ((s_a^2 / n_a)^2 / (n_a - 1) + (s_b^2 / n_b)^2 / (n_b - 1))
    p = 2 P(T_df >= |Δ| / se);   95% CI = Δ ± t_df(0.975) se

With one seed on a side there is no variance to test against: no test. Where neither side
varies (se = 0) the t statistic is undefined; its limit is taken: p = 1 for equal means, else 0.

A report prints many such tests, so their p-values are corrected together with Holm's
step-down method (Holm 1979), which controls the chance of any false 'beyond seeds' in the
family at ALPHA, whatever the dependence between the tests: sorted ascending, the j-th of m
p-values (j from 1) is multiplied by m - j + 1, capped at 1, and made non-decreasing. Which
tests form a report's family is reporting/comparisons.py's to say.

The paired bootstrap of reporting/stats.py answers another question (test-set noise: could
other test examples reverse the gap between these fixed models?) and stays beside it.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as scipy_stats

ALPHA = 0.05  # family-wise error rate of the Holm-corrected tests
SUPPORTED, NOT_SHOWN = 'beyond seeds', 'not shown'  # the finding of a corrected test
STILL_IMPROVING = ' (still improving)'  # after a finding that compares trials still improving


def welch_test(a, b) -> dict | None:
  """Welch's t-test of mean(b) - mean(a) over the per-seed values `a` and `b`.

  Returns {'delta', 'ci_low', 'ci_high' (95%), 'p_value' (two-sided), 'df' (None where no
  seed varies), 'n': (n_a, n_b)}; None with fewer than two values on a side.
  """
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  if a.ndim != 1 or b.ndim != 1:
    raise ValueError(f'welch_test: need two 1-D arrays, got {a.shape} and {b.shape}')
  if a.size < 2 or b.size < 2:
    return None
  delta = float(b.mean() - a.mean())
  va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size  # squared standard errors
  se = math.sqrt(va + vb)
  if se == 0.0:
    p, df, half = (1.0 if delta == 0.0 else 0.0), None, 0.0
  else:
    df = float((va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1)))
    p = float(2.0 * scipy_stats.t.sf(abs(delta) / se, df))
    half = float(scipy_stats.t.ppf(0.975, df) * se)
  return {
    'delta': delta,
    'ci_low': delta - half,
    'ci_high': delta + half,
    'p_value': p,
    'df': df,
    'n': (int(a.size), int(b.size)),
  }


def holm(p_values) -> list[float]:
  """Holm's step-down adjusted p-values, in the order given: reject where adjusted <= alpha."""
  p_values = [float(p) for p in p_values]
  m = len(p_values)
  adjusted = [0.0] * m
  running = 0.0
  for j, i in enumerate(sorted(range(m), key=lambda i: p_values[i])):
    running = max(running, min(1.0, (m - j) * p_values[i]))  # j counts from 0 here
    adjusted[i] = running
  return adjusted


def finding(adjusted_p: float | None, still_improving: bool = False) -> str:
  """A report's finding for a corrected p: SUPPORTED at or below ALPHA, else NOT_SHOWN ('–'
  without a test), with STILL_IMPROVING where a compared trial had not stopped improving."""
  if adjusted_p is None:
    return '–'
  word = SUPPORTED if adjusted_p <= ALPHA else NOT_SHOWN
  return word + (STILL_IMPROVING if still_improving else '')


def p_cell(p: float | None) -> str:
  """'0.023', '< 0.001' below what three decimals show, '–' without a test."""
  if p is None:
    return '–'
  return '< 0.001' if p < 0.0005 else f'{p:.3f}'


def seed_cells(test: dict | None, adjusted_p: float | None, still_improving: bool) -> list[str]:
  """A report's 'Δ [95% CI]', 'p', 'Holm p' and finding cells for a `welch_test` result."""
  if test is None:
    return ['–', '–', '–', '–']
  return [
    f'{test["delta"]:+.3f} [{test["ci_low"]:+.3f}, {test["ci_high"]:+.3f}]',
    p_cell(test['p_value']),
    p_cell(adjusted_p),
    finding(adjusted_p, still_improving),
  ]


def variant_test(first, second, metric: str) -> dict | None:
  """`welch_test` of variant `second` against `first` (sweep_results.Variant) on the test
  `metric` of all their finished seeds."""
  return welch_test(first.values(metric), second.values(metric))


def comparison_cells(
  first, second, metric: str, adjusted: dict[frozenset[str], float]
) -> list[str]:
  """`seed_cells` of `second` against `first`; `adjusted`: the Holm p of each pair of labels in
  the report's family (reporting/comparisons.py)."""
  improving = any(c.still_improving for v in (first, second) for _, c in v.verdicts())
  return seed_cells(
    variant_test(first, second, metric),
    adjusted.get(frozenset((first.label, second.label))),
    improving,
  )
