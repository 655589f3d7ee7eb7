"""Multi-process runs: the one call site of `jax.distributed.initialize`, and process helpers.

Multi-host runs start one process per host (TPU VM worker) or per GPU (SLURM task), all running
the same `python -m attnlab.main ...`. `--distributed` picks how they find each other:

  auto      (default) initialise only inside a cluster environment, with JAX's own detection
            of coordinator, process count and id: SLURM (`srun`, one task per GPU), Open MPI
            (`mpirun`) and Cloud TPU pod slices. `ATTNLAB_DISTRIBUTED=1` forces it (the launch
            scripts set it), `ATTNLAB_DISTRIBUTED=0` disables it; a plain local run stays a
            single process.
  explicit  `--coordinator=HOST:PORT --num_processes=N --process_id=I` (any other machines,
            and the two-process CPU test). On CPU, cross-process collectives use gloo (JAX's
            default `jax_cpu_collectives_implementation`).
  off       never initialise.

After initialisation every process sees all devices (`jax.devices()`) and drives its own
(`jax.local_devices()`). The rest of attnlab relies on three rules: the data pipeline gives
process p rows [p*b, (p+1)*b) of each global batch; every process makes the same collective
calls in the same order (training, evaluation, checkpoints); only process 0 writes files other
than checkpoints. `gather_rows` and `check_same_on_all_processes` below serve those rules.
"""

from __future__ import annotations

import hashlib
import logging
import os
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils

ENV_FLAG = 'ATTNLAB_DISTRIBUTED'
MODES = ('auto', 'explicit', 'off')


def initialize(
  mode: str = 'auto', *, coordinator: str = '', num_processes: int = 0, process_id: int = -1
) -> bool:
  """Connects this process to the others (see the module docstring); True if it did."""
  if mode not in MODES:
    raise ValueError(f'--distributed={mode!r} is not valid; choose from {", ".join(MODES)}')
  if mode == 'explicit':
    if not coordinator or ':' not in coordinator or num_processes <= 0 or process_id < 0:
      raise ValueError(
        '--distributed=explicit needs --coordinator=HOST:PORT, --num_processes=N (N >= 1) and '
        f'--process_id=I; got coordinator={coordinator!r}, num_processes={num_processes}, '
        f'process_id={process_id}'
      )
    if process_id >= num_processes:
      raise ValueError(
        f'--process_id={process_id} must be smaller than --num_processes={num_processes}'
      )
    jax.distributed.initialize(
      coordinator_address=coordinator, num_processes=num_processes, process_id=process_id
    )
    started = True
  else:
    started = mode == 'auto' and cluster_detected(os.environ)
    if started:
      jax.distributed.initialize()  # JAX reads coordinator, count and id from the cluster
  log_topology()
  return started


def cluster_detected(env) -> bool:
  """Whether `env` (e.g. os.environ) describes one process of a multi-process job."""
  forced = env.get(ENV_FLAG, '')
  if forced in ('0', '1'):
    return forced == '1'
  if forced:
    raise ValueError(f'{ENV_FLAG}={forced!r} is not valid; choose from 0, 1 (or leave unset)')
  # SLURM: only inside an `srun` step (JAX needs SLURM_STEP_NODELIST), not in the batch script.
  if (
    'SLURM_STEP_NODELIST' in env
    and int(env.get('SLURM_STEP_NUM_TASKS', env.get('SLURM_NTASKS', '1'))) > 1
  ):
    return True
  if int(env.get('OMPI_COMM_WORLD_SIZE', '1')) > 1:
    return True
  # A multi-host TPU slice that names its workers (GKE); Cloud TPU VMs set ATTNLAB_DISTRIBUTED=1
  # in launch/tpu_worker.sh, and JAX then reads the workers from the VM's metadata.
  hosts = env.get('TPU_PROCESS_ADDRESSES') or env.get('TPU_WORKER_HOSTNAMES', '')
  return ',' in hosts


def log_topology() -> None:
  logging.info(
    'process %d of %d; %d local devices of %d: %s',
    jax.process_index(),
    jax.process_count(),
    jax.local_device_count(),
    jax.device_count(),
    jax.local_devices(),
  )


def gather_rows(tree: Any) -> Any:
  """Concatenates every process's host arrays along axis 0, in process order.

  Each leaf must have the same shape on every process (pad to a fixed size first). With
  process p holding rows [p*b, (p+1)*b) of a global batch, the result is the global batch, the
  same on every process. A single process gets its arrays back unchanged.
  """
  if jax.process_count() == 1:
    return tree
  return multihost_utils.process_allgather(tree, tiled=True)


def fingerprint(tree: Any) -> str:
  """A short hash of a host pytree's structure, dtypes, shapes and bytes."""
  digest = hashlib.blake2b(str(jax.tree.structure(tree)).encode(), digest_size=8)
  for leaf in jax.tree.leaves(tree):
    array = np.ascontiguousarray(np.asarray(leaf))
    digest.update(f'{array.dtype}{array.shape}'.encode())
    digest.update(array.tobytes())
  return digest.hexdigest()


def check_same_on_all_processes(tree: Any, what: str) -> str:
  """Raises unless every process holds a bit-identical `tree`; returns its fingerprint.

  Replicated state must never diverge between processes (process 0's copy is what gets
  written); this compares 8-byte fingerprints, so it costs one hash and one tiny all-gather.
  """
  mine = fingerprint(tree)
  if jax.process_count() > 1:
    words = np.frombuffer(bytes.fromhex(mine), np.int32)
    every = np.asarray(multihost_utils.process_allgather(words))  # [processes, 2]
    differ = [p for p in range(every.shape[0]) if not np.array_equal(every[p], every[0])]
    if differ:
      raise RuntimeError(
        f'{what} differs between processes: processes {differ} disagree with '
        'process 0 (replicas diverged; check that every process runs the same '
        'config and code)'
      )
  logging.info('%s: fingerprint %s, identical on all %d processes', what, mine, jax.process_count())
  return mine
