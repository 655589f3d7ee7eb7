"""Which devices each of a sweep's `--parallel` trial slots may use, so that trials running side
by side on one node do not share (and, on GPUs, preallocate) the same devices.

Each slot gets the environment of its trial processes:
- GPUs (CUDA_VISIBLE_DEVICES, else `nvidia-smi -L`): the GPUs split into contiguous groups,
  one per slot, as even as can be (8 GPUs, --parallel=2: 0-3 and 4-7; --parallel=3: 0-1, 2-4,
  5-7). With more slots than GPUs, slots share
  GPUs round-robin and each takes its share of their memory (XLA_PYTHON_CLIENT_MEM_FRACTION)
  instead of JAX's default 75%.
- simulated CPU devices (XLA_FLAGS=--xla_force_host_platform_device_count=N): N / parallel
  each.
- otherwise (CPU, or a TPU host, whose chips one process drives): no change; the slots share
  the machine.
The sweep's console names each slot's devices, and each trial's [start] line its slot.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess

from attnlab.runtime.parallel import CPU_DEVICE_COUNT_FLAG

_SIMULATED = re.compile(re.escape(CPU_DEVICE_COUNT_FLAG) + r'=(\d+)')
# JAX preallocates 75% of a GPU's memory; slots sharing a GPU split that.
_GPU_MEMORY = 0.75


@dataclasses.dataclass(frozen=True)
class Slot:
  index: int
  env: dict[str, str]  # set in its trials' environment
  devices: str  # what the console says it has, e.g. 'GPUs 0,1,2,3'


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


def plan(parallel: int, env=os.environ) -> list[Slot]:
  """One Slot per trial that runs at once (module docstring)."""
  gpus = visible_gpus(env)
  if gpus:
    if len(gpus) >= parallel:
      cuts = [len(gpus) * i // parallel for i in range(parallel + 1)]  # as even as can be
      groups = [gpus[cuts[i]:cuts[i + 1]] for i in range(parallel)]
      return [Slot(i, {'CUDA_VISIBLE_DEVICES': ','.join(g)}, f'GPUs {",".join(g)}')
              for i, g in enumerate(groups)]
    sharing = -(-parallel // len(gpus))  # slots per GPU, rounded up
    fraction = f'{_GPU_MEMORY / sharing:.3f}'
    return [Slot(i, {'CUDA_VISIBLE_DEVICES': gpus[i % len(gpus)],
                     'XLA_PYTHON_CLIENT_MEM_FRACTION': fraction},
                 f'GPU {gpus[i % len(gpus)]} ({float(fraction):.0%} of its memory)')
            for i in range(parallel)]
  flags = env.get('XLA_FLAGS', '')
  simulated = _SIMULATED.search(flags)
  if simulated and parallel > 1:
    each = max(1, int(simulated.group(1)) // parallel)
    own = _SIMULATED.sub(f'{CPU_DEVICE_COUNT_FLAG}={each}', flags)
    return [Slot(i, {'XLA_FLAGS': own}, f'{each} simulated CPU devices')
            for i in range(parallel)]
  return [Slot(i, {}, 'the shared machine') for i in range(parallel)]
