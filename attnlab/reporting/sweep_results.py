"""What a sweep directory holds, read once per report: one `TrialResult` per trial directory
(final_metrics.json, metrics.jsonl, predictions_test.jsonl, sweep_status.json) and the trials
grouped into `Variant`s (all seeds of one setting) per config file.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import statistics

import numpy as np

from attnlab import bleu_scores
from attnlab.metrics import is_number
from attnlab.reporting import convergence
from attnlab.rundir import layout
from attnlab.rundir.layout import RUN_TIMES
from attnlab.sweeps import runner as sweep_runner
from attnlab.sweeps import trial_dirs
from attnlab.sweeps import trials as trials_lib
from attnlab.sweeps.trials import SEED_KEY, Trial

PREDICTIONS = layout.TEST_PREDICTIONS


@dataclasses.dataclass
class TrialResult:
  """What one trial directory holds, read once."""

  trial: Trial
  directory: str
  state: str  # finished | failed | running | interrupted | new
  status: dict
  final: dict | None  # final_metrics.json
  events: list[dict]  # metrics.jsonl, last entry per (step, split), sorted by step
  predictions: dict[int, bool] | None  # test example index -> correct
  outputs: dict[int, tuple[str, list[str]]] | None = None  # index -> (hypothesis, references)
  run_times: list[dict] = dataclasses.field(default_factory=list)  # run_times.jsonl
  provenance: list[dict] = dataclasses.field(default_factory=list)  # provenance.jsonl

  @property
  def cpu_s(self) -> float | None:
    return cpu_seconds(self.run_times)

  @functools.cached_property
  def bleu_statistics(self) -> dict[int, np.ndarray] | None:
    """Test example index -> its `bleu_scores.bleu_statistics` row (the BLEU bootstrap's input)."""
    if not self.outputs:
      return None
    indices = sorted(self.outputs)
    hyps = [self.outputs[i][0] for i in indices]
    rows = bleu_scores.bleu_statistics(hyps, [self.outputs[i][1] for i in indices])
    return dict(zip(indices, rows, strict=True))

  @property
  def test(self) -> dict:
    return (self.final or {}).get('test', {})

  @property
  def tokens_per_sec(self) -> float | None:
    rates = [
      e['tokens_per_sec']
      for e in self.events
      if e.get('split') == 'train' and 'tokens_per_sec' in e
    ]
    rates = rates[1:] or rates  # the first window includes compilation
    return statistics.median(rates) if rates else None

  @functools.cached_property
  def verdict(self) -> convergence.Convergence:
    """Did it converge, tested with its best checkpoint (reporting/convergence.py)."""
    return convergence.assess(self.final, self.events)


@dataclasses.dataclass
class Variant:
  """The trials of one variant (all seeds) in one group."""

  group: str
  label: str  # the experiment's add(label=...), else `settings`
  overrides: dict
  results: list[TrialResult]
  settings: str = ''  # the variant's overrides, 'score=dot, timing=luong' ('' = the label)

  def __post_init__(self):
    self.settings = self.settings or self.label

  @property
  def finished(self) -> list[TrialResult]:
    return [r for r in self.results if r.state == 'finished']

  @property
  def failed(self) -> list[TrialResult]:
    return [r for r in self.results if r.state == 'failed']

  def values(self, metric: str) -> list[float]:
    values = [r.test.get(metric) for r in self.finished]
    return [float(v) for v in values if is_number(v)]

  def stat(self, metric: str) -> tuple[float, float | None] | None:
    """(mean, sample std or None for one seed) of the finished seeds; None when absent."""
    return mean_std(self.values(metric))

  def wall_times(self) -> list[float]:
    return [r.status['wall_s'] for r in self.finished if is_number(r.status.get('wall_s'))]

  def cpu_times(self) -> list[float]:
    return [r.cpu_s for r in self.finished if r.cpu_s is not None]

  def verdicts(self) -> list[tuple[object, convergence.Convergence]]:
    """(seed, convergence verdict) of each finished trial."""
    return [(r.trial.overrides.get(SEED_KEY), r.verdict) for r in self.finished]

  @property
  def shown_label(self) -> str:
    """The label, marked when a finished trial did not converge."""
    unsure = any(not c.converged for _, c in self.verdicts())
    return f'{self.label} {convergence.MARK}' if unsure else self.label


def cpu_seconds(run_times: list[dict]) -> float | None:
  """CPU seconds over a run's process runs (run_times.jsonl lines); None when there are none
  or a run did not record them (runs from before attnlab recorded CPU time)."""
  values = [r.get('cpu_s') for r in run_times]
  return float(sum(values)) if values and all(map(is_number, values)) else None


def mean_std(values) -> tuple[float, float | None] | None:
  values = list(values)
  if not values:
    return None
  return float(np.mean(values)), (float(np.std(values, ddof=1)) if len(values) > 1 else None)


def read_jsonl(path: str) -> list[dict]:
  """The JSON lines of `path` (or of its archived `path`.xz: layout.open_text); [] when
  neither exists."""
  try:
    f = layout.open_text(path)
  except FileNotFoundError:
    return []
  rows = []
  with f:
    for line in f:
      try:
        rows.append(json.loads(line))
      except json.JSONDecodeError:
        continue  # a line cut by an interruption
  return rows


def read_trial(workdir: str, trial: Trial) -> TrialResult:
  directory = sweep_runner.trial_dir(workdir, trial)
  state = trial_dirs.trial_state(directory)
  final = None
  if state == 'finished':
    with open(os.path.join(directory, sweep_runner.FINAL_FILE)) as f:
      final = json.load(f)
  # A resumed run logs some steps twice; the last entry per (step, split) wins.
  events = {
    (e.get('step'), e.get('split')): e
    for e in read_jsonl(os.path.join(directory, layout.METRICS_FILE))
  }
  rows = read_jsonl(os.path.join(directory, PREDICTIONS))
  if final:
    _score_buckets_again(final.get('test', {}), rows)
  predictions = {int(r['index']): bool(r['correct']) for r in rows} if rows else None
  # Detokenized text of the translation tasks: the BLEU bootstrap reads it.
  texts = rows and all(isinstance(r.get('hypothesis'), str) for r in rows)
  outputs = (
    {int(r['index']): (r['hypothesis'], r.get('references') or [r['reference']]) for r in rows}
    if texts
    else None
  )
  return TrialResult(
    trial,
    directory,
    state,
    sweep_runner.read_status(directory),
    final,
    sorted(events.values(), key=lambda e: e.get('step', 0)),
    predictions,
    outputs,
    read_jsonl(os.path.join(directory, RUN_TIMES)),
    read_jsonl(os.path.join(directory, layout.PROVENANCE)),
  )


def _score_buckets_again(test: dict, rows: list[dict]) -> None:
  """Trials evaluated before `bleu_scores.bleu_by_length` gave each bucket its chrF and brevity
  penalty: their BLEU by length again, with those, from the test predictions' texts (the same
  sentences and word counts the evaluation bucketed, so BLEU comes out the same)."""
  buckets = test.get('bleu_by_length')
  if not buckets or all(key in buckets[0] for key in bleu_scores.BUCKET_SCORES):
    return
  if not rows or not all(isinstance(r.get('source'), str) and isinstance(r.get('hypothesis'), str)
                         for r in rows):
    return
  test['bleu_by_length'] = bleu_scores.bleu_by_length(
    [r['hypothesis'] for r in rows],
    [r.get('references') or r['reference'] for r in rows],
    [len(r['source'].split()) for r in rows],
    bleu_scores.BLEU_LENGTH_EDGES,
  )


def collect(workdir: str) -> tuple[dict, dict[str, list[Variant]]]:
  """The manifest and, per group (config file), its variants in sweep order."""
  manifest, trials = trials_lib.read_manifest(workdir)
  short = trials_lib.short_keys(sorted({k for t in trials for k in t.variant}))
  groups: dict[str, dict[str, Variant]] = {}
  for trial in trials:
    overrides = trial.variant
    settings = (
      ', '.join(f'{short[k]}={trials_lib.format_value(v)}' for k, v in overrides.items()) or 'base'
    )
    label = trial.label or settings
    variants = groups.setdefault(trial.config, {})
    if label not in variants:
      variants[label] = Variant(trial.config, label, overrides, [], settings)
    variants[label].results.append(read_trial(workdir, trial))
  return manifest, {g: list(v.values()) for g, v in groups.items()}
