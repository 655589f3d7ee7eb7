"""A sweep report's family of tests across seeds, corrected together (Holm).

The family is every distinct pair of variants that the report tests across seeds, over all its
groups (config files): in each group, each variant against the group's best (the main table),
and each pair of the one-setting-at-a-time table where that table is printed
(reporting/effects.py, `tested_pairs`). A pair printed in both tables is one test, counted
once; a pair with one seed on a side has no test and is not in the family. Holm's step-down
correction over the family (reporting/seed_tests.py) gives the p that the report's findings
('beyond seeds', 'not shown') come from.
"""

from __future__ import annotations

from attnlab.reporting import effects
from attnlab.reporting.seed_tests import holm, variant_test
from attnlab.reporting.stats import primary_metric, rank
from attnlab.reporting.sweep_results import Variant


def compared(variants: list[Variant], best) -> list[tuple[Variant, Variant]]:
  """The (first, second) pairs a group's tables compare: the best against each other variant,
  then the one-setting-at-a-time pairs."""
  main = [(best, v) for v in variants if best is not None and v is not best]
  return main + [(p.first, p.second) for p in effects.tested_pairs(variants, best)]


def family(groups: dict[str, list[Variant]], metric: str) -> dict[str, dict[frozenset[str], float]]:
  """Group -> {the two variant labels: Holm-adjusted p} of every test across seeds the report
  prints, in the metric each group is ranked by."""
  raw = {}  # (group, labels) -> raw p, in the order the report prints them
  for group, variants in groups.items():
    ranked_by = primary_metric(variants, metric)
    for first, second in compared(variants, rank(variants, ranked_by)):
      key = (group, frozenset((first.label, second.label)))
      test = None if key in raw else variant_test(first, second, ranked_by)
      if test:
        raw[key] = test['p_value']
  out = {group: {} for group in groups}
  for (group, labels), p in zip(raw, holm(raw.values()), strict=True):
    out[group][labels] = p
  return out
