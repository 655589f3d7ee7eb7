"""A sweep's archive: each finished trial kept without its checkpoints, in a folder meant to be
committed or copied off the machine (`python -m attnlab.sweep ... --archive=DIR`).

A converged ablation takes longer than one machine lives (a session, a preemptible VM, a
cluster job's scratch disk). A finished trial is all a report needs without its checkpoints
(config.json, final_metrics.json, metrics.jsonl, predictions, attention weights, status and
wall time: 1-2 MB), so the runner copies it to ARCHIVE/NAME as soon as it ends, and a sweep
started anywhere else with the same --archive restores those trials into its --workdir as
finished instead of training them again. ARCHIVE holds the sweep's sweep.json too, so
`python -m attnlab.report ARCHIVE` writes the same report from the archive alone.

What is left out (`LEFT_OUT`): checkpoints (tens of MB per trial, useless once tested), the
TensorBoard events (metrics.jsonl holds the same numbers), the libraries' log train.log, and
what every evaluation on the eval split wrote along the way (heatmaps, samples, predictions:
~3 MB for a G2P trial; its metrics stay in metrics.jsonl). The test split's predictions and
attention at the selected step, which the report reads, are kept: ~1.4 MB for a G2P trial.
A trial whose archived copy is finished is never trained again: to retrain it, delete
ARCHIVE/NAME and WORKDIR/NAME.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
from collections.abc import Iterable

from attnlab import console
from attnlab import workdir as workdir_lib
from attnlab.sweeps import trial_dirs
from attnlab.sweeps.trials import MANIFEST, Trial, manifest_tmp

# Paths relative to the trial directory (fnmatch patterns).
LEFT_OUT = (
  workdir_lib.CHECKPOINTS,
  'tensorboard',
  console.LOG_FILE,
  '*.tmp',
  'predictions_eval.jsonl',
  'attention/eval_step*',
  'samples/eval_step*',
)


def replace_tree(source: str, target: str) -> None:
  """Copies `source` to `target` (without LEFT_OUT) through a temporary sibling, so that an
  interrupted copy never leaves a half-written trial that looks finished."""

  def ignore(directory: str, names: list[str]) -> set[str]:
    relative = os.path.relpath(directory, source)
    paths = {n: os.path.normpath(os.path.join(relative, n)) for n in names}
    return {n for n, p in paths.items() if any(fnmatch.fnmatch(p, x) for x in LEFT_OUT)}

  tmp = f'{target}.{os.getpid()}.tmp'
  shutil.rmtree(tmp, ignore_errors=True)
  shutil.copytree(source, tmp, ignore=ignore)
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
