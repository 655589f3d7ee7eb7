"""What benchmarks/xla_options.py compares: XLA:CPU compile settings and dot lowerings, and the
HLO facts that say whether a setting took effect.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np

from attnlab.runtime import machine
from benchmarks import workloads

BF16_ISA = ('amx_bf16', 'avx512_bf16')  # YNNPACK's fast bf16 dot kernels need one of these
ENV_KNOBS = (
  'XLA_FLAGS',
  'ONEDNN_DEFAULT_FPMATH_MODE',
  'DNNL_DEFAULT_FPMATH_MODE',
  'ONEDNN_MAX_CPU_ISA',
  'TENSORFLOW_USE_CUSTOM_CONTRACTION_KERNEL',
  'ONEDNN_VERBOSE',
)


class NotApplicable(Exception):
  pass


@dataclasses.dataclass(frozen=True)
class Setting:
  """One column of the A/B: XLA compile options and/or a rewritten dot lowering."""

  name: str
  why: str
  options: tuple[tuple[str, object], ...] = ()  # xla DebugOptions fields (compile options)
  lowering: str = ''  # '' | 'f32_in_bf16' (see dot_lowering)
  dtype: str = ''  # the workload's model.dtype it is meant for ('' = any)
  cpu_flags: tuple[str, ...] = ()  # needs any of these /proc/cpuinfo flags
  library: str = ''  # 'onednn' / 'ynn': n/a unless the optimized HLO shows its effect
  numerics: bool = False  # changes results beyond summation order
  probe: bool = False  # experimental path: compile + run one quick step in a child first


# Ranked by expected payoff on an AMX machine (lever2.md, section 4).
SETTINGS = (
  Setting(
    'baseline',
    'jaxlib 0.10.2 defaults: YNNPACK for eligible dots '
    '(ynn_fusion_type = INDIVIDUAL_DOT), Eigen (dnnl_sgemm kernel) for the rest',
  ),
  Setting(
    'f32_matmuls_in_bf16',
    'f32 model, every dot on bf16 operands with f32 '
    'accumulation (like torch autocast): YNNPACK AMX / avx512_bf16 kernels',
    lowering='f32_in_bf16',
    dtype='float32',
    cpu_flags=BF16_ISA,
    numerics=True,
  ),
  Setting(
    'onednn_dot',
    'oneDNN Graph fusions for dots (+ up to 3 following elementwise ops), the library PyTorch uses',
    options=(
      ('xla_cpu_use_onednn', True),
      ('xla_cpu_experimental_onednn_fusion_type', 'LIBRARY_FUSION_TYPE_DOT'),
    ),
    library='onednn',
    probe=True,
  ),
  Setting(
    'no_ynn',
    'no YNNPACK: dots on Eigen (dnnl_sgemm contraction kernel) or LLVM IR',
    options=(('xla_cpu_experimental_ynn_fusion_type', ''),),
    library='ynn',
  ),
  Setting(
    'ynn_dot_fusions',
    'YNNPACK dots absorb neighbouring elementwise ops',
    options=(
      (
        'xla_cpu_experimental_ynn_fusion_type',
        'LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT,LIBRARY_FUSION_TYPE_DOT',
      ),
    ),
    library='ynn',
  ),
  Setting(
    'ynn_dot_eltwise',
    'as ynn_dot_fusions, and elementwise-only YNNPACK fusions',
    options=(
      (
        'xla_cpu_experimental_ynn_fusion_type',
        'LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT,LIBRARY_FUSION_TYPE_DOT,LIBRARY_FUSION_TYPE_ELTWISE',
      ),
    ),
    library='ynn',
  ),
  Setting(
    'vector_width_512',
    'LLVM-emitted fusions use 512-bit vectors (default prefers 256)',
    options=(('xla_cpu_prefer_vector_width', '512'),),
    cpu_flags=('avx512f',),
  ),
  Setting(
    'eigen_single_thread',
    'Eigen dots single-threaded (no fork/join per dot); independent thunks still run concurrently',
    options=(('xla_cpu_multi_thread_eigen', False),),
  ),
  Setting(
    'region_copy_insertion',
    "region-based live ranges in copy insertion: fewer copies around the scans' while loops",
    options=(('xla_cpu_copy_insertion_use_region_analysis', True),),
  ),
  Setting(
    'fast_runtime_preset',
    'XLA:CPU optimisation preset FAST_RUNTIME',
    options=(('xla_cpu_opt_preset', 'CPU_OPT_PRESET_FAST_RUNTIME'),),
  ),
  Setting(
    'fast_math',
    'LLVM fast-math (NaN, Inf, division and functions still honoured by the default honor_* flags)',
    options=(('xla_cpu_enable_fast_math', True),),
    numerics=True,
  ),
)
BY_NAME = {s.name: s for s in SETTINGS}
# Optimized HLO prints `%dot.1 = f32[32,32]{1,0} dot(%param_0, %param_1), ...`: the operand
# types come from their definitions earlier in the same computation.
DEFINITION_RE = re.compile(r'^\s*(?:ROOT )?%([\w.-]+) = (\w+)\[')
DOT_RE = re.compile(r'= (\w+)\[[^=]*? dot\(%([\w.-]+)')


@contextlib.contextmanager
def dot_lowering(mode: str):
  """Temporarily replaces JAX's CPU lowering of dot_general (private API of jax 0.10.2).

  'f32_in_bf16': an f32 dot gets bf16-rounded operands and f32 accumulation, as torch autocast
  does. (The bf16 model needs no rewrite: attnlab/models/matmul.py gives its dots f32
  accumulation.) Caches are cleared around it so that the step is traced and lowered afresh.
  """
  from jax._src.interpreters import mlir
  from jax._src.lax import lax as lax_internal

  if mode != 'f32_in_bf16':
    raise ValueError(f'unknown dot lowering {mode!r}; the one rewrite is f32_in_bf16')
  wanted = np.dtype(jnp.float32)
  prim = lax_internal.dot_general_p
  table = mlir._platform_specific_lowerings['cpu']
  saved = table.get(prim)
  if saved is None:
    raise NotApplicable('this jax has no CPU lowering entry for dot_general to replace')
  algorithms = (jax.lax.DotAlgorithm, jax.lax.DotAlgorithmPreset)

  def emulate(
    lhs, rhs, *, out_dtype, dimension_numbers, precision, preferred_element_type, out_sharding
  ):
    del preferred_element_type, out_sharding  # single device; the result type is out_dtype
    out = jax.lax.dot_general(
      lhs.astype(jnp.bfloat16),
      rhs.astype(jnp.bfloat16),
      dimension_numbers,
      precision=precision,
      preferred_element_type=jnp.float32,
    )
    return out.astype(out_dtype)

  def rule(ctx, lhs, rhs, **params):
    types = {aval.dtype for aval in (*ctx.avals_in, *ctx.avals_out)}
    if types == {wanted} and not isinstance(params.get('precision'), algorithms):
      fn = functools.partial(emulate, out_dtype=ctx.avals_out[0].dtype)
      return mlir.lower_fun(fn, multiple_results=False)(ctx, lhs, rhs, **params)
    return saved.rule(ctx, lhs, rhs, **params)  # includes the inner bf16 -> f32 dot

  jax.clear_caches()
  table[prim] = mlir.LoweringRuleEntry(rule, saved.inline)
  try:
    yield
  finally:
    table[prim] = saved
    jax.clear_caches()


def dot_types(text: str) -> Counter:
  """Counts of 'lhs dtype->result dtype' over the dots of optimized HLO text."""
  dots, types = Counter(), {}
  for line in text.splitlines():
    if line.rstrip().endswith('{'):  # a computation starts: names are local to it
      types = {}
      continue
    definition = DEFINITION_RE.match(line)
    if definition:
      types[definition.group(1)] = definition.group(2)
    dot = DOT_RE.search(line)
    if dot:
      dots[f'{types.get(dot.group(2), "?")}->{dot.group(1)}'] += 1
  return dots


def hlo_summary(text: str) -> dict:
  dots = dot_types(text)
  return {
    'ynn_fusions': text.count('__ynn_fusion'),
    'onednn_fusions': text.count('__onednn_fusion'),
    'dots': dict(sorted(dots.items())),
    'converts': len(re.findall(r' convert\(', text)),
  }


def cpu_flags() -> set[str]:
  return set(machine.cpuinfo().get('flags', '').split())


def static_reason(s: Setting, workload: workloads.Workload, flags: set[str]) -> str:
  if s.dtype and s.dtype != workload.dtype:
    return f'meant for model.dtype={s.dtype} (this workload: {workload.dtype})'
  if s.cpu_flags and not flags & set(s.cpu_flags):
    return 'this CPU has none of ' + ', '.join(s.cpu_flags)
  return ''
