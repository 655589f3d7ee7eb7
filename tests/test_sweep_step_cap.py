"""Raising an experiment's step cap (train.num_steps) under a sweep that has run: trials that
stopped early are kept, the others train on from their checkpoints (trial_dirs.raise_step_cap),
and an archived trial that ran to the old cap is not restored as finished."""

import io
import json
import os

import pytest

from attnlab import workdir as workdir_lib
from attnlab.sweeps import archive as archive_lib
from attnlab.sweeps import command as sweep
from attnlab.sweeps import runner as sweep_runner
from attnlab.sweeps import trial_dirs
from attnlab.sweeps.trials import SweepError, Trial

SMOKE = 'configs/reverse.py:smoke'


def _trial(cap: int, seed: int = 0) -> Trial:
  return Trial(f'seed={seed}', SMOKE, {'seed': seed}, {'train.num_steps': cap})


def _ran(directory, cap: int, *, stopped_early: bool | None, checkpoints=(), seed: int = 0):
  """A trial directory as a run under `cap` left it: finished (stopped early or at the cap) when
  `stopped_early` is not None, else interrupted."""
  trial = _trial(cap, seed)
  status = {**trial_dirs.identity(trial), 'status': 'interrupted', 'attempts': 1}
  if stopped_early is not None:
    status['status'] = 'finished'
    trained = cap - 2 if stopped_early else cap
    with open(os.path.join(_mkdir(directory), 'final_metrics.json'), 'w') as f:
      json.dump({'step': trained - 1, 'trained_steps': trained,
                 'selection': {'metric': 'wer', 'stopped_early': stopped_early}}, f)
  trial_dirs.write_status(_mkdir(directory), status)
  with open(os.path.join(directory, workdir_lib.CONFIG_FILE), 'w') as f:
    json.dump({'seed': seed, 'train': {'num_steps': cap}}, f)
  for step in checkpoints:
    os.makedirs(os.path.join(directory, workdir_lib.CHECKPOINTS, str(step)))
  return trial


def _mkdir(path):
  os.makedirs(path, exist_ok=True)
  return path


def test_only_a_raised_step_cap_is_accepted(tmp_path):
  directory = str(tmp_path / 'seed=0')
  _ran(directory, 20, stopped_early=True)
  assert trial_dirs.check_same_trial(directory, _trial(20)) is None  # the same trial
  assert trial_dirs.check_same_trial(directory, _trial(40)) == 20  # raised: the old cap
  with pytest.raises(SweepError, match=r'train.num_steps 20 -> 10\); use a new --workdir'):
    trial_dirs.check_same_trial(directory, _trial(10))  # lowered: results would differ
  other = Trial('seed=0', SMOKE, {'seed': 0}, {'train.num_steps': 40, 'model.dropout': 0.5})
  with pytest.raises(SweepError, match='model.dropout'):
    trial_dirs.check_same_trial(directory, other)  # a raise does not excuse another change


def test_a_trial_that_stopped_early_is_kept_under_a_higher_cap(tmp_path):
  directory = str(tmp_path / 'seed=0')
  _ran(directory, 20, stopped_early=True)
  assert trial_dirs.raise_step_cap(directory, _trial(40), 20) == 'kept'
  assert trial_dirs.trial_state(directory) == 'finished'
  status = trial_dirs.read_status(directory)
  assert status['overrides']['train.num_steps'] == 40 and status['step_cap_raised_from'] == 20
  assert trial_dirs.check_same_trial(directory, _trial(40)) is None  # settled


def test_a_trial_that_ran_to_the_old_cap_trains_on_from_its_checkpoint(tmp_path):
  directory = str(tmp_path / 'seed=0')
  _ran(directory, 20, stopped_early=False, checkpoints=(10, 20))
  assert trial_dirs.raise_step_cap(directory, _trial(40), 20) == 'extended'
  assert trial_dirs.trial_state(directory) == 'interrupted'  # the runner starts it again
  with open(os.path.join(directory, 'final_metrics.cap20.json')) as f:
    assert json.load(f)['trained_steps'] == 20  # the first result is kept beside
  # attnlab.main must accept the raised train.num_steps against the run's config.json.
  assert trial_dirs.resume_args(directory, _trial(40)) == ['--allow_config_change=train.num_steps']
  assert trial_dirs.resume_args(directory, _trial(20)) == []


def test_a_capped_trial_without_checkpoints_is_refused(tmp_path):
  directory = str(tmp_path / 'seed=0')
  _ran(directory, 20, stopped_early=False)
  with pytest.raises(SweepError, match='ran to its old cap of 20 steps and has no checkpoint'):
    trial_dirs.raise_step_cap(directory, _trial(40), 20)
  assert trial_dirs.trial_state(directory) == 'finished'  # nothing changed


def test_the_runner_resumes_an_interrupted_trial_under_the_raised_cap(tmp_path, fake_python):
  workdir = str(tmp_path / 'sweep')
  directory = os.path.join(workdir, 'seed=0')
  _ran(directory, 20, stopped_early=None, checkpoints=(10,))
  trial = _trial(40)
  assert trial_dirs.raise_step_cap(directory, trial, 20) == 'extended'
  runner = sweep_runner.LocalRunner(
    workdir, {trial.name: 40}, poll=0.02, python=fake_python, out=io.StringIO()
  )
  assert runner.run([trial]) == {'seed=0': 'finished'}
  command = trial_dirs.read_status(directory)['command']
  assert '--config.train.num_steps=40' in command
  assert command[-1] == '--allow_config_change=train.num_steps'


def test_an_archived_trial_capped_below_the_new_cap_is_not_restored(tmp_path):
  archive, workdir = str(tmp_path / 'kept'), str(tmp_path / 'sweep')
  early = _ran(os.path.join(archive, 'seed=0'), 20, stopped_early=True, seed=0)
  capped = _ran(os.path.join(archive, 'seed=1'), 20, stopped_early=False, seed=1)
  raised = [Trial(t.name, t.config, t.overrides, {'train.num_steps': 40}) for t in (early, capped)]
  assert archive_lib.sync(workdir, archive, raised) == (['seed=0'], [], ['seed=1'])
  assert trial_dirs.trial_state(os.path.join(workdir, 'seed=1')) == 'new'  # trained anew


def _two_seed_experiment(tmp_path, cap: int):
  """An experiment file of two seeds of the smoke config under train.num_steps=`cap`."""
  path = tmp_path / 'exp.py'
  path.write_text(
    f"BASE = {SMOKE!r}\nFIXED = {{'train.num_steps': {cap}}}\n"
    "def sweep(add):\n  add(seed=0)\n  add(seed=1)\n"
  )
  return path


def test_the_sweep_command_raises_caps_and_says_so(tmp_path, fake_python):
  """End to end through run_sweep (trials through the stand-in interpreter)."""
  path = _two_seed_experiment(tmp_path, cap=40)
  workdir = str(tmp_path / 'sweep')
  _ran(os.path.join(workdir, 'seed=0'), 20, stopped_early=True, seed=0)
  _ran(os.path.join(workdir, 'seed=1'), 20, stopped_early=False, checkpoints=(20,), seed=1)
  out = io.StringIO()
  code = sweep.run_sweep(str(path), workdir, report=False, out=out, python=fake_python)
  assert code == 0, out.getvalue()
  text = out.getvalue()
  assert '[cap] seed=0: train.num_steps 20 -> 40; it stopped early at step 18: kept' in text
  assert '[cap] seed=1: train.num_steps 20 -> 40; it trains on from its latest checkpoint' in text
  assert '1 finished (skipped), 1 to run' in text and '[start] seed=1' in text
  assert '[start] seed=0' not in text


def test_a_refused_trial_leaves_every_other_trial_as_it_was(tmp_path, fake_python):
  """The refusal comes before any directory is changed: nothing is half-raised."""
  path = _two_seed_experiment(tmp_path, cap=40)
  workdir = str(tmp_path / 'sweep')
  _ran(os.path.join(workdir, 'seed=0'), 20, stopped_early=False, checkpoints=(20,), seed=0)
  _ran(os.path.join(workdir, 'seed=1'), 20, stopped_early=False, seed=1)  # no checkpoint
  with pytest.raises(SweepError, match='seed=1 ran to its old cap of 20 steps'):
    sweep.run_sweep(str(path), workdir, report=False, out=io.StringIO(), python=fake_python)
  assert trial_dirs.trial_state(os.path.join(workdir, 'seed=0')) == 'finished'
  assert trial_dirs.read_status(os.path.join(workdir, 'seed=0'))['overrides'][
    'train.num_steps'] == 20
