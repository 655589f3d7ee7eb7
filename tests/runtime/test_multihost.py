"""Multi-process training: 2 processes x 4 CPU devices train like 1 process x 8 devices.

Every run is `python -m attnlab.main` in subprocesses, as on a cluster, connected with
`--distributed=explicit` on localhost (CPU collectives through gloo). The reference is one
process with 8 devices and the same global batch. Subprocess timeouts turn a hang (e.g. a
collective that one process never reaches) into a failure.
"""

import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
from support import REPO

from attnlab.runtime import distributed

TIMEOUT_S = 240  # per launch; a healthy one takes 20-90 s on two busy CPU cores
FLAGS = (
  '--config=configs/reverse.py:smoke',
  '--config.model.dropout=0',  # dropout masks depend on the device split by design
  # Adam with eps=1 acts like momentum SGD: its update of an (almost) zero gradient is (almost)
  # zero, so float noise between reduction orders stays noise (see tests/runtime/test_parallel.py).
  '--config.optim.eps=1.0',
  '--config.optim.learning_rate=0.5',
  '--config.optim.warmup_steps=0',
  # 20 eval examples in global batches of 16: in the second batch process 1 has no example.
  '--config.task.num_eval_examples=20',
  "--config.eval.splits=('test',)",  # the last step evaluates only the test split
  '--config.eval.num_heatmaps=1',
  '--verbosity=0',  # INFO logs (fingerprints, 'resumed from') on the console, not only train.log
)
FINGERPRINT = re.compile(r'params at step (\d+) \((\w+)\): fingerprint (\w+), identical on all 2')


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def _env(devices: int, cache: pathlib.Path) -> dict:
  env = {
    k: v
    for k, v in os.environ.items()
    if not k.startswith(('SLURM_', 'OMPI_', 'TPU_', distributed.ENV_FLAG))
  }
  env.update(
    XLA_FLAGS=f'--xla_force_host_platform_device_count={devices}',
    JAX_PLATFORMS='cpu',
    JAX_CPU_COLLECTIVES_IMPLEMENTATION='gloo',
    PYTHONPATH=str(REPO),
    # Launches compile the same decode/init programs: share them through the cache.
    JAX_COMPILATION_CACHE_DIR=str(cache),
    JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS='0',
  )
  return env


def launch(workdir: pathlib.Path, *, processes: int, devices: int, mode: str) -> list[str]:
  """Runs `processes` x `devices` to the end; returns each process's log."""
  base = [
    sys.executable,
    '-m',
    'attnlab.main',
    f'--workdir={workdir}',
    *FLAGS,
    f'--config.parallel.mode={mode}',
  ]
  if processes == 1:
    commands = [base + ['--distributed=off']]
  else:
    coordinator = f'127.0.0.1:{_free_port()}'
    commands = [
      base
      + [
        '--distributed=explicit',
        f'--coordinator={coordinator}',
        f'--num_processes={processes}',
        f'--process_id={p}',
      ]
      for p in range(processes)
    ]
  env = _env(devices, workdir.parent / 'jax_cache')
  logs = [workdir.parent / f'{workdir.name}.{mode}.{p}.log' for p in range(processes)]
  procs = []
  for command, log in zip(commands, logs, strict=True):
    with open(log, 'w') as f:
      procs.append(subprocess.Popen(command, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT))
  deadline = time.monotonic() + TIMEOUT_S
  try:
    codes = [p.wait(timeout=max(deadline - time.monotonic(), 1)) for p in procs]
  except subprocess.TimeoutExpired:
    codes = None
  finally:
    for p in procs:  # only our own children, by handle
      if p.poll() is None:
        p.kill()
        p.wait()
  texts = [log.read_text() for log in logs]
  if codes != [0] * processes:
    tails = '\n'.join(f'--- process {p} ---\n{t[-3000:]}' for p, t in enumerate(texts))
    pytest.fail(
      f'{mode} x{processes} exit codes {codes} (None: timed out after {TIMEOUT_S}s)\n{tails}'
    )
  return texts


def read_state(workdir: pathlib.Path, step: int) -> dict:
  return ocp.StandardCheckpointer().restore(workdir / 'checkpoints' / str(step) / 'state')


def assert_states_close(got: dict, want: dict, what: str) -> None:
  paths_want = jax.tree_util.tree_leaves_with_path(want)
  leaves_got = jax.tree.leaves(got)
  assert len(leaves_got) == len(paths_want), what
  for (path, w), g in zip(paths_want, leaves_got, strict=True):
    np.testing.assert_allclose(
      np.asarray(g),
      np.asarray(w),
      rtol=2e-5,
      atol=2e-6,
      err_msg=f'{what} {jax.tree_util.keystr(path)}',
    )


def fingerprints(log: str) -> dict:
  return {(int(step), split): fp for step, split, fp in FINGERPRINT.findall(log)}


@pytest.mark.slow
def test_two_processes_train_like_one_and_resume(tmp_path):
  ref_dir, run_dir = tmp_path / 'one_process', tmp_path / 'two_processes'
  launch(ref_dir, processes=1, devices=8, mode='pmap')
  ref_metrics = json.loads((ref_dir / 'final_metrics.json').read_text())
  ref_2, ref_4 = read_state(ref_dir, 2), read_state(ref_dir, 4)
  # The test is only meaningful if training moves the parameters well beyond the tolerance.
  moved = max(
    float(np.abs(a - b).max())
    for a, b in zip(jax.tree.leaves(ref_2['params']), jax.tree.leaves(ref_4['params']), strict=True)
  )
  assert moved > 1e-2

  logs = launch(run_dir, processes=2, devices=4, mode='pmap')
  assert_states_close(read_state(run_dir, 2), ref_2, 'two processes, step 2')
  assert_states_close(read_state(run_dir, 4), ref_4, 'two processes, step 4')
  # Both processes checked, before decoding, that they hold bit-identical final parameters.
  assert fingerprints(logs[0]).keys() == {(4, 'test')}
  assert fingerprints(logs[0]) == fingerprints(logs[1])
  # Process 0 reports over the whole split, gathered from both processes' decoded shares.
  metrics = json.loads((run_dir / 'final_metrics.json').read_text())
  got, want = metrics['test'], ref_metrics['test']
  assert got['num_examples'] == want['num_examples'] == 20
  assert got['by_length'] == want['by_length']
  for key in ('loss', 'token_accuracy', 'sequence_accuracy', 'attention_entropy'):
    np.testing.assert_allclose(got[key], want[key], rtol=1e-4, err_msg=key)
  assert [p.name for p in (run_dir / 'samples').iterdir()] == ['test_step0000004.txt']
  assert sorted(p.name for p in (run_dir / 'attention').iterdir()) == [
    'test_step0000004.npz',
    'test_step0000004_ex0.png',
  ]

  # Interrupted after step 3: the rerun resumes from step 2 on both processes, here in the other
  # parallel mode (checkpoints hold host arrays, independent of the mode), and ends equal.
  shutil.rmtree(run_dir / 'checkpoints' / '4')
  logs = launch(run_dir, processes=2, devices=4, mode='shard_map')
  for log in logs:
    assert 'resumed from step 2' in log
  assert_states_close(read_state(run_dir, 4), ref_4, 'resumed two processes, step 4')
  assert fingerprints(logs[0]) == fingerprints(logs[1]) != {}


def test_explicit_mode_checks_its_arguments():
  with pytest.raises(ValueError, match='choose from auto, explicit, off'):
    distributed.initialize('manual')
  with pytest.raises(ValueError, match='--coordinator=HOST:PORT'):
    distributed.initialize('explicit', coordinator='localhost', num_processes=2, process_id=0)
  with pytest.raises(ValueError, match='must be smaller than --num_processes=2'):
    distributed.initialize('explicit', coordinator='h:1', num_processes=2, process_id=2)
  assert distributed.initialize('off') is False


@pytest.mark.parametrize(
  'env, expected',
  [
    ({}, False),
    ({'ATTNLAB_DISTRIBUTED': '1'}, True),
    ({'ATTNLAB_DISTRIBUTED': '0', 'OMPI_COMM_WORLD_SIZE': '4'}, False),
    ({'OMPI_COMM_WORLD_SIZE': '4'}, True),
    ({'OMPI_COMM_WORLD_SIZE': '1'}, False),
    # An srun step with several tasks; the batch script itself (no step) does not count.
    (
      {'SLURM_STEP_NODELIST': 'gpu[01-02]', 'SLURM_STEP_NUM_TASKS': '16', 'SLURM_NTASKS': '16'},
      True,
    ),
    ({'SLURM_STEP_NODELIST': 'gpu01', 'SLURM_STEP_NUM_TASKS': '1', 'SLURM_NTASKS': '1'}, False),
    ({'SLURM_NTASKS': '16'}, False),
    ({'TPU_WORKER_HOSTNAMES': 'w0,w1,w2,w3'}, True),
    ({'TPU_WORKER_HOSTNAMES': 'localhost'}, False),
  ],
)
def test_cluster_detection(env, expected):
  assert distributed.cluster_detected(env) is expected


def test_cluster_detection_rejects_unknown_flag_values():
  with pytest.raises(ValueError, match='choose from 0, 1'):
    distributed.cluster_detected({'ATTNLAB_DISTRIBUTED': 'yes'})


def test_single_process_helpers():
  rows = {'a': np.arange(6).reshape(3, 2)}
  assert distributed.gather_rows(rows) is rows
  tree = {'w': np.ones((2, 3), np.float32), 'b': np.zeros(3, np.float32)}
  fp = distributed.check_same_on_all_processes(tree, 'test tree')
  assert fp == distributed.fingerprint(jax.tree.map(np.copy, tree)) and len(fp) == 16
  changed = {'w': tree['w'].copy(), 'b': tree['b'].copy()}
  changed['w'][1, 2] = np.nextafter(np.float32(1), np.float32(2))
  assert distributed.fingerprint(changed) != fp
  assert distributed.fingerprint({'w': tree['w'].astype(np.float64), 'b': tree['b']}) != fp
