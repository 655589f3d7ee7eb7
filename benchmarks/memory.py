"""Peak host memory of one workload in a fresh process (CPU has no device memory statistics).

    python -m benchmarks.memory --workload=luong-general-feed --framework=jax [--quick]

Imports the framework, records the resident set (the baseline), then builds the model, runs
three training steps and one beam-search batch, and prints one JSON line with the baseline
and the process's resident-set high-water mark (VmHWM), in MiB. For attnlab the peak includes
XLA's compilation, which a training run also pays. `benchmarks.run` calls this per workload.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from benchmarks import measure, workloads


def _jax(workload, quick: bool, padded, trimmed) -> None:
  from benchmarks import jax_side

  runner = jax_side.JaxRunner(workload, quick=quick)
  runner.train(padded[:3])
  runner.decode('beam', padded[:1], workloads.DECODE_LENGTH)


def _torch(workload, quick: bool, padded, trimmed) -> None:
  from benchmarks import torch_side

  runner = torch_side.TorchRunner(workload, quick=quick, params=None)
  runner.train(trimmed[:3])
  runner.decode('beam', trimmed[:1], workloads.DECODE_LENGTH)


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--workload', required=True)
  parser.add_argument('--framework', choices=('jax', 'torch'), required=True)
  parser.add_argument('--quick', action='store_true')
  args = parser.parse_args(argv)
  from attnlab.runtime.parallel import tune_host_allocator

  tune_host_allocator()  # as benchmarks.run does
  if args.framework == 'jax':
    import jax  # noqa: F401
  else:
    import torch  # noqa: F401
  by_name = {w.name: w for w in workloads.all_workloads()}
  if args.workload not in by_name:
    raise SystemExit(f'unknown workload {args.workload!r}; choose from {", ".join(by_name)}')
  batch_size = workloads.run_config(by_name[args.workload], quick=args.quick).data.global_batch_size
  padded, trimmed = workloads.make_batches(3, batch_size, bucket_size=8)
  baseline = measure.rss_mib()
  (_jax if args.framework == 'jax' else _torch)(by_name[args.workload], args.quick, padded, trimmed)
  print(
    json.dumps({'baseline_mib': round(baseline, 1), 'peak_mib': round(measure.peak_rss_mib(), 1)})
  )


def peak_memory(workload: str, framework: str, quick: bool, timeout: float = 600) -> dict:
  """Runs `main` in a fresh interpreter; returns its JSON (or {'error': ...})."""
  cmd = [
    sys.executable,
    '-m',
    'benchmarks.memory',
    f'--workload={workload}',
    f'--framework={framework}',
  ] + (['--quick'] if quick else [])
  proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
  if proc.returncode != 0:
    return {'error': proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else 'failed'}
  return json.loads(proc.stdout.strip().splitlines()[-1])


if __name__ == '__main__':
  main()
