"""Which way of using a CPU's cores trains attnlab fastest: one run on all of them, or one run
on each (as a sweep's trials side by side)?

    .venv/bin/python -m benchmarks.cores                  # 600 steps a setting, 2 rounds
    .venv/bin/python -m benchmarks.cores --steps=1500 --rounds=3 --task=bible
    .venv/bin/python -m benchmarks.cores --settings=side_by_side,pinned_side_by_side

Trains the peers' matched network (benchmarks/peers/recipes.py, batches of 64 sources, float32)
with `attnlab.main` in a fresh process per setting, the settings alternated round by round:

  threads   one device; XLA:CPU's intra-op threads split each op over the cores (the default)
  devices   one single-threaded device per core (--xla_force_host_platform_device_count, no
            intra-op threads), the batch split between them by data parallelism (shard_map)
  both      one device per core, each with intra-op threads
  side_by_side         two runs at once, each one device with XLA_FLAGS'
                       --xla_cpu_multi_thread_eigen=false, placed by the OS (the sweeps of
                       `attnlab.sweep --parallel=2` before their slots were pinned)
  pinned_side_by_side  the same, each run pinned to its half of the CPUs as attnlab.sweep's
                       slots pin them (attnlab/sweeps/slots.py), so XLA:CPU sizes its thread
                       pool to its own cores

and prints per setting the median target tokens/s of its logging windows after the first (as
benchmarks/peers reads a training log; side by side: the two runs' sum, and each), the CPU
seconds of its processes over its wall seconds, and each round's value. One setting at a time;
run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from attnlab.runtime.parallel import CPU_DEVICE_COUNT_FLAG
from attnlab.sweeps import slots
from benchmarks.peers import logs, recipes, tasks

SINGLE_THREADED = '--xla_cpu_multi_thread_eigen=false'
# name -> (XLA_FLAGS, devices)
SETTINGS = {
  'threads': ('', 1),
  'devices': (f'{CPU_DEVICE_COUNT_FLAG}={{n}} {SINGLE_THREADED}', 0),
  'both': (f'{CPU_DEVICE_COUNT_FLAG}={{n}}', 0),
}
# name -> whether each of the two runs is pinned to its half of the CPUs
SIDE_BY_SIDE = {'side_by_side': False, 'pinned_side_by_side': True}


def _command(task, workdir: str, steps: int, devices: int) -> list[str]:
  # Evaluations only at the end, on 64 sources: they are not what is timed.
  plan = recipes.Plan(max_steps=steps, every=steps, log_every=50, eval_sources=64)
  return [
    sys.executable, '-m', 'attnlab.main', f'--workdir={workdir}',
    *recipes.attnlab_flags(task, plan, 'examples'),
    f'--config.parallel.num_devices={devices}',
  ]


def run_setting(task, name: str, steps: int, cores: int) -> dict:
  if name in SIDE_BY_SIDE:
    halves = [slots.share_of(slots.allowed_cpus(), (k, 2)) for k in (1, 2)]
    runs = [(SINGLE_THREADED, 1, half if SIDE_BY_SIDE[name] else None) for half in halves]
  else:
    flags, devices = SETTINGS[name]
    runs = [(flags.format(n=cores), devices or cores, None)]
  with tempfile.TemporaryDirectory() as folder:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    processes = []
    for i, (flags, devices, cpus) in enumerate(runs):
      workdir = os.path.join(folder, f'run{i}')
      processes.append(subprocess.Popen(
        _command(task, workdir, steps, devices), env=dict(os.environ, JAX_PLATFORMS='cpu',
                                                           XLA_FLAGS=flags),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
      if cpus is not None:
        slots.pin_started(processes[-1].pid, cpus)
    errors = [process.communicate()[1] for process in processes]
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    rates = []
    for i, (process, error) in enumerate(zip(processes, errors, strict=True)):
      if process.returncode:
        raise SystemExit(f'error: {name} failed (exit {process.returncode}): {error[-1500:]}')
      with open(os.path.join(folder, f'run{i}', 'metrics.jsonl'), encoding='utf-8') as f:
        rates.append(logs.steady_rate(logs.attnlab_windows(f.read().splitlines())))
  cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
  found = {'tokens_per_s': sum(rates), 'cpu_per_wall': cpu / wall}
  return {**found, 'each': [round(r) for r in rates]} if len(rates) > 1 else found


def main(argv=None) -> dict:
  p = argparse.ArgumentParser(prog='python -m benchmarks.cores', description=__doc__.split('\n')[0])
  p.add_argument('--task', default='g2p', choices=sorted(tasks.TASKS))
  p.add_argument('--steps', type=int, default=600)
  p.add_argument('--rounds', type=int, default=2)
  p.add_argument('--settings', default=','.join([*SETTINGS, *SIDE_BY_SIDE]))
  args = p.parse_args(argv)
  names = args.settings.split(',')
  known = [*SETTINGS, *SIDE_BY_SIDE]
  unknown = sorted(set(names) - set(known))
  if unknown:
    p.error(f'unknown settings {unknown}; choose from {", ".join(known)}')
  cores = os.cpu_count() or 1
  task = tasks.TASKS[args.task]
  rounds = {name: [] for name in names}
  for r in range(args.rounds):
    for name in names:
      rounds[name].append(run_setting(task, name, args.steps, cores))
      print(f'round {r + 1} {name}: {rounds[name][-1]}', flush=True)
  base = statistics.median(x['tokens_per_s'] for x in rounds[names[0]])
  result = {}
  for name, found in rounds.items():
    rate = statistics.median(x['tokens_per_s'] for x in found)
    result[name] = {'tokens_per_s': round(rate), 'ratio': round(rate / base, 3),
                    'cpu_per_wall': round(statistics.median(x['cpu_per_wall'] for x in found), 2),
                    'rounds': [round(x['tokens_per_s']) for x in found],
                    **({'each': [x['each'] for x in found]} if 'each' in found[0] else {})}
  print(json.dumps({'task': task.name, 'steps': args.steps, 'cores': cores,
                    'load_average': os.getloadavg(), 'settings': result}, indent=1))
  return result


if __name__ == '__main__':
  main()
