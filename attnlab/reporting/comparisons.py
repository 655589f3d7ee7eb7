"""A sweep report's family of tests across seeds, corrected together (Holm).

The family is every pair of variants of a group (config file) with two or more finished seeds
on each side, over all the report's groups, fixed before the results are seen: the tables then
print some of its tests (each variant against its group's best, the one-setting-at-a-time pairs
of reporting/effects.py) and `rest_table` the others, so every test the correction counts is
printed once or more. A family of only the printed tests would depend on which variant came
out best, a choice made after seeing the results, and Holm would undercount it. Holm's
step-down correction over the family (reporting/seed_tests.py) gives the p that the report's
findings ('beyond seeds', 'not shown') come from.
"""

from __future__ import annotations

import itertools

from attnlab.reporting import effects
from attnlab.reporting.length_tables import fmt_stat
from attnlab.reporting.seed_tests import comparison_cells, holm, variant_test
from attnlab.reporting.stats import primary_metric
from attnlab.reporting.sweep_results import Variant


def _labels(first: Variant, second: Variant) -> frozenset[str]:
  return frozenset((first.label, second.label))


def family(groups: dict[str, list[Variant]], metric: str) -> dict[str, dict[frozenset[str], float]]:
  """Group -> {the two variant labels: Holm-adjusted p} of every pair of the group's variants
  that has a test across seeds, in the metric each group is ranked by."""
  raw = {}  # (group, labels) -> raw p, in the experiment's variant order
  for group, variants in groups.items():
    ranked_by = primary_metric(variants, metric)
    for first, second in itertools.combinations(variants, 2):
      test = variant_test(first, second, ranked_by)
      if test:
        raw[(group, _labels(first, second))] = test['p_value']
  out = {group: {} for group in groups}
  for (group, labels), p in zip(raw, holm(raw.values()), strict=True):
    out[group][labels] = p
  return out


def _printed(variants: list[Variant], best) -> set[frozenset[str]]:
  """The pairs the group's main and one-setting-at-a-time tables test."""
  main = {_labels(best, v) for v in variants if best is not None and v is not best}
  return main | {_labels(p.first, p.second) for p in effects.tested_pairs(variants, best)}


def rest_table(
  variants: list[Variant], metric: str, best, adjusted: dict[frozenset[str], float]
) -> list[str]:
  """Markdown lines: the family's pairs of this group that no other table prints, second minus
  first in the experiment's order, across seeds. Empty when there is none."""
  shown = _printed(variants, best)
  rest = [
    (a, b) for a, b in itertools.combinations(variants, 2)
    if _labels(a, b) in adjusted and _labels(a, b) not in shown
  ]
  if not rest:
    return []
  head = ['first → second', metric, 'Δ [95% CI]', 'p', 'Holm p', 'finding']
  lines = [
    '',
    'The other pairs of the family (no table above prints them; test '
    f'{metric}, Δ: the second minus the first, across seeds):',
    '',
    '| ' + ' | '.join(head) + ' |',
    '|' + '---|' * len(head),
  ]
  for a, b in rest:
    cells = [
      f'{a.label} → {b.label}',
      f'{fmt_stat(a.stat(metric))} → {fmt_stat(b.stat(metric))}',
      *comparison_cells(a, b, metric, adjusted),
    ]
    lines.append('| ' + ' | '.join(cells) + ' |')
  return lines
