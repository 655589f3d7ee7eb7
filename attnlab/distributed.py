"""The one call site of `jax.distributed.initialize` (JAX's multi-controller runtime).

Multi-host runs start one process per host (or per GPU) running the same command. On TPU
pods, SLURM and Open MPI, JAX detects the coordinator, process count and id by itself;
elsewhere pass them explicitly. Single-process runs skip initialisation entirely.
"""

from __future__ import annotations

import logging
import os

import jax

ENV_FLAG = 'ATTNLAB_DISTRIBUTED'


def initialize(mode: str = 'auto', *, coordinator: str = '', num_processes: int = 0,
               process_id: int = -1) -> None:
  """mode: 'off' | 'auto' (JAX's cluster detection) | 'explicit' (coordinator and ids given).

  'auto' only initialises when `ATTNLAB_DISTRIBUTED=1` or a cluster environment (SLURM with
  several tasks, Open MPI, TPU pod) is present, so a plain local run stays single-process.
  """
  if mode not in ('off', 'auto', 'explicit'):
    raise ValueError(f'--distributed={mode!r} is not valid; choose from auto, explicit, off')
  if mode == 'off':
    return
  if mode == 'explicit':
    if not coordinator or num_processes <= 0 or process_id < 0:
      raise ValueError('--distributed=explicit needs --coordinator=HOST:PORT, '
                       '--num_processes=N and --process_id=I')
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=num_processes,
                               process_id=process_id)
  elif _cluster_detected():
    jax.distributed.initialize()
  log_topology()


def _cluster_detected() -> bool:
  env = os.environ
  if env.get(ENV_FLAG) == '1':
    return True
  if int(env.get('SLURM_NTASKS', '1')) > 1 or int(env.get('OMPI_COMM_WORLD_SIZE', '1')) > 1:
    return True
  return 'TPU_WORKER_HOSTNAMES' in env and ',' in env['TPU_WORKER_HOSTNAMES']


def log_topology() -> None:
  logging.info('process %d of %d; %d local devices of %d: %s', jax.process_index(),
               jax.process_count(), jax.local_device_count(), jax.device_count(),
               jax.local_devices())
