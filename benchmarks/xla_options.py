"""XLA:CPU compile settings for one training step, side by side.

Compiles the benchmark's training step (benchmarks/workloads.py; default the headline
luong-general-feed, 16x16 batches of 64) once per setting from one lowering, then alternates
repetitions of all settings in this process (benchmarks.measure.interleaved) and prints, per
setting: median ms per step (wall, and this process's CPU time), the ratio to the baseline
(> 1 = faster), compile seconds, what the optimized HLO shows (YNNPACK / oneDNN fusions, dot
operand->result dtypes, converts), the loss of one step from the same state (numerics) and the
load average. Settings that cannot apply to this machine, jaxlib or workload are reported as
n/a and not timed. Takes ~2-4 minutes on 2 cores (12 compiles of ~5-10 s, 7 x 4 steps each).

  .venv/bin/python -m benchmarks.xla_options
  .venv/bin/python -m benchmarks.xla_options --workload luong-general-feed-bf16
  .venv/bin/python -m benchmarks.xla_options --only onednn_dot,no_ynn --reps 9 --json out.json
  ONEDNN_DEFAULT_FPMATH_MODE=BF16 .venv/bin/python -m benchmarks.xla_options --only onednn_dot
  .venv/bin/python -m benchmarks.xla_options --list

Compiler options need `jit(...).lower(...).compile(compiler_options=...)`, so this uses the
shard_map (jax.jit) step of attnlab.runtime.parallel.DataParallel on one device; `benchmarks.run`
times the pmap step (the same per-device function). Environment-level knobs (XLA_FLAGS,
ONEDNN_*, TENSORFLOW_USE_CUSTOM_CONTRACTION_KERNEL) are read once per process: compare two
runs, each with its own baseline row. Results: benchmarks/OPTIMISATIONS.md (what XLA:CPU in jaxlib
0.10.2 offers).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time

from attnlab.runtime import machine  # noqa: E402
from attnlab.runtime.parallel import tune_host_allocator  # noqa: E402

ALLOCATOR_TUNED = tune_host_allocator()  # before JAX starts its threads, as benchmarks.run does

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks import jax_side, measure, workloads  # noqa: E402
from benchmarks.xla_settings import (  # noqa: E402
  BF16_ISA,
  BY_NAME,
  ENV_KNOBS,
  SETTINGS,
  NotApplicable,
  Setting,
  cpu_flags,
  dot_lowering,
  hlo_summary,
  static_reason,
)


def _body(text: str) -> str:
  return text.split('\n', 1)[-1]  # without the HloModule line


REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def probe_in_child(s: Setting, workload: workloads.Workload) -> str:
  """'' if a quick compile + step of `s` works in a child process, else why not."""
  # As a module from the repository root: run as a script, `from benchmarks import ...` fails.
  cmd = [sys.executable, '-m', 'benchmarks.xla_options', '--probe', s.name,
         '--workload', workload.name]
  try:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
  except subprocess.TimeoutExpired:
    return 'quick probe timed out (300 s)'
  if r.returncode == 0 and 'PROBE OK' in r.stdout:
    return ''
  last = ((r.stderr or '') + (r.stdout or '')).strip().splitlines()[-1:] or ['']
  return f'quick probe failed (rc {r.returncode}): {last[0][:160]}'


def lower_step(jr: jax_side.JaxRunner, batch, mode: str):
  with dot_lowering(mode) if mode else contextlib.nullcontext():
    return jr._train_step.lower(jr._p_state, batch, jr._key)


def compile_setting(lowered, s: Setting):
  start = time.perf_counter()
  compiled = lowered.compile(compiler_options=dict(s.options) or None)
  return compiled, time.perf_counter() - start


def run_probe(name: str, workload: workloads.Workload) -> int:
  s = BY_NAME[name]
  jr = jax_side.JaxRunner(workload, quick=True, mode='shard_map')
  padded, _ = workloads.make_batches(1, jr.cfg.data.global_batch_size, workload.bucket_size)
  batch = jr.parallel.shard_batch(padded[0])
  compiled, _ = compile_setting(lower_step(jr, batch, s.lowering), s)
  _, sums = compiled(jr._p_state, batch, jr._key)
  jax.block_until_ready(sums)
  print('PROBE OK', hlo_summary(compiled.as_text() or ''))
  return 0


MATMUL_SHAPES = ((1024, 1024, 1024), (64, 512, 1024))  # the peak probe; the LSTM step's dot


def matmul_rates(settings, flags, reps: int = 10) -> dict[str, dict[str, float]]:
  """f32 GFLOP/s of x @ y per setting and shape (x @ y as benchmarks.measure times it)."""
  rng = np.random.default_rng(0)
  rates = {}
  for s in settings:
    if s.lowering not in ('', 'f32_in_bf16'):
      continue
    if s.cpu_flags and not flags & set(s.cpu_flags):
      continue
    for m, k, n in MATMUL_SHAPES:
      a = jnp.asarray(rng.standard_normal((m, k)), jnp.float32)
      b = jnp.asarray(rng.standard_normal((k, n)), jnp.float32)
      try:
        with dot_lowering(s.lowering) if s.lowering else contextlib.nullcontext():
          lowered = jax.jit(lambda x, y: x @ y).lower(a, b)
        compiled, _ = compile_setting(lowered, s)
      except Exception:  # reported n/a in the step table already
        continue
      compiled(a, b).block_until_ready()
      best = min(
        measure.timed(lambda c=compiled, x=a, y=b: c(x, y).block_until_ready())[0]
        for _ in range(reps)
      )
      rates.setdefault(s.name, {})[f'{m}x{k}x{n}'] = round(2 * m * k * n / best / 1e9, 1)
  return rates


def fmt(x, digits=1) -> str:
  return '' if x is None else f'{x:.{digits}f}'


def markdown(header: dict, rows: list[dict]) -> str:
  lines = [f'## XLA:CPU settings A/B: {header["workload"]} on {header["machine"]}', '']
  lines += [f'- {k}: {v}' for k, v in header.items() if k not in ('workload', 'machine')]
  lines += [
    '',
    '| setting | status | ms/step wall | ms/step cpu | x base wall | x base cpu | '
    'compile s | ynn / onednn fusions | dots (lhs->out: n) | converts | '
    'loss rel diff |',
    '|' + '---|' * 11,
  ]
  for r in rows:
    h = r.get('hlo') or {}
    dots = ', '.join(f'{k}: {v}' for k, v in h.get('dots', {}).items())
    fusions = f'{h["ynn_fusions"]} / {h["onednn_fusions"]}' if h else ''
    lines.append(
      f'| {r["name"]} | {r["status"]} | {fmt(r.get("wall_ms"))} | {fmt(r.get("cpu_ms"))} | '
      f'{fmt(r.get("x_wall"), 3)} | {fmt(r.get("x_cpu"), 3)} | {fmt(r.get("compile_s"))} | '
      f'{fusions} | {dots} | {h.get("converts", "")} | {fmt(r.get("loss_rel_diff"), 6)} |'
    )
  lines += ['', 'Settings:'] + [f'- {r["name"]}: {r["why"]}' for r in rows]
  return '\n'.join(lines) + '\n'


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  names = [w.name for w in workloads.all_workloads()]
  headline = next(w.name for w in workloads.all_workloads() if w.headline)
  parser.add_argument('--workload', default=headline, choices=names)
  parser.add_argument(
    '--only',
    default='',
    help='comma-separated settings (baseline is always included); --list shows them',
  )
  parser.add_argument('--reps', type=int, default=7, help='alternated repetitions')
  parser.add_argument('--steps', type=int, default=4, help='training steps per repetition')
  parser.add_argument('--batches', type=int, default=4, help='distinct batches cycled')
  parser.add_argument('--quick', action='store_true', help='tiny model (smoke test only)')
  parser.add_argument('--no-probe', action='store_true', help='skip child-process probes')
  parser.add_argument('--json', default='', help='also write the rows to this file')
  parser.add_argument('--list', action='store_true', help='print the settings and exit')
  parser.add_argument(
    '--matmul', action='store_true', help='also f32 matmul GFLOP/s per setting (~30 s)'
  )
  parser.add_argument('--probe', default='', help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.list:
    for s in SETTINGS:
      print(f'{s.name}: {s.why}\n    options={dict(s.options)} lowering={s.lowering!r}')
    return 0
  workload = next(w for w in workloads.all_workloads() if w.name == args.workload)
  if args.probe:
    return run_probe(args.probe, workload)
  chosen = [s.strip() for s in args.only.split(',') if s.strip()]
  unknown = [n for n in chosen if n not in BY_NAME]
  if unknown:
    sys.exit(f'error: --only has unknown settings {unknown}; choose from {list(BY_NAME)}')
  settings = [s for s in SETTINGS if not chosen or s.name in chosen or s.name == 'baseline']
  if jax.default_backend() != 'cpu':
    sys.exit(
      f'error: JAX computes on {jax.default_backend()}; this A/B is about XLA:CPU '
      '(set JAX_PLATFORMS=cpu)'
    )

  started = time.time()
  flags = cpu_flags()
  header = {
    'workload': workload.name + (' [quick]' if args.quick else ''),
    'machine': machine.machine_name(),
    'cpu': machine.cpu_model_name(),
    'bf16/amx flags': ', '.join(sorted(flags & {'avx512f', *BF16_ISA, 'amx_tile'})) or 'none',
    'versions': f'jax {jax.__version__}',
    'env': {k: os.environ[k] for k in ENV_KNOBS if k in os.environ}
    or 'none of ' + ', '.join(ENV_KNOBS),
    'allocator_tuned': ALLOCATOR_TUNED,
    'load_at_start': measure.load_average(),
    'reps x steps': f'{args.reps} x {args.steps}',
  }
  print(f'XLA:CPU settings A/B, {header["workload"]}, {header["machine"]}', flush=True)

  jr = jax_side.JaxRunner(workload, quick=args.quick, mode='shard_map')
  padded, _ = workloads.make_batches(
    args.batches, jr.cfg.data.global_batch_size, workload.bucket_size
  )
  shapes = {(b['source'].shape, b['target'].shape) for b in padded}
  if len(shapes) != 1:
    sys.exit(
      f'error: the batches pad to {len(shapes)} shapes {sorted(shapes)}; '
      'use --batches 1 or one bucket shape'
    )
  dev = [jr.parallel.shard_batch(b) for b in padded]
  cycle = [dev[i % len(dev)] for i in range(args.steps)]
  host_state = jr.parallel.fetch(jr._p_state)
  key = jr._key

  rows, compiled_steps, lowered, base = [], {}, {}, {}
  for s in settings:
    row = {'name': s.name, 'why': s.why, 'status': 'ok'}
    rows.append(row)
    reason = static_reason(s, workload, flags)
    if not reason and s.probe and not args.no_probe:
      reason = probe_in_child(s, workload)
    try:
      if reason:
        raise NotApplicable(reason)
      if s.lowering not in lowered:
        lowered[s.lowering] = lower_step(jr, dev[0], s.lowering)
      compiled, row['compile_s'] = compile_setting(lowered[s.lowering], s)
    except Exception as e:  # an option this jaxlib rejects, a probe that crashed, ...
      msg = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
      row['status'] = 'n/a: ' + msg
      print(f'{s.name}: {row["status"]}', flush=True)
      continue
    text = compiled.as_text() or ''
    row['hlo'] = hlo_summary(text)
    if s.name == 'baseline':
      base['text'], base['hlo'] = _body(text), row['hlo']
    elif s.library == 'onednn' and not row['hlo']['onednn_fusions']:
      row['status'] = 'n/a: no oneDNN fusion formed (no eligible dot, or no oneDNN in jaxlib)'
    elif s.library == 'ynn' and _body(text) == base.get('text'):
      row['status'] = 'n/a: same optimized HLO as the baseline'
    elif s.lowering and _body(text) == base.get('text'):
      row['status'] = 'n/a: the rewritten lowering changed nothing in the optimized HLO'
    if row['status'] != 'ok':
      print(f'{s.name}: {row["status"]}', flush=True)
      continue
    # Numerics: one step from the same initial state and dropout key.
    try:
      _, sums = compiled(jr.parallel.replicate(host_state), dev[0], key)
      row['loss'] = float(sums['objective_sum']) / max(float(sums['token_count']), 1.0)
    except jax.errors.JaxRuntimeError as e:  # e.g. a dot no runtime kernel implements
      row['status'] = 'n/a: ' + str(e).strip().splitlines()[0][:160]
      print(f'{s.name}: {row["status"]}', flush=True)
      continue
    row['grad_norm'] = float(sums['grad_norm_sum'])
    compiled_steps[s.name] = compiled
    print(f'{s.name}: compiled in {row["compile_s"]:.1f} s, {row["hlo"]}', flush=True)

  holder = {'state': jr.parallel.replicate(host_state)}
  cpu_s = {name: [] for name in compiled_steps}

  def make_run(name, fn):
    def run() -> float:
      cpu0, start = time.process_time(), time.perf_counter()
      sums = None
      for batch in cycle:
        holder['state'], sums = fn(holder['state'], batch, key)
      jax.block_until_ready(sums)
      cpu_s[name].append(time.process_time() - cpu0)
      return time.perf_counter() - start

    return run

  runs = {name: make_run(name, fn) for name, fn in compiled_steps.items()}
  for run in runs.values():  # warm-up: first execution of every executable
    run()
  for name in cpu_s:
    cpu_s[name].clear()
  timed = measure.interleaved(runs, args.reps) if runs else {}

  by_name = {r['name']: r for r in rows}
  b = by_name['baseline']
  for name, res in timed.items():
    r = by_name[name]
    r['wall_ms'] = 1000 * res['median_s'] / args.steps
    r['cpu_ms'] = 1000 * statistics.median(cpu_s[name]) / args.steps
    r['load'] = res['load']
    if 'wall_ms' in b and 'loss' in b:
      r['x_wall'] = b['wall_ms'] / r['wall_ms']
      r['x_cpu'] = b['cpu_ms'] / r['cpu_ms']
      r['loss_rel_diff'] = abs(r['loss'] - b['loss']) / max(abs(b['loss']), 1e-12)
  header['load_during_timing'] = next(iter(timed.values()))['load'] if timed else None
  header['load_at_end'] = measure.load_average()
  header['wall_s'] = round(time.time() - started, 1)
  text = markdown(header, rows)
  if args.matmul:
    rates = matmul_rates([s for s in settings if s.name in compiled_steps], flags)
    header['matmul_gflops'] = rates
    text += '\nf32 matmul GFLOP/s (best of 10):\n' + ''.join(
      f'- {name}: {r}\n' for name, r in rates.items()
    )
  print('\n' + text)
  if args.json:
    with open(args.json, 'w') as f:
      json.dump({'header': header, 'rows': rows}, f, indent=1, default=str)
    print(f'wrote {args.json}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
