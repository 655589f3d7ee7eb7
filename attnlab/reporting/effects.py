"""One setting at a time: every pair of variants that differ in one swept setting alone.

The pooled table (sweep_report.marginal_table) averages a setting over all the others; here
each comparison holds the others fixed (dot against general under Bahdanau timing, then under
Luong timing, ...), so an effect that depends on another setting shows, and a comparison the
main table leaves out (it tests each variant against the best only) gets its own test across
seeds (reporting/seed_tests.py, Holm-corrected over the report's family: reporting/
comparisons.py) and its paired bootstrap of test examples (reporting/stats.py).
"""

from __future__ import annotations

import dataclasses
import itertools

from attnlab.reporting import convergence
from attnlab.reporting.length_tables import fmt_stat
from attnlab.reporting.seed_tests import comparison_cells
from attnlab.reporting.stats import bootstrap_cells, paired_test
from attnlab.reporting.sweep_results import Variant
from attnlab.sweeps import trials as trials_lib


@dataclasses.dataclass(frozen=True)
class Pair:
  key: str  # the setting that differs (a dotted config key)
  held: tuple[tuple[str, str], ...]  # the other settings, (key, formatted value), both alike
  first: Variant  # listed first in the experiment
  second: Variant


def _value(v: Variant, key: str) -> str:
  return trials_lib.format_value(v.overrides.get(key))


def pairs(variants: list[Variant]) -> list[Pair]:
  """Each pair of variants that differ in exactly one override, by setting (in the order the
  settings first appear), then by the held settings and the experiment's variant order."""
  keys = list(dict.fromkeys(k for v in variants for k in v.overrides))
  out = []
  for key in keys:
    by_held = {}
    for v in variants:
      held = tuple((k, _value(v, k)) for k in keys if k != key and k in v.overrides)
      by_held.setdefault(held, []).append(v)
    for held, alike in by_held.items():
      out += [
        Pair(key, held, a, b)
        for a, b in itertools.combinations(alike, 2)
        if _value(a, key) != _value(b, key)
      ]
  return out


def tested_pairs(variants: list[Variant], best) -> list[Pair]:
  """The `pairs` that `pairs_table` tests: those with both variants finished, none where every
  pair is a comparison with the best, which the main table already makes."""
  found = pairs(variants)
  if all(best in (p.first, p.second) for p in found):
    return []
  return [p for p in found if p.first.finished and p.second.finished]


def pairs_table(
  variants: list[Variant], metric: str, best, adjusted: dict[frozenset[str], float]
) -> list[str]:
  """Markdown lines: each of the `tested_pairs`, second minus first (as the main table's Δ),
  across seeds (`adjusted`: the Holm p of each pair of labels) and over test examples. Empty
  when there is none."""
  tested = tested_pairs(variants, best)
  if not tested:
    return []
  short = trials_lib.short_keys(dict.fromkeys(k for v in variants for k in v.overrides))
  head = [
    'setting',
    'held',
    'first → second',
    metric,
    'still improving',
    'Δ [95% CI]',
    'p',
    'Holm p',
    'finding',
    'Δ test examples [95% CI]',
    'p test examples',
  ]
  lines = [
    '',
    'One setting at a time (pairs of variants that differ in that setting alone, the others '
    f'held; test {metric}; Δ: the second minus the first, across seeds and, measured as in the '
    'main table, over the test examples of the seeds both finished):',
    '',
    '| ' + ' | '.join(head) + ' |',
    '|' + '---|' * len(head),
  ]
  for p in tested:
    held = ', '.join(f'{short[k]}={value}' for k, value in p.held) or '–'
    improving = [
      convergence.improving_cell([c for _, c in v.verdicts()]) for v in (p.first, p.second)
    ]
    cells = [
      short[p.key],
      held,
      f'{_value(p.first, p.key)} → {_value(p.second, p.key)}',
      f'{fmt_stat(p.first.stat(metric))} → {fmt_stat(p.second.stat(metric))}',
      ' → '.join(improving),
      *comparison_cells(p.first, p.second, metric, adjusted),
      *bootstrap_cells(paired_test(p.first, p.second, metric)),
    ]
    lines.append('| ' + ' | '.join(cells) + ' |')
  waiting = len(pairs(variants)) - len(tested)
  if waiting:
    lines += ['', f'{waiting} more pair(s) wait for a variant with no finished trial.']
  return lines
