"""One training process per workdir: a second is refused before it writes anything, naming the
running one; a lock left by a killed process does not block a resume."""

import json
import os
import socket
import subprocess
import sys

import pytest
from support import REPO
from support.smoke_runs import smoke_config

from attnlab.rundir import layout
from attnlab.rundir import lock as run_lock
from attnlab.train import loop as train

SMOKE = ('--config=configs/reverse.py:smoke', '--config.parallel.num_devices=1')


def _snapshot(directory):
  """Every file's bytes and mtime under `directory`."""
  out = {}
  for root, _, files in os.walk(directory):
    for name in files:
      path = os.path.join(root, name)
      with open(path, 'rb') as f:
        out[path] = (f.read(), os.stat(path).st_mtime_ns)
  return out


def _fake_run(directory):
  """Files of a run in progress, as far as a second process could touch them."""
  os.makedirs(os.path.join(directory, 'checkpoints', '2'))
  files = {'config.json': '{"not": "read"}', layout.RUN_IN_PROGRESS: '{"last_step": 2}',
           layout.RUN_TIMES: '', 'checkpoints/2/state': 'x'}
  for name, text in files.items():
    with open(os.path.join(directory, name), 'w') as f:
      f.write(text)


def test_a_second_run_is_refused_while_the_lock_is_held(tmp_path):
  run_dir = str(tmp_path / 'run')
  _fake_run(run_dir)
  with run_lock.RunLock(run_dir):
    before = _snapshot(run_dir)
    with pytest.raises(run_lock.WorkdirInUseError) as refused:
      train.train_and_evaluate(smoke_config(), run_dir)
    assert str(refused.value) == (
      f'--workdir={run_dir} is in use: another training process (pid {os.getpid()} on '
      f'{socket.gethostname()}) holds {run_dir}/.lock; wait for it to finish (or stop it), or '
      'use another --workdir')
    assert _snapshot(run_dir) == before  # the holder's record in .lock included
  with run_lock.RunLock(run_dir):  # released: the next run gets it
    pass


def test_only_process_0_of_a_job_takes_the_lock(tmp_path, monkeypatch):
  """The other processes of a multi-process job run beside process 0 by design."""
  run_dir = str(tmp_path / 'run')
  with run_lock.RunLock(run_dir):
    monkeypatch.setattr(train.jax, 'process_index', lambda: 1)
    with train.lock_workdir(run_dir):
      pass


@pytest.mark.slow
def test_two_runs_started_together_one_trains_the_other_is_refused(tmp_path):
  run_dir = str(tmp_path / 'run')
  env = {**os.environ, 'XLA_FLAGS': '--xla_force_host_platform_device_count=1'}
  procs = [subprocess.Popen([sys.executable, '-m', 'attnlab.main', *SMOKE, f'--workdir={run_dir}'],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True) for _ in range(2)]
  results = []
  try:
    for p in procs:
      _, err = p.communicate(timeout=300)
      results.append((p.pid, p.returncode, err))
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
  codes = sorted(code for _, code, _ in results)
  assert codes == [0, 2], [err[-3000:] for _, _, err in results]
  (winner,) = [pid for pid, code, _ in results if code == 0]
  (stderr,) = [err for _, code, err in results if code == 2]
  assert 'Traceback' not in stderr
  assert stderr.strip().splitlines() == [
    f'error: --workdir={run_dir} is in use: another training process (pid {winner} on '
    f'{socket.gethostname()}) holds {run_dir}/.lock; wait for it to finish (or stop it), or use '
    'another --workdir']
  # A valid run: one finished attempt, its time counted once, every checkpoint of the config.
  times = [json.loads(line) for line in open(os.path.join(run_dir, layout.RUN_TIMES))]
  assert [(t['first_step'], t['last_step'], t['outcome']) for t in times] == [(0, 4, 'finished')]
  assert not os.path.exists(os.path.join(run_dir, layout.RUN_IN_PROGRESS))
  assert json.load(open(os.path.join(run_dir, 'final_metrics.json')))['trained_steps'] == 4
  assert layout.saved_steps(run_dir) == [2, 4]
  from attnlab.decoding import runs

  assert runs.load_run(run_dir).cfg.train.num_steps == 4


HOLD = """
import sys, time
from attnlab.rundir import layout
from attnlab.rundir import lock as run_lock
lock = run_lock.RunLock(sys.argv[1])
print('locked', flush=True)
time.sleep(120)
"""


def test_a_lock_left_by_a_killed_process_does_not_block(tmp_path):
  run_dir = str(tmp_path / 'run')
  holder = subprocess.Popen([sys.executable, '-c', HOLD, run_dir], cwd=REPO,
                            stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline() == 'locked\n'
    with pytest.raises(run_lock.WorkdirInUseError, match=f'pid {holder.pid} on '):
      run_lock.RunLock(run_dir)
  finally:
    holder.kill()  # SIGKILL: no chance to clean up; the file stays with its record
    holder.wait()
  with open(os.path.join(run_dir, layout.LOCK_FILE)) as f:
    assert json.load(f)['pid'] == holder.pid
  with run_lock.RunLock(run_dir):
    with open(os.path.join(run_dir, layout.LOCK_FILE)) as f:
      assert json.load(f)['pid'] == os.getpid()

