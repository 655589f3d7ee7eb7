"""Which machine a run or a benchmark ran on, as one short stable name.

Speed and compute figures mean little without the machine: run_times.jsonl records it for every
process run of a training, the sweep report names the machines its wall and CPU times come
from, and benchmarks name their result files after it.

Cloud VMs often report a bare CPU model name ("AMD EPYC"), the same for Zen 3 (AVX2) and Zen 4
(AVX-512): the family/model numbers and the widest vector unit tell them apart, e.g.
amd-epyc-f25m17-avx512-2cpu. Where JAX computes on an accelerator the name is the device's,
e.g. nvidia-h200-1gpu.
"""

from __future__ import annotations

import os
import platform
import re


def cpuinfo(path: str = '/proc/cpuinfo') -> dict[str, str]:
  """The first processor's /proc/cpuinfo fields ({} where there is none: not Linux)."""
  fields = {}
  try:
    with open(path) as f:
      for line in f:
        if not line.strip():
          break
        key, _, value = line.partition(':')
        fields[key.strip()] = value.strip()
  except OSError:
    pass
  return fields


def isa_tag(flags: set[str]) -> str:
  """The widest vector/matrix unit XLA and oneDNN can use: amx, avx512, avx2 or base."""
  for tag, flag in (('amx', 'amx_tile'), ('avx512', 'avx512f'), ('avx2', 'avx2')):
    if flag in flags:
      return tag
  return 'base'


def cpu_model_name() -> str:
  """`lscpu`'s model name (/proc/cpuinfo), e.g. 'AMD EPYC'."""
  return cpuinfo().get('model name') or platform.processor() or platform.machine()


def _slug(name: str) -> str:
  slug = re.sub(r'\((r|tm)\)', '', name.lower())
  slug = re.sub(r'[^a-z0-9]+', '-', slug).strip('-')
  return re.sub(r'-(processor|cpu)\b.*', '', slug)[:40] or 'machine'


def machine_name(info: dict[str, str] | None = None, cpu_count: int | None = None) -> str:
  """This CPU kind: model, family/model, ISA and core count (the module docstring)."""
  info = cpuinfo() if info is None else info
  parts = [_slug(info.get('model name') or platform.processor() or platform.machine())]
  if 'cpu family' in info and 'model' in info:
    parts.append(f'f{info["cpu family"]}m{info["model"]}')
  if 'flags' in info:
    parts.append(isa_tag(set(info['flags'].split())))
  parts.append(f'{cpu_count or os.cpu_count()}cpu')
  return '-'.join(parts)


def accelerator_name() -> str | None:
  """e.g. nvidia-h200-1gpu where JAX computes on a GPU/TPU; None on CPU (starts JAX: call it
  after attnlab.runtime.parallel.tune_host_allocator)."""
  import jax

  backend = jax.default_backend()
  if backend == 'cpu':
    return None
  return f'{_slug(jax.devices()[0].device_kind)}-{jax.device_count()}{backend}'


def default_machine_name() -> str:
  """The accelerator where JAX has one, else the CPU kind."""
  return accelerator_name() or machine_name()
