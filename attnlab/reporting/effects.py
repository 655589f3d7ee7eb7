"""One setting at a time: every pair of variants that differ in one swept setting alone.

The pooled table (sweep_report.marginal_table) averages a setting over all the others; here
each comparison holds the others fixed (dot against general under Bahdanau timing, then under
Luong timing, ...), so an effect that depends on another setting shows, and a comparison the
main table leaves out (it tests each variant against the best only) gets its own paired
bootstrap and seed-spread check (reporting/stats.py).
"""

from __future__ import annotations

import dataclasses
import itertools

from attnlab.reporting.length_tables import fmt_stat
from attnlab.reporting.stats import beyond_cell, bootstrap_cells, paired_test
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


def pairs_table(variants: list[Variant], metric: str, best) -> list[str]:
  """Markdown lines: each `pairs` pair with both variants finished, its paired bootstrap
  (second minus first, as the main table's Δ) and whether the gap exceeds the seeds. Empty
  when every pair is a comparison with the best, which the main table already makes."""
  found = pairs(variants)
  if all(best in (p.first, p.second) for p in found):
    return []
  short = trials_lib.short_keys(dict.fromkeys(k for v in variants for k in v.overrides))
  lines = [
    '',
    'One setting at a time (pairs of variants that differ in that setting alone, the others '
    f'held; test {metric}; Δ: the second minus the first, measured as in the main table, on '
    'the seeds both finished):',
    '',
    f'| setting | held | first → second | {metric} | Δ [95% CI] | p | beyond seeds |',
    '|---|---|---|---|---|---|---|',
  ]
  waiting = 0
  for p in found:
    if not (p.first.finished and p.second.finished):
      waiting += 1
      continue
    a, b = p.first.stat(metric), p.second.stat(metric)
    held = ', '.join(f'{short[k]}={value}' for k, value in p.held) or '–'
    cells = [
      short[p.key],
      held,
      f'{_value(p.first, p.key)} → {_value(p.second, p.key)}',
      f'{fmt_stat(a)} → {fmt_stat(b)}',
      *bootstrap_cells(paired_test(p.first, p.second, metric)),
      beyond_cell(a, b),
    ]
    lines.append('| ' + ' | '.join(cells) + ' |')
  if len(lines) == 5:  # no pair has both variants finished yet
    return []
  if waiting:
    lines += ['', f'{waiting} more pair(s) wait for a variant with no finished trial.']
  return lines
