"""A sweep's trials and how they stand, one line each: the `--dry_run` listing of
`python -m attnlab.sweep` (attnlab/sweep.py), which writes nothing.

Each line gives a trial's state (trial_dirs.trial_state, INVALID for a config that does not
build, or with --archive archived or shared where the sweep would restore or copy it), the
step it trained to of its cap, and its test result or its best eval so far.
"""

from __future__ import annotations

import os
import shlex
import sys

from attnlab.sweeps import progress, trial_dirs
from attnlab.sweeps import shared as shared_lib
from attnlab.sweeps import trials as trials_lib
from attnlab.train import selection


def _print(line: str = '', out=None) -> None:
  print(line, file=out or sys.stdout, flush=True)


def list_trials(
  experiment,
  trials,
  chosen,
  configs,
  errors,
  dirs,
  states,
  workdir,
  archive,
  *,
  share: bool,
  out=None,
) -> None:
  """--dry_run: the chosen trials and every invalid one, as this folder and the archives hold
  them; writes nothing."""
  names = {t.name for t in chosen}
  listed = [t for t in trials if t.name in names or t.name in errors]  # errors always show
  shown, notes = dict(dirs), {}
  if archive:
    shown, notes = what_the_archives_hold(
      trials, configs, errors, states, dirs, archive, share=share
    )
  describe(experiment, listed, workdir, shown, states, configs, errors, out, notes)


def what_the_archives_hold(trials, configs, errors, states, dirs, archive, *, share: bool):
  """For a dry run: (trial name -> the directory to read it from, name -> a note). A trial
  not finished here that the sweep would restore from `archive` reads as 'archived' there; one
  it would copy from another experiment's archive (same config, shared.py) as 'shared', with
  where from. Updates `states`; writes nothing."""
  shown, notes = dict(dirs), {}
  donors = shared_lib.donors(archive) if share else {}
  root = os.path.dirname(os.path.abspath(archive))
  for trial in trials:
    if states[trial.name] == 'finished' or trial.name in errors:
      continue
    kept = os.path.join(archive, trial.name)
    donor = donors.get(shared_lib.config_key(configs[trial.name].to_dict()))
    if trial_dirs.trial_state(kept) == 'finished':
      states[trial.name], shown[trial.name] = 'archived', kept
    elif donor:
      states[trial.name], shown[trial.name] = 'shared', donor
      notes[trial.name] = f'(as {os.path.relpath(os.path.abspath(donor), root)})'
  return shown, notes


def describe(
  experiment, selected, workdir, dirs, states, configs, errors, out=None, notes=None
) -> None:
  """The dry-run listing, also a sweep's status while it runs: one line per trial with its
  state, the step it trained to of its cap, and its test result or its best eval so far, read
  from `dirs` (trial name -> its directory, or its archived copy), and `notes` (name -> text)."""
  fixed = ', '.join(f'{k}={trials_lib.format_value(v)}' for k, v in experiment.fixed.items())
  _print(
    f'{experiment.path}: {len(selected)} trials from {experiment.base}'
    + (f' with {fixed}' if fixed else ''),
    out,
  )
  _print(
    f'each runs: {sys.executable} -m attnlab.main --config=CONFIG '
    f'--workdir={os.path.join(workdir, "NAME")} --config.KEY=VALUE ...',
    out,
  )
  _print(f'  {"#":>3}  {"state":<11} {"step/cap":>13}  name  result', out)
  for trial in selected:
    i = experiment.trials.index(trial)
    if trial.name in errors:
      _print(f'  {i:>3}  {"INVALID":<11} {"":>13}  {trial.name}: {errors[trial.name]}', out)
      continue
    config, directory = configs[trial.name], dirs[trial.name]
    step = f'{progress.last_train_step(directory)}/{config.train.num_steps}'
    metric = selection.resolve_metric(config.train.select_metric, config.task.name)
    result = ' '.join(
      filter(None, (trial_dirs.tested_line(directory, metric), (notes or {}).get(trial.name)))
    )
    _print(f'  {i:>3}  {states[trial.name]:<11} {step:>13}  {trial.name}  {result}'.rstrip(), out)
  example = selected[0]
  _print(f'first command: {shlex.join(example.command(os.path.join(workdir, example.name)))}', out)
