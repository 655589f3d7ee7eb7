"""What a sweep's finished trials cost and where they ran, for the report's introduction: the
compute line (wall and CPU time, trials copied from another experiment), the machines their
run_times.jsonl name, and their provenance (provenance.jsonl)."""

from __future__ import annotations

import collections

import numpy as np

from attnlab.reporting.sweep_results import Variant
from attnlab.runtime import provenance
from attnlab.sweeps import progress
from attnlab.sweeps.shared import COPIED_FROM


def compute_line(variants: list[Variant]) -> str:
  """What the finished trials cost: their wall time (each trial's own, whatever ran beside
  it) and CPU time (all threads of its processes; pauses and neighbours do not count)."""
  finished = sum(len(v.finished) for v in variants)
  walls = [w for v in variants for w in v.wall_times()]
  cpus = [c for v in variants for c in v.cpu_times()]
  line = f'Compute: {finished} finished trial(s)'
  if walls:
    line += f', {progress.duration(sum(walls))} of trial wall time'
  if cpus:
    line += f', {progress.duration(sum(cpus))} of CPU time'
    line += f' ({progress.duration(float(np.mean(cpus)))} per trial'
    line += f'; {len(cpus)} of them recorded it)' if len(cpus) < finished else ')'
  copied = sorted({r.status[COPIED_FROM].split('/')[0] for v in variants for r in v.finished
                   if r.status.get(COPIED_FROM)})
  if copied:
    count = sum(bool(r.status.get(COPIED_FROM)) for v in variants for r in v.finished)
    line += (f'; {count} of them trained once for another experiment ({", ".join(copied)}: '
             'the same config) and copied, their compute counted in both')
  return line + '. Wall/trial and CPU/trial below are means over finished seeds.' + machines(
    variants)


def machines(variants: list[Variant]) -> str:
  """' Machines: NAME (N process runs), ...': what the finished trials' times were measured on
  (run_times.jsonl), '' where no run named its machine."""
  runs = collections.Counter(t.get('machine') for v in variants for r in v.finished
                             for t in r.run_times)
  named = sorted((name, n) for name, n in runs.items() if name)
  if not named:
    return ''
  parts = [f'{name} ({n} process run(s))' for name, n in named]
  if runs[None]:
    parts.append(f'not recorded ({runs[None]}: runs from before run_times.jsonl named it)')
  return ' Machines: ' + ', '.join(parts) + '.'


def provenance_lines(variants: list[Variant]) -> list[str]:
  """One line per distinct provenance of the finished trials' last process runs
  (provenance.jsonl) with the trials it covers; [] where no trial recorded one."""
  trials = collections.defaultdict(list)
  for v in variants:
    for r in v.finished:
      if r.provenance:
        trials[provenance.one_line(r.provenance[-1])].append(r.trial.name)
  if not trials:
    return []
  lines = ['', 'Provenance (provenance.jsonl: the last process run of each finished trial):', '']
  for line, names in sorted(trials.items(), key=lambda item: -len(item[1])):
    lines.append(f'- {line}: {len(names)} trial(s)' + ('' if len(trials) == 1 else
                                                       f' ({", ".join(sorted(names))})'))
  return lines
