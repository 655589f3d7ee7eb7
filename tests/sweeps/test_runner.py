"""The sweep runner (attnlab/sweeps/runner.py): its bookkeeping with a stand-in interpreter
(failures, resumes, a trial still running, a killed sweep's time), trial folders of another
config, SLURM scripts, and a real four-trial sweep of the smoke config."""

import io
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time

import pytest
from support.experiment_files import GRID, write_experiment

from attnlab import sweep
from attnlab.rundir import layout
from attnlab.sweeps import runner as sweep_runner
from attnlab.sweeps import trial_dirs, trials
from attnlab.sweeps.progress import last_train_step
from attnlab.sweeps.trials import SweepError, Trial

SMOKE = 'configs/reverse.py:smoke'


def _trials(*seeds):
  return [Trial(f'seed={s}', SMOKE, {'seed': s}, {}) for s in seeds]


def test_runner_records_failures_and_goes_on(tmp_path, fake_python):
  workdir, out = str(tmp_path / 'sweep'), io.StringIO()
  runs = _trials(0, 13, 1)
  runner = sweep_runner.LocalRunner(
    workdir, {t.name: 4 for t in runs}, parallel=2, poll=0.02, python=fake_python, out=out
  )
  assert runner.run(runs) == {'seed=0': 'finished', 'seed=1': 'finished', 'seed=13': 'failed'}
  failed = sweep_runner.read_status(os.path.join(workdir, 'seed=13'))
  assert failed['status'] == 'failed' and failed['returncode'] == 1
  assert failed['error'] == 'ValueError: seed 13 is unlucky'
  assert failed['error_tail'][-2:] == ['Traceback (most recent call last):', failed['error']]
  done = sweep_runner.read_status(os.path.join(workdir, 'seed=0'))
  assert done['status'] == 'finished' and done['attempts'] == 1 and done['wall_s'] > 0
  assert done['overrides'] == {'seed': 0} and done['config'] == SMOKE
  progress = [line for line in out.getvalue().splitlines() if line.startswith('sweep ')]
  assert progress[-1].startswith('sweep 2/3 done, 1 failed, 0 running | steps 8/12 (66.7%)')
  assert '[FAILED] seed=13 (exit 1): ValueError: seed 13 is unlucky' in out.getvalue()
  # The done line names the selection metric and the tested step.
  assert ' | test sequence_accuracy 0.5000\n' in out.getvalue()
  assert ' | test wer 0.2500 (step 3 of 4, stopped early)\n' in out.getvalue()


def test_interrupted_trials_resume(tmp_path, fake_python, monkeypatch):
  workdir, out = str(tmp_path / 'sweep'), io.StringIO()
  [trial] = _trials(5)
  directory = sweep_runner.trial_dir(workdir, trial)
  monkeypatch.setenv('FAKE_HANG', '1')

  def ctrl_c_once_logged(seconds):  # the user presses Ctrl-C after step 2 was logged
    if last_train_step(directory) >= 2:
      raise KeyboardInterrupt
    time.sleep(seconds)

  runner = sweep_runner.LocalRunner(
    workdir, {trial.name: 4}, poll=0.02, python=fake_python, out=out, sleep=ctrl_c_once_logged
  )
  with pytest.raises(KeyboardInterrupt):
    runner.run([trial])
  status = sweep_runner.read_status(directory)
  assert status['status'] == 'interrupted' and status['returncode'] != 0
  assert trial_dirs.trial_state(directory) == 'interrupted'
  monkeypatch.delenv('FAKE_HANG')
  runner = sweep_runner.LocalRunner(
    workdir, {trial.name: 4}, poll=0.02, python=fake_python, out=out
  )
  assert runner.run([trial]) == {'seed=5': 'finished'}
  status = sweep_runner.read_status(directory)
  assert status['attempts'] == 2 and status['wall_s'] >= 0
  assert '[start] seed=5 (resuming from checkpoint step 2)' in out.getvalue()
  assert re.search(r'\[done\] seed=5 in \S+ \(\S+ over 2 attempts\) \| test', out.getvalue())
  with open(os.path.join(directory, sweep_runner.LOG_FILE)) as f:
    assert f.read().count('=== attempt') == 2


def test_a_trial_still_running_is_not_started_twice(tmp_path, fake_python):
  [trial] = _trials(0)
  workdir, out = str(tmp_path / 'sweep'), io.StringIO()
  directory = sweep_runner.trial_dir(workdir, trial)
  alive = {'status': 'running', 'pid': os.getpid(), 'host': socket.gethostname()}
  sweep_runner.write_status(directory, alive)  # as a killed sweep leaves a live trial
  runner = sweep_runner.LocalRunner(workdir, {trial.name: 4}, python=fake_python, out=out)
  assert runner.run([trial]) == {'seed=0': 'running'}
  assert f'still running as process {os.getpid()}' in out.getvalue()
  sweep_runner.write_status(directory, {**alive, 'pid': 2**22 + 7})  # no such process
  assert runner.run([trial]) == {'seed=0': 'finished'}


def test_the_time_of_a_trial_killed_with_its_sweep_is_kept(tmp_path, fake_python):
  """A session that ends kills the sweep and its trials without a signal they can answer:
  the status still says running and the trial's run-time line was never appended. The next
  sweep counts the time the trial's in-progress record holds."""
  [trial] = _trials(0)
  workdir, out = str(tmp_path / 'sweep'), io.StringIO()
  directory = sweep_runner.trial_dir(workdir, trial)
  os.makedirs(os.path.join(directory, 'checkpoints', '1000'))
  sweep_runner.write_status(directory, {'status': 'running', 'pid': 2**22 + 7, 'attempts': 1,
                                        'host': socket.gethostname(), 'wall_s': 100.0})
  killed = {'first_step': 0, 'last_step': 1200, 'wall_s': 600.0, 'outcome': 'killed',
            'finished_at': '2026-12-01T23:00:00+00:00'}
  with open(os.path.join(directory, layout.RUN_IN_PROGRESS), 'w') as f:
    json.dump(killed, f)
  runner = sweep_runner.LocalRunner(workdir, {trial.name: 4}, python=fake_python, out=out)
  assert runner.run([trial]) == {'seed=0': 'finished'}
  assert ('[start] seed=0 (resuming from checkpoint step 1000; the last attempt was killed at '
          'step 1200 after 10m00s)') in out.getvalue()
  status = sweep_runner.read_status(directory)
  assert status['attempts'] == 2 and 700.0 < status['wall_s'] < 800.0
  with open(os.path.join(directory, layout.RUN_TIMES)) as f:
    assert [json.loads(line) for line in f] == [killed]
  assert not os.path.exists(os.path.join(directory, layout.RUN_IN_PROGRESS))


def test_a_directory_of_another_config_is_not_reused(tmp_path):
  [trial] = _trials(0)
  directory = str(tmp_path / trial.name)
  sweep_runner.write_status(directory, {'config': SMOKE, 'overrides': {'seed': 0}})
  trial_dirs.check_same_trial(directory, trial)  # the same trial: fine
  changed = Trial(trial.name, SMOKE, {'seed': 0}, {'train.num_steps': 9})
  with pytest.raises(SweepError, match=r'\(train.num_steps \(unset\) -> 9\); use a new --workdir'):
    trial_dirs.check_same_trial(directory, changed)
  sweep_runner.write_status(directory, {'config': 'configs/a.py', 'overrides': {'seed': 1}})
  with pytest.raises(SweepError, match=r'\(config configs/a.py -> .*, seed 1 -> 0\)'):
    trial_dirs.check_same_trial(directory, trial)


def test_pinning_the_value_a_trial_ran_with_is_not_a_change(tmp_path):
  """An experiment pins a base-config value (before the base's default moves on): trials
  that already ran with that value resume; one that ran with another value is refused."""
  [trial] = _trials(0)
  directory = str(tmp_path / trial.name)
  sweep_runner.write_status(directory, {'config': SMOKE, 'overrides': {'seed': 0}})
  pinned = Trial(trial.name, SMOKE, {'seed': 0}, {'model.dropout': 0.3})
  with open(os.path.join(directory, layout.CONFIG_FILE), 'w') as f:
    json.dump({'seed': 0, 'model': {'dropout': 0.3}}, f)
  trial_dirs.check_same_trial(directory, pinned)
  with open(os.path.join(directory, layout.CONFIG_FILE), 'w') as f:
    json.dump({'seed': 0, 'model': {'dropout': 0.2}}, f)
  with pytest.raises(SweepError, match=r'\(model.dropout \(unset\) -> 0.3\)'):
    trial_dirs.check_same_trial(directory, pinned)
  # An override dropped is a change whatever the run had: the base's value is not known here.
  sweep_runner.write_status(directory, {'config': SMOKE, 'overrides': {'seed': 0,
                                                                       'model.dropout': 0.2}})
  with pytest.raises(SweepError, match=r'\(model.dropout 0.2 -> \(unset\)\)'):
    trial_dirs.check_same_trial(directory, trial)


def test_error_summary_finds_the_exception_line():
  tail = [
    'I1129 12:00:00 train.py:1] Error handling later',
    'Traceback (most recent call last):',
    '  File "x.py", line 1',
    'attnlab.config.fields.ConfigError: model.kind=1 is not valid',
    'I1129 12:00:01 checkpoint.py:2] closing',
  ]
  expected = 'attnlab.config.fields.ConfigError: model.kind=1 is not valid'
  assert sweep_runner.error_summary(tail) == expected
  assert sweep_runner.error_summary(['', 'just the last line']) == 'just the last line'


def test_slurm_backend_submits_each_unfinished_trial(tmp_path):
  path = write_experiment(
    tmp_path, GRID.replace("  add(**{'model.attention.score': 'gneral', 'seed': 0})\n", '')
  )
  workdir = str(tmp_path / 'sweep')
  trials.write_manifest(workdir, trials.load_experiment(path), 'local')  # the sweep's own folder
  finished = os.path.join(workdir, 'score=dot,seed=0')
  os.makedirs(finished)
  open(os.path.join(finished, sweep_runner.FINAL_FILE), 'w').close()
  out = io.StringIO()
  assert sweep.run_sweep(path, workdir, backend='slurm', parallel=2, out=out) == 0
  commands = os.path.join(workdir, 'slurm_commands.txt')
  lines = open(commands).read().splitlines()
  names = ['score=dot,seed=1', 'score=general,seed=0', 'score=general,seed=1']
  assert [shlex.split(line) for line in lines] == [
    [
      sys.executable,
      '-m',
      'attnlab.sweep',
      os.path.abspath(path),
      f'--workdir={os.path.abspath(workdir)}',
      f'--trial={name}',
      '--noreport',
    ]
    for name in names
  ]
  # Not submitted without --submit: launch/slurm_sweep.sh prints its sbatch command.
  printed = out.getvalue()
  assert 'not submitted (add --submit)' in printed
  assert '--array=0-2%2' in printed and '--job-name=attnlab-exp' in printed
  assert printed.rstrip().endswith(f'launch/slurm_sweep.sbatch {commands}')
  # Array task 1 runs the second line through srun (the task script's dry run shows it).
  task = subprocess.run(
    [
      'bash',
      os.path.join(trials.PROJECT_ROOT, 'launch', 'slurm_sweep.sbatch'),
      '--dry_run',
      commands,
    ],
    env={**os.environ, 'SLURM_ARRAY_TASK_ID': '1'},
    capture_output=True,
    text=True,
    check=True,
  )
  assert 'score=general,seed=0' in task.stdout and task.stdout.startswith('srun ')
  with open(os.path.join(workdir, trials.MANIFEST)) as f:
    assert len(json.load(f)['trials']) == 4


TINY = f"""
BASE = {SMOKE!r}
# One padded shape and one checkpoint: fewer compilations, a faster test.
FIXED = {{'data.bucket_size': 24, 'train.checkpoint_every': 4, 'eval.splits': ('test',)}}
def sweep(add):
  add(**{{'model.attention.score': 'dot', 'seed': 0}})
  add(**{{'model.attention.score': 'concat', 'seed': 0}})
  add(**{{'model.attention.score': 'dot', 'seed': 1}})  # starts later: compiled programs cached
  add(**{{'model.attention.score': 'gneral', 'seed': 0}})  # forced to fail: invalid value
"""


@pytest.mark.slow
def test_a_real_sweep_runs_reports_and_skips_finished_trials(tmp_path, monkeypatch):
  monkeypatch.delenv('XLA_FLAGS', raising=False)  # trials on one CPU device compile faster
  path, workdir = write_experiment(tmp_path, TINY), str(tmp_path / 'sweep')
  archive, out = str(tmp_path / 'kept'), io.StringIO()
  assert sweep.run_sweep(
    path, workdir, parallel=2, progress_every=15, archive=archive, out=out
  ) == 1
  names = ['score=dot,seed=0', 'score=dot,seed=1', 'score=concat,seed=0']
  for name in names:
    assert trial_dirs.trial_state(os.path.join(workdir, name)) == 'finished', out.getvalue()
  failed = sweep_runner.read_status(os.path.join(workdir, 'score=gneral,seed=0'))
  assert failed['status'] == 'failed' and "'gneral' is not valid" in failed['error']
  results = open(os.path.join(workdir, 'results.md')).read()
  assert '4 trials, 3 finished, 1 failed' in results
  assert '| score=gneral | 0/1 (1 failed) | – | – | failed |' in results
  assert "- `score=gneral,seed=0`: ConfigError: model.attention.score='gneral'" in results
  # The smoke config has no eval split, hence no model selection: convergence is undecided.
  assert '| score=dot † | 2/2 | 0/2 (2 undecided) |' in results
  assert '| score=concat † | 1/1 | 0/1 (1 undecided) |' in results
  for kind in ('metric', 'by_length', 'curves', 'attention'):
    assert os.path.getsize(os.path.join(workdir, 'plots', f'reverse-smoke-{kind}.png')) > 3000
  # The archive holds the finished trials without checkpoints, and the same report from them.
  for name in names:
    assert trial_dirs.trial_state(os.path.join(archive, name)) == 'finished'
    assert not os.path.exists(os.path.join(archive, name, layout.CHECKPOINTS))
  kept_report = open(os.path.join(archive, 'results.md')).read()
  assert '| score=dot † | 2/2 | 0/2 (2 undecided) |' in kept_report
  assert os.path.getsize(os.path.join(archive, 'plots', 'reverse-smoke-attention.png')) > 3000

  again = io.StringIO()
  assert sweep.run_sweep(path, workdir, parallel=2, out=again) == 1
  assert '4 trials, 3 finished (skipped), 0 to run, 1 invalid' in again.getvalue()
  assert '[start]' not in again.getvalue()
  for name in names:
    with open(os.path.join(workdir, name, sweep_runner.LOG_FILE)) as f:
      assert f.read().count('=== attempt') == 1
