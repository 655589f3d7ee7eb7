"""Runs a per-device step over every device: `jax.jit(jax.shard_map)` on a Mesh, or `jax.pmap`.

Both modes run the *same* per-device function with collectives over the axis named
`AXIS`; `config.parallel.mode` picks. shard_map is the default, as JAX recommends; pmap, which
JAX keeps in maintenance, is the alternative: JAX holds a pmapped function's compiled programs
for the process's life, so a process that trains run after run (a notebook, a test suite) grows
by hundreds of memory mappings per run with it. State is replicated, batches are split along their
leading axis over all devices of all processes. Each process feeds its own share of the global
batch (attnlab.data shards by process).
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import sys
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from attnlab.config.run import PARALLEL_MODES

AXIS = 'data'
CPU_DEVICE_COUNT_FLAG = '--xla_force_host_platform_device_count'  # XLA:CPU's devices in a process
MOST_CPU_DEVICES = 8  # a decode batch of 64 rows still gives each device 8

# glibc mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8
# Packages through which JAX finds a GPU or TPU; installed, JAX prefers that backend.
ACCELERATOR_PLUGINS = ('jax_cuda12_plugin', 'jax_cuda13_plugin', 'jax_rocm60_plugin', 'libtpu')


def will_run_on_cpu() -> bool:
  """Whether JAX will compute on the CPU, decided without starting JAX: JAX_PLATFORMS if set,
  else whether a GPU/TPU plugin is installed (a plugin without a device falls back to CPU;
  this answers False there, which only forgoes the CPU allocator tuning)."""
  platforms = os.environ.get('JAX_PLATFORMS', '').strip()
  if platforms:
    return platforms.split(',')[0].strip() == 'cpu'
  return not any(importlib.util.find_spec(name) for name in ACCELERATOR_PLUGINS)


def cpu_device_per_core(env=os.environ) -> int:
  """For decoding on a CPU: XLA:CPU offers one device per core (at most MOST_CPU_DEVICES), so
  that decoding/spread.py searches the rows of a batch on every core at once; one device
  searches a batch's small matmuls on about one core. Call before JAX starts. Leaves XLA_FLAGS
  as it is where it names a device count already or JAX will run on a GPU/TPU. Returns the
  count set (0: none)."""
  flags = env.get('XLA_FLAGS', '')
  if CPU_DEVICE_COUNT_FLAG in flags or not will_run_on_cpu():
    return 0
  count = min(len(os.sched_getaffinity(0)), MOST_CPU_DEVICES)
  if count > 1:
    env['XLA_FLAGS'] = f'{flags} {CPU_DEVICE_COUNT_FLAG}={count}'.strip()
  return count if count > 1 else 0


def tune_host_allocator() -> bool:
  """Keeps XLA:CPU's per-step scratch memory mapped between steps (glibc only; call first).

  Each execution of a compiled CPU step allocates its temporaries as one block (tens of MB for
  an RNN train step). glibc serves blocks over its mmap threshold (at most 32 MB; 64 MB heaps
  for non-main threads) with a fresh mmap and unmaps them on free, so every step page-faults
  its whole scratch space in again, which costs the RNN train step about a third of its time
  on a 2-core VM. One arena, a 1 GB mmap threshold and no trimming let the block be reused.
  The price: freed memory stays with the process. Call before JAX starts its threads (before
  the first `jax.devices()`); returns False where it does not apply: not Linux/glibc, or JAX
  will run on a GPU/TPU (its scratch memory is device memory there).
  """
  if not sys.platform.startswith('linux') or not will_run_on_cpu():
    return False
  try:
    libc = ctypes.CDLL('libc.so.6')
  except OSError:
    return False
  settings = ((_M_ARENA_MAX, 1), (_M_MMAP_THRESHOLD, 1 << 30), (_M_TRIM_THRESHOLD, 2**31 - 1))
  return all(libc.mallopt(param, value) == 1 for param, value in settings)


class DataParallel:
  """Places state and batches on devices and compiles per-device steps for one mode."""

  def __init__(self, mode: str = PARALLEL_MODES[0], devices=None):
    """`devices`: a subset of this process's devices (single-process runs and tests only)."""
    if mode not in PARALLEL_MODES:
      raise ValueError(f'parallel.mode={mode!r} is not valid; choose from '
                       f'{", ".join(PARALLEL_MODES)}')
    self.mode = mode
    if devices is None:
      # Each process's devices side by side, so that process p's share of the global batch is
      # the contiguous rows [p*b, (p+1)*b) (device ids need not be grouped by process on pods).
      self.local_devices = jax.local_devices()
      global_devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    else:
      self.local_devices = global_devices = list(devices)
    self.num_devices = len(global_devices)
    self._pmap_devices = None if devices is None else self.local_devices  # None: all, all hosts
    if mode == 'pmap':
      # pmap takes arrays with a leading axis of local devices, one slice per device.
      local_mesh = Mesh(np.asarray(self.local_devices), (AXIS,))
      self._per_device = NamedSharding(local_mesh, P(AXIS))
    else:
      self.mesh = Mesh(np.asarray(global_devices), (AXIS,))
      self._replicated = NamedSharding(self.mesh, P())
      self._split = NamedSharding(self.mesh, P(AXIS))

  def check_batch_size(self, global_batch_size: int) -> None:
    if global_batch_size % self.num_devices:
      raise ValueError(f'data.global_batch_size={global_batch_size} is not divisible by the '
                       f'{self.num_devices} devices of this run')

  # --- placement ---------------------------------------------------------------------------
  def replicate(self, tree: Any) -> Any:
    """Host pytree (identical on every process) -> replicated device state."""
    if self.mode == 'pmap':
      n = len(self.local_devices)
      return jax.tree.map(lambda x: jax.device_put(
          np.broadcast_to(np.asarray(x)[None], (n, *np.shape(x))), self._per_device), tree)
    return jax.tree.map(
        lambda x: jax.make_array_from_callback(np.shape(x), self._replicated,
                                               lambda idx: np.asarray(x)[idx]), tree)

  def fetch(self, tree: Any) -> Any:
    """Replicated device pytree -> one host (numpy) copy, from this process's first device.

    Only local buffers are read. Indexing an array that spans several processes runs one
    cross-process computation per leaf instead, which hung now and then with two CPU processes
    (tests/runtime/test_multihost.py) and costs a collective per leaf anywhere.
    """
    local = jax.device_get(jax.tree.map(lambda x: x.addressable_data(0), tree))
    if self.mode == 'pmap':  # pmap shards keep the device axis, of size 1
      local = jax.tree.map(lambda x: x[0], local)
    return local

  def shard_batch(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
    """This process's share of the global batch -> arrays split over devices."""
    if self.mode == 'pmap':
      n = len(self.local_devices)
      return jax.tree.map(
          lambda x: jax.device_put(x.reshape(n, -1, *x.shape[1:]), self._per_device), batch)
    return jax.tree.map(
        lambda x: jax.make_array_from_process_local_data(self._split, x), batch)

  # --- compilation ------------------------------------------------------------------------
  def compile_train_step(self, step_fn: Callable) -> Callable:
    """step_fn(state, batch, key, *, axis_name) -> (state, sums); state buffers donated."""
    fn = functools.partial(step_fn, axis_name=AXIS)
    if self.mode == 'pmap':
      return jax.pmap(fn, axis_name=AXIS, in_axes=(0, 0, None), donate_argnums=(0,),
                   devices=self._pmap_devices)
    # check_vma=False: the models' zero initial scan carries are device-invariant while the
    # carries they produce vary per device; outputs are replicated by the psum in the step.
    mapped = jax.shard_map(fn, mesh=self.mesh, in_specs=(P(), P(AXIS), P()),
                           out_specs=(P(), P()), check_vma=False)
    return jax.jit(mapped, donate_argnums=(0,))

  def compile_eval_step(self, step_fn: Callable) -> Callable:
    """step_fn(params, batch, *, axis_name) -> sums."""
    fn = functools.partial(step_fn, axis_name=AXIS)
    if self.mode == 'pmap':
      return jax.pmap(fn, axis_name=AXIS, devices=self._pmap_devices)
    return jax.jit(jax.shard_map(fn, mesh=self.mesh, in_specs=(P(), P(AXIS)), out_specs=P(),
                                 check_vma=False))

  def fetch_sums(self, sums_list: list[Any]) -> dict[str, float]:
    """Adds all-reduced per-step device sums on the host, in one transfer (blocks)."""
    total: dict[str, float] = {}
    for sums in self.fetch(sums_list):
      for k, v in sums.items():
        total[k] = total.get(k, 0.0) + float(v)
    return total
