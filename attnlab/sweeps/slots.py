"""Which devices each of a sweep's `--parallel` trial slots may use, so that trials running side
by side on one node do not share (and, on GPUs, preallocate) the same devices.

Each slot gets the environment of its trial processes:
- GPUs (CUDA_VISIBLE_DEVICES, else `nvidia-smi -L`): the GPUs split into contiguous groups,
  one per slot, as even as can be (8 GPUs, --parallel=2: 0-3 and 4-7; --parallel=3: 0-1, 2-4,
  5-7). With more slots than GPUs, slots share GPUs round-robin and each takes its share of
  their memory (XLA_PYTHON_CLIENT_MEM_FRACTION) instead of JAX's default 75%.
- no GPU, more than one slot: the CPUs the sweep may run on, split the same way, each slot's
  trials pinned to its group (sched_setaffinity as each starts, before JAX makes its threads).
  XLA:CPU sizes its thread pool from the CPUs a process may use, so a pinned trial computes on
  its own cores instead of two pools taking turns on all of them (`python -m benchmarks.cores
  --settings=side_by_side,pinned_side_by_side` measures it). With
  XLA_FLAGS=--xla_force_host_platform_device_count=N each slot also gets N / parallel of the
  simulated devices.
- one slot: no change (a TPU host's chips are driven by one process).
`--cpu_share=K/N` (N sweeps side by side on one machine, as `make ablations` runs them) first
narrows the CPUs to the K-th of N contiguous shares, and pins every slot within it, GPUs or not.
The sweep's console names each slot's devices, and each trial's [start] line its slot.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess

from attnlab.runtime.parallel import CPU_DEVICE_COUNT_FLAG
from attnlab.sweeps.trials import SweepError

_SIMULATED = re.compile(re.escape(CPU_DEVICE_COUNT_FLAG) + r'=(\d+)')
# JAX preallocates 75% of a GPU's memory; slots sharing a GPU split that.
_GPU_MEMORY = 0.75


@dataclasses.dataclass(frozen=True)
class Slot:
  index: int
  env: dict[str, str]  # set in its trials' environment
  devices: str  # what the console says it has, e.g. 'GPUs 0,1,2,3'
  cpus: tuple[int, ...] | None = None  # the CPUs its trials are pinned to (None: not pinned)

  @property
  def has_own_devices(self) -> bool:
    return bool(self.env) or self.cpus is not None

  def pin(self, pid: int) -> None:
    """Pins a trial process just started to the slot's CPUs (nothing without them)."""
    if self.cpus is not None:
      pin_started(pid, self.cpus)


def pin_started(pid: int, cpus) -> None:
  """Pins process `pid`, just started, to `cpus`: the affinity of its main thread, which every
  thread it starts inherits. Set from here rather than in the child between fork and exec (a
  forked copy of a multithreaded parent such as the sweep can deadlock there); the child's
  first threads come seconds later, with JAX. A process that has already ended is left be."""
  try:
    os.sched_setaffinity(pid, cpus)
  except ProcessLookupError:
    pass


def visible_gpus(env) -> list[str]:
  """The GPU ids this process may use: CUDA_VISIBLE_DEVICES, else those nvidia-smi lists."""
  given = env.get('CUDA_VISIBLE_DEVICES')
  if given is not None:
    return [g.strip() for g in given.split(',') if g.strip() and g.strip() != '-1']
  if not shutil.which('nvidia-smi'):
    return []
  try:
    listed = subprocess.run(['nvidia-smi', '-L'], capture_output=True, text=True, timeout=30,
                            check=True).stdout
  except (OSError, subprocess.SubprocessError):
    return []
  return re.findall(r'^GPU (\d+):', listed, re.M)


def allowed_cpus() -> list[int]:
  """The CPUs this process may run on (empty where the platform does not say)."""
  return sorted(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else []


def _split(items: list, parallel: int) -> list[list]:
  """Contiguous groups, one per slot, as even as can be (needs len(items) >= parallel)."""
  cuts = [len(items) * i // parallel for i in range(parallel + 1)]
  return [items[cuts[i]:cuts[i + 1]] for i in range(parallel)]


def _cpu_names(cpus: list[int]) -> str:
  if len(cpus) > 1 and cpus == list(range(cpus[0], cpus[-1] + 1)):
    return f'CPUs {cpus[0]}-{cpus[-1]}'
  return ('CPU ' if len(cpus) == 1 else 'CPUs ') + ','.join(map(str, cpus))


def parse_share(text: str) -> tuple[int, int]:
  """'K/N' (the K-th of N shares, 1-based) as (K, N); a SweepError names what is wrong."""
  match = re.fullmatch(r'\s*(\d+)\s*/\s*(\d+)\s*', text)
  if not match or not 1 <= int(match.group(1)) <= int(match.group(2)):
    raise SweepError(f'--cpu_share={text!r}: give K/N with 1 <= K <= N, e.g. 1/2 for the first '
                     'half of the CPUs')
  return int(match.group(1)), int(match.group(2))


def share_of(cpus: list[int], share: tuple[int, int]) -> list[int]:
  """The K-th of N contiguous shares of `cpus`; with more shares than CPUs, one CPU in turn."""
  k, n = share
  return _split(cpus, n)[k - 1] if n <= len(cpus) else [cpus[(k - 1) % len(cpus)]]


def plan(parallel: int, env=os.environ, cpus: list[int] | None = None,
         share: tuple[int, int] | None = None) -> list[Slot]:
  """One Slot per trial that runs at once (module docstring). `cpus`: the CPUs the sweep may
  use (default `allowed_cpus()`); `share` (K, N): only the K-th of N shares of them, for N
  sweeps side by side (--cpu_share), every slot pinned within it."""
  cpus = allowed_cpus() if cpus is None else cpus
  pinned = bool(share and cpus)
  if pinned:
    cpus = share_of(cpus, share)
  own_cpus = tuple(cpus) if pinned else None
  on_cpus = f', {_cpu_names(cpus)}' if pinned else ''
  gpus = visible_gpus(env)
  if gpus:
    if len(gpus) >= parallel:
      return [Slot(i, {'CUDA_VISIBLE_DEVICES': ','.join(g)}, f'GPUs {",".join(g)}{on_cpus}',
                   own_cpus)
              for i, g in enumerate(_split(gpus, parallel))]
    sharing = -(-parallel // len(gpus))  # slots per GPU, rounded up
    fraction = f'{_GPU_MEMORY / sharing:.3f}'
    return [Slot(i, {'CUDA_VISIBLE_DEVICES': gpus[i % len(gpus)],
                     'XLA_PYTHON_CLIENT_MEM_FRACTION': fraction},
                 f'GPU {gpus[i % len(gpus)]} ({float(fraction):.0%} of its memory){on_cpus}',
                 own_cpus)
            for i in range(parallel)]
  flags = env.get('XLA_FLAGS', '')
  simulated = _SIMULATED.search(flags)
  each = max(1, int(simulated.group(1)) // parallel) if simulated and parallel > 1 else 0
  own = {'XLA_FLAGS': _SIMULATED.sub(f'{CPU_DEVICE_COUNT_FLAG}={each}', flags)} if each else {}
  simulated_names = f'{each} simulated CPU devices' if each else ''
  if not cpus or (parallel == 1 and not pinned):
    return [Slot(i, own, simulated_names or 'the shared machine') for i in range(parallel)]
  if len(cpus) >= parallel:
    groups = _split(cpus, parallel)
  else:  # more slots than CPUs: they take turns on them
    groups = [[cpus[i % len(cpus)]] for i in range(parallel)]
  return [Slot(i, own, ', '.join(filter(None, [_cpu_names(group), simulated_names])),
               tuple(group))
          for i, group in enumerate(groups)]
