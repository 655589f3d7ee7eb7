"""A sweep's archive: each finished trial kept compact, without its checkpoints, in a folder meant
to be committed or copied off the machine (`python -m attnlab.sweep ... --archive=DIR`).

A converged ablation takes longer than one machine lives (a session, a preemptible VM, a
cluster job's scratch disk). A finished trial is all a report needs without its checkpoints,
so the runner copies it to ARCHIVE/NAME as soon as it ends, and a sweep started anywhere else
with the same --archive restores those trials into its --workdir as finished instead of
training them again. ARCHIVE holds the sweep's sweep.json too, so `python -m attnlab.report
ARCHIVE` writes the same report from the archive alone.

An archived trial keeps only what the reports (reporting/sweep_results.py, run_report.py) and a
restore (trial_dirs: finished, the same trial, how it ended) read (`KEPT`): config.json,
final_metrics.json (and the first one of a run whose limit was relaxed), sweep_status.json,
run_times.jsonl, config_changes.jsonl; metrics.jsonl, the test split's predictions and the sweep
log xz-compressed as NAME.xz (`COMPRESSED`; layout.open_text reads it, and the NAME.gz of
older archives, which a copy turns into NAME.xz); and the attention weights of the tested step
(attention/test_stepNNNNNNN.npz, from which the reports draw their heatmaps; that step's PNGs
only for a run that saved no weights). What is left out
can be regenerated from a checkpoint or is never read from an archive: checkpoints (tens of MB
per trial, useless once tested), TensorBoard events (metrics.jsonl holds the same numbers),
train.log, the vocabularies (a run with checkpoints keeps them; up to 0.7 MB for a Bible
trial), samples/ (the predictions hold every test output) and what evaluations at other steps
or on the eval split wrote. A G2P trial takes ~0.16 MB, a Bible one ~0.23 MB. Restoring copies
the compact trial as it is (`replace_tree` is the one copy: archiving, restoring, and sharing a
trial between experiments, shared.py), so the restored trial is finished, the sweep skips it
and its report reads the same numbers.
A trial whose archived copy is finished is never trained again: to retrain it, delete
ARCHIVE/NAME and WORKDIR/NAME.
"""

from __future__ import annotations

import fnmatch
import lzma
import os
import shutil
from collections.abc import Iterable
from typing import BinaryIO

from attnlab.rundir import layout
from attnlab.sweeps import trial_dirs
from attnlab.sweeps.trials import MANIFEST, Trial, manifest_tmp

# Files of the trial directory kept as they are (fnmatch patterns; final_metrics.cap24000.json
# is the first result of a run whose step cap was raised: trial_dirs.relax_trial).
KEPT = (
  layout.CONFIG_FILE,
  layout.CONFIG_CHANGES,
  layout.FINAL_METRICS_FILE,
  'final_metrics.*.json',
  trial_dirs.STATUS_FILE,
  layout.RUN_TIMES,
  layout.PROVENANCE,
)
# Large text files the reports read, kept as NAME + layout.COMPRESSED.
COMPRESSED = (layout.METRICS_FILE, layout.TEST_PREDICTIONS, trial_dirs.LOG_FILE)
ATTENTION = 'attention'  # attention/<split>_stepNNNNNNN.npz and _ex<i>.png (evaluation)


def write_xz(source: BinaryIO, target: str) -> None:
  """The bytes of `source` xz-compressed into `target`, the same bytes for the same input (xz
  keeps no file name or time), so that archiving a trial again changes nothing. Preset 6, xz's
  default: its 8 MiB dictionary holds the largest archived file (~1 MB) whole, and preset 9 or
  PRESET_EXTREME compress results/ no smaller."""
  with lzma.open(target, 'wb', format=lzma.FORMAT_XZ, preset=6) as out:
    shutil.copyfileobj(source, out)


def _copy_text(source: str, target: str) -> None:
  """The text file `source` (in any form of layout.TEXT_FORMS) as `target` + COMPRESSED: an
  xz copy as it is, a plain or gzip one compressed; nothing when there is none."""
  form = layout.text_form(source)
  if form == layout.COMPRESSED:
    shutil.copy2(source + form, target + layout.COMPRESSED)
  elif form is not None:
    with layout.TEXT_FORMS[form](source + form, 'rb') as f:
      write_xz(f, target + layout.COMPRESSED)


def _tested_attention(source: str) -> list[str]:
  """The attention files the reports read: the weights (.npz) of the test split at the tested
  step (final_metrics.json's `step`; every tested step if it has none), else that step's PNGs."""
  folder = os.path.join(source, ATTENTION)
  if not os.path.isdir(folder):
    return []
  try:
    step = trial_dirs.read_final(source).get('step')
  except (OSError, ValueError):
    step = None
  prefix = 'test_step' if step is None else f'test_step{int(step):07d}'
  names = sorted(n for n in os.listdir(folder) if n.startswith(prefix))
  weights = {n[: -len('.npz')] for n in names if n.endswith('.npz')}
  return [n for n in names
          if n.endswith('.npz') or (n.endswith('.png') and n.rsplit('_ex', 1)[0] not in weights)]


def compact_copy(source: str, target: str) -> None:
  """Writes the new directory `target`: the trial `source` as an archive keeps it (module
  docstring). A trial that is compact already (restored or archived) is copied as it is, but
  for an older archive's NAME.gz, which becomes NAME.xz."""
  os.makedirs(target)
  for name in sorted(os.listdir(source)):
    path = os.path.join(source, name)
    if os.path.isfile(path) and any(fnmatch.fnmatch(name, pattern) for pattern in KEPT):
      shutil.copy2(path, os.path.join(target, name))
  for name in COMPRESSED:
    _copy_text(os.path.join(source, name), os.path.join(target, name))
  attention = _tested_attention(source)
  if attention:
    os.makedirs(os.path.join(target, ATTENTION))
  for name in attention:
    shutil.copy2(os.path.join(source, ATTENTION, name), os.path.join(target, ATTENTION, name))


def replace_tree(source: str, target: str) -> None:
  """Copies the trial `source` to `target`, compact (`compact_copy`), through a temporary
  sibling, so that an interrupted copy never leaves a half-written trial that looks finished."""
  tmp = f'{target}.{os.getpid()}.tmp'
  shutil.rmtree(tmp, ignore_errors=True)
  compact_copy(source, tmp)
  old = f'{target}.{os.getpid()}.old'
  if os.path.exists(target):
    os.replace(target, old)
  os.replace(tmp, target)
  shutil.rmtree(old, ignore_errors=True)


def archive_trial(workdir: str, archive: str, trial: Trial) -> str:
  """Copies the finished trial WORKDIR/NAME to ARCHIVE/NAME; returns the archived path."""
  os.makedirs(archive, exist_ok=True)
  target = trial_dirs.trial_dir(archive, trial)
  replace_tree(trial_dirs.trial_dir(workdir, trial), target)
  return target


def copy_manifest(workdir: str, archive: str) -> None:
  """Replaces ARCHIVE's sweep.json at once: another sweep process checking whose folder the
  archive is (folders.check_folder_owner) never reads half a file."""
  os.makedirs(archive, exist_ok=True)
  target = os.path.join(archive, MANIFEST)
  tmp = manifest_tmp(target)
  shutil.copyfile(os.path.join(workdir, MANIFEST), tmp)
  os.replace(tmp, target)


def sync(
  workdir: str, archive: str, trials: Iterable[Trial]
) -> tuple[list[str], list[str], list[str]]:
  """Makes WORKDIR and ARCHIVE agree on the finished trials before a sweep runs.

  A trial finished in the archive but not in the workdir (trained on another machine) is
  restored into the workdir, over whatever partial run the workdir had; one finished in the
  workdir but not in the archive (trained before --archive was given) is archived. An archived
  trial that ended at a limit the experiment has relaxed since (a step cap raised, a
  learning-rate floor lowered: trial_dirs.LIMITS) is outdated: not restored, it is trained again
  (or extended from the workdir's checkpoints) and then replaces the archived copy. Returns
  the names (restored, archived, outdated)."""
  restored, archived, outdated = [], [], []
  for trial in trials:
    kept = trial_dirs.trial_dir(archive, trial)
    local = trial_dirs.trial_dir(workdir, trial)
    kept_done = trial_dirs.trial_state(kept) == 'finished'
    local_done = trial_dirs.trial_state(local) == 'finished'
    if kept_done and not local_done:
      relaxed = trial_dirs.check_same_trial(kept, trial)
      if relaxed and trial_dirs.reached_limit(kept, relaxed):
        outdated.append(trial.name)
        continue
      os.makedirs(workdir, exist_ok=True)
      replace_tree(kept, local)
      restored.append(trial.name)
    elif local_done and not kept_done:
      archive_trial(workdir, archive, trial)
      archived.append(trial.name)
  return restored, archived, outdated
