"""attnlab vs a PyTorch reference: training and decoding throughput, compile time, memory, MFU.

    python -m benchmarks.run            # full table -> benchmarks/results/<machine>.json|.md
    python -m benchmarks.run --quick    # tiny models, few repetitions (the CI smoke test)

For every workload (benchmarks/workloads.py) both frameworks run the same network (the
reference loads attnlab's parameters; the largest logit difference is recorded) on the same
batches. Timings alternate attnlab and PyTorch repetition by repetition and report medians,
so each ratio (attnlab / PyTorch, > 1 = attnlab faster) is measured under the same load.
Steady-state throughput excludes compilation; `compile_s` is the first call minus a steady
call. MFU = matmul FLOPs of the executed shapes (benchmarks/flops.py) per second over the
best matmul rate measured here in the dtype the workload's matmuls run in (float32, or bf16
operands summed in float32 for model.dtype=bfloat16 and bfloat16_matmuls). PyTorch parts are
skipped if torch is not installed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import numpy as np

from attnlab.runtime.machine import default_machine_name
from attnlab.runtime.parallel import tune_host_allocator
from benchmarks import compile_check, jax_side, measure, memory, report, workloads

try:
  import torch

  from benchmarks import torch_side
except ImportError:  # benchmark-only optional dependency
  torch = None

RESULTS_DIR = os.path.join(os.path.dirname(__file__), 'results')


def _settings(quick: bool) -> dict:
  if quick:
    return dict(
      num_batches=2, train_steps=2, train_reps=2, decode_batches=1, decode_reps=2, check_steps=1
    )
  return dict(
    num_batches=4, train_steps=4, train_reps=7, decode_batches=1, decode_reps=5, check_steps=40
  )


def _mean_step_flops(jr, batches) -> float:
  """The mean FLOPs of a training step over `batches` (counted once per distinct shape:
  tracing is slow)."""
  by_shape = {}
  for b in batches:
    shape = (b['source'].shape, b['target'].shape)
    if shape not in by_shape:
      by_shape[shape] = jr.train_step_flops(b)
  return float(np.mean([by_shape[(b['source'].shape, b['target'].shape)] for b in batches]))


def bench_workload(
  w: workloads.Workload,
  quick: bool,
  peak_gflops: float,
  s: dict,
  with_torch: bool,
  with_memory: bool,
) -> dict:
  jr = jax_side.JaxRunner(w, quick=quick)
  batch_size = jr.cfg.data.global_batch_size
  padded, trimmed = workloads.make_batches(
    s['num_batches'], batch_size, w.bucket_size, token_buckets=w.token_buckets
  )
  shapes = dict.fromkeys(f'{b["source"].shape[1]}x{b["target"].shape[1]}' for b in padded)
  row = {
    'workload': w.name,
    'kind': w.kind,
    'dtype': w.dtype,
    'batch_size': batch_size,
    'padded_shape': ', '.join(shapes),
  }
  tr = None
  if with_torch:
    tr = torch_side.TorchRunner(w, quick=quick, params=jax.device_get(jr.params))
    row['max_logit_diff'] = jax_side.check_same_logits(jr, tr.model, padded[0], tr.autocast)

  # Decoding first: both sides still hold the same (initial) parameters.
  L = workloads.DECODE_LENGTH
  for method in ('greedy', 'beam'):
    jb, tb = padded[: s['decode_batches']], trimmed[: s['decode_batches']]
    first_s, (_, outs) = measure.timed(lambda m=method, b=jb: jr.decode(m, b, L))
    runs = {'jax': lambda m=method, b=jb: jr.decode(m, b, L)[0]}
    if tr is not None:
      _, t_outs = tr.decode(method, tb, L)  # warm-up
      tr.pick_threads(method, lambda m=method, b=tb: tr.decode(m, b, L)[0])
      runs['torch'] = lambda m=method, b=tb: tr.decode(m, b, L)[0]
      same = [
        np.mean(np.asarray(o.tokens_BxT) == t.numpy()) for o, t in zip(outs, t_outs, strict=True)
      ]
      row[f'{method}_agreement'] = round(float(np.mean(same)), 4)
    res = measure.interleaved(runs, s['decode_reps'])
    seqs = batch_size * len(jb)
    row[f'{method}_compile_s'] = round(first_s - res['jax']['median_s'], 2)
    row[f'{method}_jax_seq_s'] = round(seqs / res['jax']['median_s'], 1)
    row[f'{method}_load'] = res['jax']['load']
    if tr is not None:
      row[f'{method}_torch_seq_s'] = round(seqs / res['torch']['median_s'], 1)
      row[f'{method}_ratio'] = round(res['torch']['median_s'] / res['jax']['median_s'], 2)

  if w.headline and not quick:  # one sentence at a time: latency, where per-step overheads dominate
    one = [{k: v[:1] for k, v in padded[0].items()}]
    one_t = [{k: v[:1, : int(np.max(np.sum(v[:1] != 0, axis=1)))] for k, v in padded[0].items()}]
    jr.decode('greedy', one, L)
    runs = {'jax': lambda: jr.decode('greedy', one, L)[0]}
    if tr is not None:
      tr.decode('greedy', one_t, L)
      runs['torch'] = lambda: tr.decode('greedy', one_t, L)[0]
    res = measure.interleaved(runs, s['decode_reps'])
    row['greedy_b1_jax_ms'] = round(1000 * res['jax']['median_s'], 2)
    if tr is not None:
      row['greedy_b1_torch_ms'] = round(1000 * res['torch']['median_s'], 2)
      row['greedy_b1_ratio'] = round(res['torch']['median_s'] / res['jax']['median_s'], 2)

  # Training: the same rows, padded to buckets for attnlab and trimmed for PyTorch.
  steps_per_rep = s['train_steps']
  cycle = lambda batches: [batches[i % len(batches)] for i in range(steps_per_rep)]
  first_s = measure.timed(lambda: jr.train(padded[:1]))[0]
  jr.train(padded)  # warm-up: every batch (every shape) seen once
  tokens = sum(workloads.target_tokens(b) for b in cycle(padded))
  runs = {'jax': lambda: jr.train(cycle(padded))}
  if tr is not None:
    tr.train(trimmed)  # warm-up
    tr.pick_threads('train', lambda: tr.train(trimmed[:1]))
    runs['torch'] = lambda: tr.train(cycle(trimmed))
  res = measure.interleaved(runs, s['train_reps'])
  jax_step_s = res['jax']['median_s'] / steps_per_rep
  row.update(
    train_compile_s=round(first_s - jax_step_s, 2),
    train_jax_tok_s=round(tokens / res['jax']['median_s']),
    train_load=res['jax']['load'],
    train_traces=jr.traces['train'],
    donated=jr.donated,
  )
  jax_flops = _mean_step_flops(jr, cycle(padded))
  row['train_gflop_per_step'] = round(jax_flops / 1e9, 3)
  row['train_jax_mfu'] = round(jax_flops / jax_step_s / 1e9 / peak_gflops, 4)
  if tr is not None:
    row['train_torch_tok_s'] = round(tokens / res['torch']['median_s'])
    row['train_ratio'] = round(res['torch']['median_s'] / res['jax']['median_s'], 2)
    torch_flops = _mean_step_flops(jr, cycle(trimmed))
    torch_step_s = res['torch']['median_s'] / steps_per_rep
    row['train_torch_mfu'] = round(torch_flops / torch_step_s / 1e9 / peak_gflops, 4)
  row['traces'] = dict(jr.traces)

  if with_memory:
    row['memory_jax'] = memory.peak_memory(w.name, 'jax', quick)
    if tr is not None:
      row['memory_torch'] = memory.peak_memory(w.name, 'torch', quick)
  return row


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--quick', action='store_true', help='tiny models, smoke test')
  parser.add_argument(
    '--only',
    default='',
    help='comma-separated workload names (skips the default config\'s compilation check)',
  )
  parser.add_argument(
    '--out',
    default='',
    help='results folder (default: benchmarks/results; quick runs write nothing unless given)',
  )
  parser.add_argument('--machine', default='', help='results file name (default: the '
                      'accelerator JAX uses, else the CPU kind, e.g. amd-epyc-f25m17-avx512-2cpu)')
  parser.add_argument('--no-memory', action='store_true', help='skip the per-process peaks')
  parser.add_argument(
    '--default-allocator',
    action='store_true',
    help='keep glibc malloc defaults (no attnlab.runtime.parallel.tune_host_allocator)',
  )
  args = parser.parse_args(argv)
  tuned = False if args.default_allocator else tune_host_allocator()
  machine = args.machine or default_machine_name()
  s = _settings(args.quick)
  with_torch = torch is not None
  if not with_torch:
    print(
      'PyTorch is not installed: attnlab numbers only (pip install torch==2.13.0 for the '
      'reference)',
      file=sys.stderr,
    )
  chosen = workloads.quick_workloads() if args.quick else workloads.all_workloads()
  if args.only:
    names = args.only.split(',')
    chosen = [w for w in workloads.all_workloads() if w.name in names]
  started = time.time()
  jax_peak = measure.jax_matmul_gflops()
  torch_peak = measure.torch_matmul_gflops() if with_torch else 0.0
  result = {
    'command': 'python -m benchmarks.run'
    + (' --quick' if args.quick else '')
    + (f' --only={args.only}' if args.only else '')
    + (' --default-allocator' if args.default_allocator else ''),
    'machine': machine,
    'backend': jax.default_backend(),  # attnlab's; the PyTorch reference runs on the CPU
    'allocator_tuned': tuned,
    'cpu_count': os.cpu_count(),
    'quick': args.quick,
    'versions': {'jax': jax.__version__, 'torch': torch.__version__ if with_torch else None},
    'load_at_start': measure.load_average(),
    'matmul_gflops': {'jax': round(jax_peak, 1), 'torch': round(torch_peak, 1)},
    # bf16 operands, f32 sums (AMX / avx512_bf16 where the CPU has them): the bf16 rows' peak.
    'matmul_gflops_bf16': {
      'jax': round(measure.jax_matmul_gflops(dtype='bfloat16'), 1),
      'torch': round(measure.torch_matmul_gflops(dtype='bfloat16'), 1) if with_torch else 0.0,
    } if any(w.matmul_dtype == 'bfloat16' for w in chosen) else None,
    'step_matmul_gflops': {
      'jax': round(measure.jax_step_matmul_gflops(), 1),
      'torch': round(measure.torch_step_matmul_gflops(), 1) if with_torch else 0.0,
    },
    'settings': s,
    'rows': [],
  }
  peaks = {'float32': max(jax_peak, torch_peak)}
  if result['matmul_gflops_bf16']:
    peaks['bfloat16'] = max(result['matmul_gflops_bf16'].values())
  for w in chosen:
    row = bench_workload(
      w,
      args.quick,
      peaks[w.matmul_dtype],
      s,
      with_torch and not w.jax_only,
      not args.no_memory
      and not args.quick
      and (w.headline or w.kind == 'transformer' or w.jax_only)
      and not w.token_buckets,  # the same model as its bucketed row
    )
    result['rows'].append(row)
    print(report.row_line(row), flush=True)
  if not args.only:  # the default config's compilations: a property of the whole set
    result['default_config'] = compile_check.check_default_config(
      s['check_steps'], quick=args.quick
    )
  result['load_at_end'] = measure.load_average()
  result['wall_s'] = round(time.time() - started, 1)
  print(report.markdown(result))
  out = args.out or ('' if args.quick else RESULTS_DIR)
  if out:
    base = os.path.join(out, machine)
    measure.write_result(base, result, report.markdown(result))
    print(f'wrote {base}.json and {base}.md')
  return result


if __name__ == '__main__':
  main()
