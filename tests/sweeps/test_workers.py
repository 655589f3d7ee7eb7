"""Several sweep processes on one workdir (attnlab/sweeps/claims.py): each trial is started by
exactly one of them, one that finds nothing left to claim ends without counting the others'
trials as failed, and a claim dies with the process that held it."""

import fcntl
import io
import os
import socket
import subprocess
import sys
import textwrap
import time
from concurrent import futures

import pytest
from support.experiment_files import write_experiment

from attnlab import sweep
from attnlab.sweeps import claims, trial_dirs
from attnlab.sweeps import runner as sweep_runner
from attnlab.sweeps import trials as trials_lib

SEEDS = """
BASE = 'configs/reverse.py:smoke'
def sweep(add):
  for seed in {seeds}:
    add(**{{'seed': seed}})
"""


def _attempts(directory) -> int:
  with open(os.path.join(directory, trial_dirs.LOG_FILE)) as f:
    return f.read().count('=== attempt')


# A trial that records its start (FAKE_GATE/started.SEED), then waits until the test writes
# FAKE_GATE/open before it goes on as conftest.py's fake trial: the tests order the events they
# check instead of racing trial durations.
GATED_MAIN = """\
#!{python}
import os, sys, time
gate = os.environ['FAKE_GATE']
seed = dict(a.split('=', 1) for a in sys.argv[3:])['--config.seed']
open(os.path.join(gate, 'started.' + seed), 'w').close()
deadline = time.monotonic() + 300  # only a test that died leaves the gate shut
while not os.path.exists(os.path.join(gate, 'open')):
  if time.monotonic() > deadline:
    sys.exit('the test never opened the gate')
  time.sleep(0.01)
os.execv({fake!r}, [{fake!r}, *sys.argv[1:]])
"""


class Gate:
  def __init__(self, folder, python):
    self.folder, self.python = folder, python

  def started(self) -> set[str]:
    """Seeds of the trials that started (and wait for the gate, until it opens)."""
    return {name.split('.', 1)[1] for name in os.listdir(self.folder)
            if name.startswith('started.')}

  def open(self) -> None:
    open(os.path.join(self.folder, 'open'), 'w').close()


@pytest.fixture
def gate(tmp_path, fake_python, monkeypatch):
  folder = tmp_path / 'gate'
  folder.mkdir()
  monkeypatch.setenv('FAKE_GATE', str(folder))
  path = tmp_path / 'gated_python'
  path.write_text(GATED_MAIN.format(python=sys.executable, fake=fake_python))
  path.chmod(0o755)
  gate = Gate(str(folder), str(path))
  yield gate
  gate.open()  # no trial process outlives a failed test


def wait_until(condition, what: str, timeout: float = 120.0) -> None:
  """Returns once `condition()` holds; fails the test after `timeout` seconds."""
  deadline = time.monotonic() + timeout
  while not condition():
    if time.monotonic() > deadline:
      pytest.fail(f'timed out after {timeout:.0f} s waiting for {what}')
    time.sleep(0.01)


@pytest.mark.slow
def test_two_sweep_processes_share_the_trials_out(tmp_path, gate):
  path = write_experiment(tmp_path, SEEDS.format(seeds=(0, 2, 3, 4, 5, 6)))
  workdir = str(tmp_path / 'runs' / 'exp')
  outs = [io.StringIO(), io.StringIO()]
  with futures.ThreadPoolExecutor(2) as pool:
    workers = [pool.submit(sweep.run_sweep, path, workdir, parallel=1, report=False, out=out,
                           python=gate.python) for out in outs]
    try:
      # One trial at a time each, and none ends before the gate opens: two started trials
      # mean both processes took one.
      wait_until(lambda: len(gate.started()) == 2, 'a trial started by each process')
    finally:
      gate.open()
    codes = [worker.result(timeout=120) for worker in workers]
  assert codes == [0, 0], [out.getvalue() for out in outs]
  started = [{line.split()[1] for line in out.getvalue().splitlines()
              if line.startswith('[start] ')} for out in outs]
  assert started[0] and started[1], [out.getvalue() for out in outs]  # both worked
  assert not started[0] & started[1]  # and never on the same trial
  assert started[0] | started[1] == {f'seed={s}' for s in (0, 2, 3, 4, 5, 6)}
  for name in started[0] | started[1]:
    directory = os.path.join(workdir, name)
    assert trial_dirs.trial_state(directory) == 'finished'
    assert _attempts(directory) == 1


def test_a_trial_another_process_runs_is_left_to_it_not_failed(tmp_path, fake_python):
  path = write_experiment(tmp_path, SEEDS.format(seeds=(0, 2)))
  workdir = str(tmp_path / 'runs' / 'exp')
  [held, free] = trials_lib.load_experiment(path).trials
  held_dir = trial_dirs.trial_dir(workdir, held)
  claim = claims.try_claim(claims.claim_path(workdir, os.path.abspath(held_dir)), held_dir)
  assert isinstance(claim, claims.Claim)  # as the other sweep process holds it
  out = io.StringIO()
  try:
    code = sweep.run_sweep(path, workdir, report=False, out=out, python=fake_python)
  finally:
    claim.release()
  text = out.getvalue()
  assert code == 0, text
  assert f'[skip] seed=0: sweep process {os.getpid()} runs it' in text
  assert '[start] seed=0' not in text and f'[start] {free.name}' in text
  assert '1 trial(s) still running in another process, which finishes them' in text
  # Once the claim is free the trial is this process's to run.
  out = io.StringIO()
  assert sweep.run_sweep(path, workdir, report=False, out=out, python=fake_python) == 0
  assert '[start] seed=0' in out.getvalue()


def test_progress_counts_the_trials_another_process_runs(tmp_path, gate):
  """With two workers on one sweep each progress line counts every trial of it: one that
  another process runs shows as running there, then as done once it finished there."""
  workdir = str(tmp_path / 'sweep')
  held, free = (trials_lib.Trial(f'seed={s}', 'configs/reverse.py:smoke', {'seed': s}, {})
                for s in (0, 2))
  held_dir = trial_dirs.trial_dir(workdir, held)
  os.makedirs(held_dir)
  trial_dirs.write_status(held_dir, {'status': 'running'})
  claim = claims.try_claim(claims.claim_path(workdir, os.path.abspath(held_dir)), held_dir)
  out = io.StringIO()
  runner = sweep_runner.LocalRunner(workdir, {'seed=0': 4, 'seed=2': 4}, poll=0.02,
                                    progress_every=0.2, python=gate.python, out=out)
  try:
    with futures.ThreadPoolExecutor(1) as pool:
      run = pool.submit(runner.run, [held, free])
      try:  # the held trial ends there while the free one runs here
        wait_until(lambda: gate.started() == {'2'} and 'sweep 0/2 done' in out.getvalue(),
                   'the free trial to start and a first progress line')
        with open(os.path.join(held_dir, trial_dirs.FINAL_FILE), 'w') as f:
          f.write('{}')
        trial_dirs.write_status(held_dir, {'status': 'finished'})
        wait_until(lambda: 'sweep 1/2 done' in out.getvalue(),
                   'a progress line counting the trial finished there')
      finally:
        gate.open()
      assert run.result(timeout=120) == {'seed=0': 'running', 'seed=2': 'finished'}
  finally:
    claim.release()
  progress = [line.split(' | ')[0] for line in out.getvalue().splitlines()
              if line.startswith('sweep ')]
  assert progress[0] == 'sweep 0/2 done, 0 failed, 2 running (1 in another process)'
  assert 'sweep 1/2 done, 0 failed, 1 running' in progress  # the other process finished it
  assert progress[-1] == 'sweep 2/2 done, 0 failed, 0 running'


def test_progress_counts_a_queued_trial_another_worker_took(tmp_path, gate):
  """A worker with one trial at a time counts the trial a second worker started before this
  one reached it (status running, its process alive): `2 running (1 in another process)`
  from the first line, then done once it finished there, without this worker claiming it."""
  workdir = str(tmp_path / 'sweep')
  mine, theirs = (trials_lib.Trial(f'seed={s}', 'configs/reverse.py:smoke', {'seed': s}, {})
                  for s in (0, 2))
  their_dir = trial_dirs.trial_dir(workdir, theirs)
  os.makedirs(their_dir)
  their_process = subprocess.Popen(['sleep', '60'])
  trial_dirs.write_status(their_dir, {'status': 'running', 'pid': their_process.pid,
                                      'host': socket.gethostname()})
  claim = claims.try_claim(claims.claim_path(workdir, os.path.abspath(their_dir)), their_dir)
  out = io.StringIO()
  runner = sweep_runner.LocalRunner(workdir, {'seed=0': 4, 'seed=2': 4}, parallel=1, poll=0.02,
                                    progress_every=0.2, python=gate.python, out=out)
  try:
    with futures.ThreadPoolExecutor(1) as pool:
      run = pool.submit(runner.run, [mine, theirs])
      try:  # theirs ends there while mine runs here
        wait_until(lambda: gate.started() == {'0'} and 'sweep 0/2 done' in out.getvalue(),
                   'my trial to start and a first progress line')
        with open(os.path.join(their_dir, trial_dirs.FINAL_FILE), 'w') as f:
          f.write('{}')
        trial_dirs.write_status(their_dir, {'status': 'finished'})
        their_process.kill()
        wait_until(lambda: 'sweep 1/2 done' in out.getvalue(),
                   'a progress line counting the trial finished there')
      finally:
        gate.open()
      states = run.result(timeout=120)
  finally:
    claim.release()
    their_process.kill()
    their_process.wait()
  assert states['seed=0'] == 'finished'
  progress = [line.split(' | ')[0] for line in out.getvalue().splitlines()
              if line.startswith('sweep ')]
  assert progress[0] == 'sweep 0/2 done, 0 failed, 2 running (1 in another process)'
  assert 'sweep 1/2 done, 0 failed, 1 running' in progress  # theirs, while mine still runs
  assert progress[-1] == 'sweep 2/2 done, 0 failed, 0 running'


def test_a_trial_whose_process_died_reads_as_interrupted(tmp_path):
  """A session that ended killed the sweep and its trials: the status file still says
  running, but on this host a dead process is no running trial (--dry_run, progress)."""
  directory = str(tmp_path / 'trial')
  os.makedirs(directory)
  gone = subprocess.Popen(['true'])
  gone.wait()
  here = socket.gethostname()
  trial_dirs.write_status(directory, {'status': 'running', 'pid': gone.pid, 'host': here})
  assert trial_dirs.trial_state(directory) == 'interrupted'
  assert trial_dirs.running_elsewhere(directory) is None
  trial_dirs.write_status(directory, {'status': 'running', 'pid': os.getpid(), 'host': here})
  assert trial_dirs.trial_state(directory) == 'running'
  assert trial_dirs.running_elsewhere(directory) == os.getpid()
  # Another host's process cannot be checked from here: its word stands.
  trial_dirs.write_status(directory, {'status': 'running', 'pid': gone.pid, 'host': here + 'x'})
  assert trial_dirs.trial_state(directory) == 'running'


def test_a_claim_dies_with_its_process(tmp_path):
  path, trial_dir = str(tmp_path / 'claims' / 'x.lock'), str(tmp_path / 'runs' / 'x')
  holder = subprocess.Popen(
    [sys.executable, '-c', textwrap.dedent(f"""
      import sys, time
      from attnlab.sweeps import claims
      claim = claims.try_claim({path!r}, {trial_dir!r})
      print(type(claim).__name__, flush=True)
      time.sleep(60)
    """)],
    stdout=subprocess.PIPE, text=True,
  )
  try:
    assert holder.stdout.readline().strip() == 'Claim'
    seen = claims.try_claim(path, str(tmp_path / 'runs' / 'y'))
    assert seen == {'trial_dir': os.path.abspath(trial_dir), 'pid': holder.pid,
                    'host': seen['host']}
  finally:
    holder.kill()  # SIGKILL: no chance to let go; the kernel drops the lock
    holder.wait()
  mine = claims.try_claim(path, str(tmp_path / 'runs' / 'y'))
  assert isinstance(mine, claims.Claim)
  mine.release()


def test_data_is_prepared_under_a_lock_beside_the_workdir(tmp_path, fake_python, monkeypatch):
  """Two workers (or two experiments on one task) would write the same TFDS files at once on
  first use: each sweep prepares its datasets holding a lock the others wait on, even when it
  runs one trial at a time."""
  path = write_experiment(tmp_path, SEEDS.format(seeds=(0,)))
  workdir = str(tmp_path / 'runs' / 'exp')
  lock = claims.claim_path(str(tmp_path / 'runs' / 'other'), 'data')  # any sweep beside it
  seen = []

  def prepare(configs, todo, out=None):
    with open(lock, 'a') as handle:
      try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        seen.append('free')
      except BlockingIOError:
        seen.append('held')

  monkeypatch.setattr(sweep, 'prepare_data', prepare)
  assert sweep.run_sweep(path, workdir, parallel=1, report=False, out=io.StringIO(),
                         python=fake_python) == 0
  assert seen == ['held']
