"""Relaxing an experiment's stopping limits under a sweep that has run (trial_dirs.LIMITS): a
raised step cap (train.num_steps) or a lowered learning-rate floor (optim.plateau_min_scale).
Trials that ended otherwise are kept, the others train on from their checkpoints
(trial_dirs.relax_trial), and an archived trial that ended at an old limit is not restored as
finished."""

import io
import json
import os

import pytest

from attnlab import sweep
from attnlab.rundir import layout
from attnlab.sweeps import archive as archive_lib
from attnlab.sweeps import runner as sweep_runner
from attnlab.sweeps import trial_dirs, trials
from attnlab.sweeps.trials import SweepError, Trial

SMOKE = 'configs/reverse.py:smoke'
FLOOR = 'optim.plateau_min_scale'
PATIENCE = 3


def _trial(cap: int, seed: int = 0, floor: float = 0.25) -> Trial:
  return Trial(f'seed={seed}', SMOKE, {'seed': seed}, {'train.num_steps': cap, FLOOR: floor})


def _ran(directory, cap: int, *, ended: str | None, checkpoints=(), seed: int = 0,
         floor: float = 0.25):
  """A trial directory as a run under `cap` and `floor` left it: finished when `ended` names
  how ('cap': at step `cap`; 'patience': PATIENCE evaluations after the best; 'floor': one
  evaluation after it), else interrupted. Evaluations every step."""
  trial = _trial(cap, seed, floor)
  status = {**trial_dirs.identity(trial), 'status': 'interrupted', 'attempts': 1}
  trained = {'cap': cap, 'patience': cap - 4, 'floor': cap - 4}.get(ended, cap // 2)
  best = {'patience': trained - PATIENCE, 'floor': trained - 1}.get(ended, trained)
  if ended is not None:
    status['status'] = 'finished'
    with open(os.path.join(_mkdir(directory), 'final_metrics.json'), 'w') as f:
      json.dump({'step': best, 'trained_steps': trained,
                 'selection': {'metric': 'sequence_accuracy', 'best_step': best,
                               'patience': PATIENCE, 'stopped_early': ended != 'cap'}}, f)
  with open(os.path.join(_mkdir(directory), 'metrics.jsonl'), 'w') as f:
    for step in range(1, trained + 1):
      f.write(json.dumps({'step': step, 'split': 'train', 'loss': 1.0}) + '\n')
      f.write(json.dumps({'step': step, 'split': 'eval', 'sequence_accuracy': 0.5}) + '\n')
  trial_dirs.write_status(directory, status)
  with open(os.path.join(directory, layout.CONFIG_FILE), 'w') as f:
    json.dump({'seed': seed, 'train': {'num_steps': cap},
               'optim': {'plateau_min_scale': floor}}, f)
  for step in checkpoints:
    os.makedirs(os.path.join(directory, layout.CHECKPOINTS, str(step)))
  return trial


def _mkdir(path):
  os.makedirs(path, exist_ok=True)
  return path


@pytest.mark.parametrize('ended', ['cap', 'patience', 'floor'])
def test_how_a_finished_run_ended_is_read_from_its_files(tmp_path, ended):
  directory = str(tmp_path / 'seed=0')
  _ran(directory, 20, ended=ended)
  assert trial_dirs.ending(directory) == ended


def test_only_relaxed_limits_are_accepted(tmp_path):
  directory = str(tmp_path / 'seed=0')
  _ran(directory, 20, ended='patience')
  assert trial_dirs.check_same_trial(directory, _trial(20)) is None  # the same trial
  assert trial_dirs.check_same_trial(directory, _trial(40)) == {'train.num_steps': 20}
  assert trial_dirs.check_same_trial(directory, _trial(20, floor=0.125)) == {FLOOR: 0.25}
  assert trial_dirs.check_same_trial(directory, _trial(40, floor=0.125)) == {
    'train.num_steps': 20, FLOOR: 0.25}
  with pytest.raises(SweepError, match=r'train.num_steps 20 -> 10\); use a new --workdir'):
    trial_dirs.check_same_trial(directory, _trial(10))  # a lower cap: results would differ
  with pytest.raises(SweepError, match=rf'{FLOOR} 0.25 -> 0.5\)'):
    trial_dirs.check_same_trial(directory, _trial(20, floor=0.5))  # a higher floor: the same
  other = Trial('seed=0', SMOKE, {'seed': 0},
                {'train.num_steps': 40, FLOOR: 0.25, 'model.dropout': 0.5})
  with pytest.raises(SweepError, match='model.dropout'):
    trial_dirs.check_same_trial(directory, other)  # a raise does not excuse another change


@pytest.mark.parametrize('ended, cap, floor, kept', [
  ('patience', 40, 0.25, True),  # never reached the cap
  ('patience', 20, 0.125, True),  # not stopped by the floor
  ('floor', 40, 0.25, True),  # a raised cap changes nothing for a floor stop
  ('cap', 20, 0.125, True),  # nor a lower floor for a run that reached its cap
  ('cap', 40, 0.25, False),
  ('floor', 20, 0.125, False),
  ('floor', 40, 0.125, False),
])
def test_a_finished_trial_trains_on_only_when_it_ended_at_a_relaxed_limit(
    tmp_path, ended, cap, floor, kept):
  directory = str(tmp_path / 'seed=0')
  _ran(directory, 20, ended=ended, checkpoints=(8, 16))
  trial = _trial(cap, floor=floor)
  relaxed = trial_dirs.check_same_trial(directory, trial)
  assert trial_dirs.relax_trial(directory, trial, relaxed) == ('kept' if kept else 'extended')
  assert trial_dirs.check_same_trial(directory, trial) is None  # settled
  assert trial_dirs.read_status(directory)['relaxed_from'] == relaxed
  if kept:
    assert trial_dirs.trial_state(directory) == 'finished'
    return
  assert trial_dirs.trial_state(directory) == 'interrupted'  # the runner starts it again
  first = {'cap': 'final_metrics.cap20.json', 'floor': 'final_metrics.floor0.25.json'}[ended]
  with open(os.path.join(directory, first)) as f:  # the first result is kept beside
    assert json.load(f)['selection']['stopped_early'] == (ended == 'floor')
  # attnlab.main must accept the relaxed keys against the run's config.json.
  keys = [k for k, new in (('train.num_steps', cap != 20), (FLOOR, floor != 0.25)) if new]
  assert trial_dirs.resume_args(directory, trial) == [f'--allow_config_change={",".join(keys)}']
  assert trial_dirs.resume_args(directory, _trial(20)) == []


def test_a_trial_that_ended_at_a_limit_without_checkpoints_is_refused(tmp_path):
  directory = str(tmp_path / 'seed=0')
  _ran(directory, 20, ended='floor')
  with pytest.raises(SweepError, match='ended at the learning-rate floor and has no checkpoint'):
    trial_dirs.relax_trial(directory, _trial(20, floor=0.125), {FLOOR: 0.25})
  assert trial_dirs.trial_state(directory) == 'finished'  # nothing changed


def test_the_runner_resumes_an_interrupted_trial_under_the_relaxed_limits(tmp_path, fake_python):
  workdir = str(tmp_path / 'sweep')
  directory = os.path.join(workdir, 'seed=0')
  _ran(directory, 20, ended=None, checkpoints=(10,))
  trial = _trial(40, floor=0.125)
  assert trial_dirs.relax_trial(directory, trial, {'train.num_steps': 20, FLOOR: 0.25}) == (
    'extended')
  runner = sweep_runner.LocalRunner(
    workdir, {trial.name: 40}, poll=0.02, python=fake_python, out=io.StringIO()
  )
  assert runner.run([trial]) == {'seed=0': 'finished'}
  command = trial_dirs.read_status(directory)['command']
  assert '--config.train.num_steps=40' in command and f'--config.{FLOOR}=0.125' in command
  assert command[-1] == f'--allow_config_change=train.num_steps,{FLOOR}'


def test_an_archived_trial_that_ended_at_a_relaxed_limit_is_not_restored(tmp_path):
  archive, workdir = str(tmp_path / 'kept'), str(tmp_path / 'sweep')
  early = _ran(os.path.join(archive, 'seed=0'), 20, ended='patience', seed=0)
  floored = _ran(os.path.join(archive, 'seed=1'), 20, ended='floor', seed=1)
  capped = _ran(os.path.join(archive, 'seed=2'), 20, ended='cap', seed=2)
  relaxed = [Trial(t.name, t.config, t.overrides, {'train.num_steps': 40, FLOOR: 0.125})
             for t in (early, floored, capped)]
  assert archive_lib.sync(workdir, archive, relaxed) == (['seed=0'], [], ['seed=1', 'seed=2'])
  assert trial_dirs.trial_state(os.path.join(workdir, 'seed=1')) == 'new'  # trained anew


def _two_seed_experiment(tmp_path, cap: int, floor: float = 0.25):
  """An experiment file of two seeds of the smoke config under the given limits."""
  path = tmp_path / 'exp.py'
  path.write_text(
    f"BASE = {SMOKE!r}\nFIXED = {{'train.num_steps': {cap}, {FLOOR!r}: {floor}}}\n"
    "def sweep(add):\n  add(seed=0)\n  add(seed=1)\n"
  )
  return path


def test_the_sweep_command_relaxes_limits_and_says_so(tmp_path, fake_python):
  """End to end through run_sweep (trials through the stand-in interpreter)."""
  path = _two_seed_experiment(tmp_path, cap=40, floor=0.125)
  workdir = str(tmp_path / 'sweep')
  trials.write_manifest(workdir, trials.load_experiment(str(path)), 'local')  # the sweep's own
  _ran(os.path.join(workdir, 'seed=0'), 20, ended='patience', seed=0)
  _ran(os.path.join(workdir, 'seed=1'), 20, ended='floor', checkpoints=(16,), seed=1)
  out = io.StringIO()
  code = sweep.run_sweep(str(path), workdir, report=False, out=out, python=fake_python)
  assert code == 0, out.getvalue()
  text = out.getvalue()
  change = f'train.num_steps 20 -> 40, {FLOOR} 0.25 -> 0.125'
  assert f'[cap/floor] seed=0: {change}; it stopped at step 16 by train.patience: kept' in text
  assert (f'[cap/floor] seed=1: {change}; it stopped at step 16 at the learning-rate floor: '
          'trains on from its latest checkpoint') in text
  assert '1 finished (skipped), 1 to run' in text and '[start] seed=1' in text
  assert '[start] seed=0' not in text


def test_a_refused_trial_leaves_every_other_trial_as_it_was(tmp_path, fake_python):
  """The refusal comes before any directory is changed: nothing is half-relaxed."""
  path = _two_seed_experiment(tmp_path, cap=40)
  workdir = str(tmp_path / 'sweep')
  trials.write_manifest(workdir, trials.load_experiment(str(path)), 'local')  # the sweep's own
  _ran(os.path.join(workdir, 'seed=0'), 20, ended='cap', checkpoints=(20,), seed=0)
  _ran(os.path.join(workdir, 'seed=1'), 20, ended='cap', seed=1)  # no checkpoint
  with pytest.raises(SweepError, match='seed=1 ended at its step cap and has no checkpoint'):
    sweep.run_sweep(str(path), workdir, report=False, out=io.StringIO(), python=fake_python)
  assert trial_dirs.trial_state(os.path.join(workdir, 'seed=0')) == 'finished'
  assert trial_dirs.read_status(os.path.join(workdir, 'seed=0'))['overrides'][
    'train.num_steps'] == 20
