"""Timing helpers: interleaved repetitions, load average, matmul peak (the machine's name:
attnlab/runtime/machine.py).

The benchmark machine is shared, so absolute timings drift with other processes' load. Every
comparison therefore alternates the two frameworks repetition by repetition (ABBA order, so a
trend hits both equally) and reports medians; the load average is recorded next to each
measurement.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable

import numpy as np


def write_result(stem: str, result: dict, markdown: str) -> None:
  """`stem`.json (the numbers) and `stem`.md (the table a README quotes), side by side."""
  os.makedirs(os.path.dirname(stem) or '.', exist_ok=True)
  with open(f'{stem}.json', 'w') as f:
    json.dump(result, f, indent=1)
  with open(f'{stem}.md', 'w') as f:
    f.write(markdown)


def load_average() -> float:
  """1-minute load average (0 where the platform has none)."""
  try:
    return round(os.getloadavg()[0], 2)
  except OSError:
    return 0.0


def interleaved(runs: dict[str, Callable[[], float]], reps: int) -> dict[str, dict]:
  """Calls each `runs[name]() -> seconds` `reps` times, alternating the order every rep.

  Returns {name: {'median_s', 'min_s', 'all_s', 'load'}} (load: mean 1-minute load average
  over the repetitions).
  """
  names = list(runs)
  times = {n: [] for n in names}
  loads = []
  for rep in range(reps):
    for name in names if rep % 2 == 0 else names[::-1]:
      times[name].append(runs[name]())
    loads.append(load_average())
  load = round(float(np.mean(loads)), 2)
  return {
    n: {
      'median_s': statistics.median(t),
      'min_s': min(t),
      'all_s': [round(x, 4) for x in t],
      'load': load,
    }
    for n, t in times.items()
  }


def timed(fn: Callable[[], object]) -> tuple[float, object]:
  start = time.perf_counter()
  out = fn()
  return time.perf_counter() - start, out


# A peak is the best of up to PEAK_REPS calls, but no more calls than fit in PEAK_BUDGET_S once
# PEAK_MIN_REPS are done: a path without hardware support (PyTorch's bf16 matmul on AVX2 takes
# ~2 s a call) would otherwise spend most of a quick run measuring its own slowness.
PEAK_REPS, PEAK_MIN_REPS, PEAK_BUDGET_S = 10, 3, 5.0


def best_seconds(fn: Callable[[], object], reps: int = PEAK_REPS) -> float:
  """The fastest of `reps` calls of `fn` (at least PEAK_MIN_REPS, fewer than `reps` once
  PEAK_BUDGET_S has passed)."""
  times = []
  started = time.perf_counter()
  while len(times) < reps:
    times.append(timed(fn)[0])
    if len(times) >= PEAK_MIN_REPS and time.perf_counter() - started > PEAK_BUDGET_S:
      break
  return min(times)


def jax_matmul_gflops(n: int = 1024, reps: int = PEAK_REPS, dtype: str = 'float32') -> float:
  """Best n x n matmul rate of XLA on this machine, GFLOP/s: float32, or bfloat16 operands
  summed in float32 (what attnlab's bf16 matmuls run, models/matmul.py)."""
  import jax
  import jax.numpy as jnp

  a = jnp.asarray(np.random.default_rng(0).standard_normal((n, n)), dtype)
  mm = jax.jit(lambda x, y: jnp.matmul(x, y, preferred_element_type=jnp.float32))
  mm(a, a).block_until_ready()
  best = best_seconds(lambda: mm(a, a).block_until_ready(), reps)
  return 2 * n**3 / best / 1e9


def torch_matmul_gflops(n: int = 1024, reps: int = PEAK_REPS, dtype: str = 'float32') -> float:
  """Best n x n matmul rate of PyTorch on this machine, GFLOP/s (float32 or bfloat16)."""
  import torch

  a = torch.randn(n, n).to(getattr(torch, dtype))
  a @ a
  best = best_seconds(lambda: a @ a, reps)
  return 2 * n**3 / best / 1e9


# The headline decoder's per-step LSTM matmul: [feed; h] (B x 2H) times [W_x; W_h] (2H x 4H),
# B = 64, H = 256, run as 16 dependent steps (each step's input slices the last product), as
# inside the RNN's time loop. Its rate bounds what the RNN workloads' MFU can reach.
STEP_MATMUL = (64, 512, 1024)
STEP_LOOP = 16


def jax_step_matmul_gflops(reps: int = PEAK_REPS) -> float:
  """Best float32 rate of XLA at the RNN step's matmul shape inside a scan, GFLOP/s."""
  import jax
  import jax.numpy as jnp

  m, k, n = STEP_MATMUL
  rng = np.random.default_rng(0)
  x0 = jnp.asarray(rng.standard_normal((m, k)), jnp.float32)
  w = jnp.asarray(rng.standard_normal((k, n)) / np.sqrt(k), jnp.float32)

  def loop(x, w):
    def body(x, _):
      return jnp.tanh(x @ w)[:, :k], None

    return jax.lax.scan(body, x, None, length=STEP_LOOP)[0]

  run = jax.jit(loop)
  run(x0, w).block_until_ready()
  best = best_seconds(lambda: run(x0, w).block_until_ready(), reps)
  return 2 * m * k * n * STEP_LOOP / best / 1e9


def torch_step_matmul_gflops(reps: int = PEAK_REPS) -> float:
  """The same loop in PyTorch (eager, as the reference's decoder step loop runs)."""
  import torch

  m, k, n = STEP_MATMUL
  x0, w = torch.randn(m, k), torch.randn(k, n) / k**0.5

  def loop():
    x = x0
    for _ in range(STEP_LOOP):
      x = torch.tanh(x @ w)[:, :k]
    return x

  with torch.inference_mode():
    loop()
    best = best_seconds(loop, reps)
  return 2 * m * k * n * STEP_LOOP / best / 1e9


def peak_rss_mib() -> float:
  """This process's resident-set high-water mark (VmHWM), MiB (0 where /proc is missing)."""
  try:
    with open('/proc/self/status') as f:
      for line in f:
        if line.startswith('VmHWM:'):
          return int(line.split()[1]) / 1024
  except OSError:
    pass
  import resource

  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_mib() -> float:
  try:
    with open('/proc/self/status') as f:
      for line in f:
        if line.startswith('VmRSS:'):
          return int(line.split()[1]) / 1024
  except OSError:
    pass
  return 0.0
