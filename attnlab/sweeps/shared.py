"""Trials another experiment already trained: found by their whole config, copied, not rerun.

Experiments overlap. On Bible the bottleneck's two attentional decoders (Bahdanau concat, Luong
general + input feeding) are two cells of score_timing_bible's grid, and Luong's is also
local_global's global attention; on G2P local_global's global trials are score_timing's
general x luong + feeding cells. Each such trial costs one to two hours of a core.

A trial is the same trial when its resolved config (the config file with the experiment's
FIXED and the trial's overrides applied: every key, the seed and the step cap included) equals
the config.json of a finished trial archived beside this sweep's archive (ARCHIVE/../OTHER/NAME,
e.g. results/bottleneck/... for --archive=results/score_timing_bible). Then the archived trial is
copied into ARCHIVE and WORKDIR under this experiment's trial name, and its sweep_status.json
says `copied_from` (OTHER/NAME). Configs that differ in any key, even one the model ignores, are
different trials: nothing is guessed. The copy's numbers are the original's, so each
experiment's report (and its compute line, which says how many were copied) stays complete on
its own; delete the copy in both places to train it again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping

from attnlab.sweeps import archive as archive_lib
from attnlab.sweeps import trial_dirs
from attnlab.sweeps.trials import Trial
from attnlab.train import resume

COPIED_FROM = 'copied_from'  # sweep_status.json key: OTHER/NAME, relative to the archives' root


def copied_line(name: str, origin: str) -> str:
  """What a sweep prints for a trial it copied instead of training."""
  return f'[shared] {name}: finished as {origin} under the same config; copied, not trained again'


def config_key(config: Mapping) -> str:
  """One string per distinct config: flattened dotted keys, JSON values (tuples as lists)."""
  return json.dumps(resume.flatten(json.loads(json.dumps(dict(config)))), sort_keys=True)


def _finished_trials(root: str, own: str) -> Iterable[str]:
  """The finished trial directories of every archive in `root` other than `own`."""
  for experiment in sorted(os.listdir(root)):
    archive = os.path.join(root, experiment)
    if not os.path.isdir(archive) or os.path.realpath(archive) == os.path.realpath(own):
      continue
    for name in sorted(os.listdir(archive)):
      directory = os.path.join(archive, name)
      if os.path.isdir(directory) and trial_dirs.trial_state(directory) == 'finished':
        yield directory


def donors(archive: str) -> dict[str, str]:
  """config_key -> the first finished trial directory (by sorted path) with that config, over
  the archives beside `archive`. Trials without a readable config.json are left out."""
  root = os.path.dirname(os.path.abspath(archive))
  found: dict[str, str] = {}
  if not os.path.isdir(root):
    return found
  for directory in _finished_trials(root, archive):
    settings = trial_dirs.saved_settings(directory)  # flat already: config_key keeps it
    if settings:
      found.setdefault(config_key(settings), directory)
  return found


def copy_trial(donor: str, workdir: str, archive: str, trial: Trial) -> str:
  """Copies the finished `donor` to ARCHIVE/NAME and WORKDIR/NAME as `trial`; returns the
  `copied_from` it records (the original's, when the donor is itself a copy)."""
  root = os.path.dirname(os.path.abspath(archive))
  status = trial_dirs.read_status(donor)
  origin = status.get(COPIED_FROM) or os.path.relpath(os.path.abspath(donor), root)
  status.update(trial_dirs.identity(trial), **{COPIED_FROM: origin})
  for target in (trial_dirs.trial_dir(archive, trial), trial_dirs.trial_dir(workdir, trial)):
    os.makedirs(os.path.dirname(target), exist_ok=True)
    archive_lib.replace_tree(donor, target)
    trial_dirs.write_status(target, status)
  return origin


def copy_shared(
  trials: Iterable[Trial], configs: Mapping, workdir: str, archive: str
) -> dict[str, str]:
  """Copies every trial of `trials` that an archive beside `archive` holds finished under the
  same config (`configs`: name -> resolved ConfigDict); returns name -> copied_from."""
  found = donors(archive)
  copied = {}
  for trial in trials:
    donor = found.get(config_key(configs[trial.name].to_dict()))
    if donor is not None:
      copied[trial.name] = copy_trial(donor, workdir, archive, trial)
  return copied
