"""Which trials a sweep command lists or runs: --dry_run, --trial (one trial, as a SLURM task
runs it) and --select (the trials whose name matches, for running an experiment in parts)."""

import io
import json
import os

import pytest
from support.experiment_files import GRID, write_experiment

from attnlab import sweep
from attnlab.sweeps import trial_dirs
from attnlab.sweeps.trials import SweepError


def test_dry_run_lists_the_grid_and_writes_nothing(tmp_path):
  workdir = str(tmp_path / 'sweep')
  out = io.StringIO()
  code = sweep.run_sweep(write_experiment(tmp_path, GRID), workdir, dry_run=True, out=out)
  lines = out.getvalue().splitlines()
  assert code == 1  # one trial is invalid
  rows = [line.split() for line in lines if line.strip()[:1].isdigit()]
  assert rows[:4] == [  # no step trained of the cap of 4, no result yet
    ['0', 'new', '0/4', 'score=dot,seed=0'],
    ['1', 'new', '0/4', 'score=dot,seed=1'],
    ['2', 'new', '0/4', 'score=general,seed=0'],
    ['3', 'new', '0/4', 'score=general,seed=1'],
  ]
  assert rows[4][:3] == ['4', 'INVALID', 'score=gneral,seed=0:'] and 'choose from' in lines[-2]
  assert '--config.model.attention.score=dot --config.seed=0' in lines[-1]
  assert not os.path.exists(workdir)


def test_dry_run_shows_how_far_each_trial_got(tmp_path, fake_python):
  """While a sweep runs (or after it stopped) the listing is its status: the step each trial
  trained to, the test result of a finished one, the best eval so far of one still going."""
  path = write_experiment(tmp_path, GRID.replace("'gneral'", "'concat'"))
  workdir = str(tmp_path / 'sweep')
  assert sweep.run_sweep(path, workdir, select='seed=0', report=False, out=io.StringIO(),
                         python=fake_python) == 0
  going = os.path.join(workdir, 'score=dot,seed=1')  # evaluated twice, then interrupted
  os.makedirs(going)
  trial_dirs.write_status(going, {'status': 'interrupted'})
  with open(os.path.join(going, 'metrics.jsonl'), 'w') as f:
    for step, accuracy in ((1, 0.25), (2, 0.75), (3, 0.5)):
      f.write(json.dumps({'step': step, 'split': 'eval', 'sequence_accuracy': accuracy}) + '\n')
    f.write(json.dumps({'step': 3, 'split': 'train', 'sequence_accuracy': 0.9}) + '\n')
    f.write('{"step": 4, "split": "ev')  # a line being written now
  out = io.StringIO()
  assert sweep.run_sweep(path, workdir, dry_run=True, out=out) == 0
  rows = {line.split()[3]: line.split(None, 4)[1:] for line in out.getvalue().splitlines()
          if line.strip()[:1].isdigit()}
  assert rows['score=dot,seed=0'] == ['finished', '2/4', 'score=dot,seed=0',
                                      'test sequence_accuracy 0.5000']
  assert rows['score=dot,seed=1'] == ['interrupted', '3/4', 'score=dot,seed=1',
                                      'best eval sequence_accuracy 0.7500 at step 2']
  assert rows['score=general,seed=1'] == ['new', '0/4', 'score=general,seed=1']


def test_one_trial_and_unknown_trials(tmp_path):
  path = write_experiment(tmp_path, GRID)
  out = io.StringIO()
  assert (
    sweep.run_sweep(path, str(tmp_path / 's'), dry_run=True, only='score=dot,seed=1', out=out) == 0
  )
  assert 'score=dot,seed=1' in out.getvalue() and 'general' not in out.getvalue()
  with pytest.raises(SweepError, match="no trial 'score=dot,seed=9'"):
    sweep.run_sweep(path, str(tmp_path / 's'), only='score=dot,seed=9', dry_run=True)


@pytest.mark.slow
def test_select_runs_the_matching_trials_of_a_whole_experiment(tmp_path, fake_python):
  path = write_experiment(tmp_path, GRID.replace("'gneral'", "'concat'"))
  workdir = str(tmp_path / 'sweep')
  listing = io.StringIO()
  assert sweep.run_sweep(path, workdir, dry_run=True, select='^score=general', out=listing) == 0
  rows = [line.split() for line in listing.getvalue().splitlines() if line.strip()[:1].isdigit()]
  assert [r[3] for r in rows] == ['score=general,seed=0', 'score=general,seed=1']
  out = io.StringIO()
  code = sweep.run_sweep(
    path, workdir, select='general|concat', report=False, out=out, python=fake_python
  )
  assert code == 0, out.getvalue()
  assert '5 trials, 0 finished (skipped), 3 to run (3 selected by --select=general|concat)' in (
    out.getvalue()
  )
  ran = {n for n in os.listdir(workdir) if trial_dirs.trial_state(os.path.join(workdir, n))
         == 'finished'}
  assert ran == {'score=general,seed=0', 'score=general,seed=1', 'score=concat,seed=0'}
  with open(os.path.join(workdir, 'sweep.json')) as f:  # the manifest holds every trial
    assert len(json.load(f)['trials']) == 5
  again = io.StringIO()  # the rest of the experiment runs later, from the same command
  assert sweep.run_sweep(path, workdir, report=False, out=again, python=fake_python) == 0
  assert '5 trials, 3 finished (skipped), 2 to run, 0 invalid' in again.getvalue()


@pytest.mark.parametrize('pattern, message', [
  ('seed=(', r"--select='seed=\(' is not a regular expression: missing \)"),
  ('score=bad', "--select='score=bad' matches none of the 5 trials of .*exp.py; --dry_run"),
])
def test_a_bad_selection_is_one_error(tmp_path, pattern, message):
  path = write_experiment(tmp_path, GRID)
  with pytest.raises(SweepError, match=message):
    sweep.run_sweep(path, str(tmp_path / 's'), select=pattern, dry_run=True)
  assert not os.path.exists(tmp_path / 's')


def test_a_selection_still_lists_the_experiments_invalid_trials(tmp_path):
  out = io.StringIO()
  code = sweep.run_sweep(
    write_experiment(tmp_path, GRID), str(tmp_path / 's'), dry_run=True, select='seed=1', out=out
  )
  assert code == 1
  rows = [line.split() for line in out.getvalue().splitlines() if line.strip()[:1].isdigit()]
  assert [r[:2] for r in rows] == [['1', 'new'], ['3', 'new'], ['4', 'INVALID']]
