"""Both cores on one run: which way of using a CPU's cores trains attnlab fastest?

    .venv/bin/python -m benchmarks.cores                  # 600 steps a setting, 2 rounds
    .venv/bin/python -m benchmarks.cores --steps=1500 --rounds=3 --task=bible

Trains the peers' matched network (benchmarks/peers/recipes.py, batches of 64 sources, float32)
with `attnlab.main` in a fresh process per setting, the settings alternated round by round:

  threads   one device; XLA:CPU's intra-op threads split each op over the cores (the default)
  devices   one single-threaded device per core (--xla_force_host_platform_device_count, no
            intra-op threads), the batch split between them by data parallelism (shard_map)
  both      one device per core, each with intra-op threads

and prints per setting the median target tokens/s of its logging windows after the first (as
benchmarks/peers reads a training log), the process's CPU seconds over its wall seconds, and
each round's value. One process at a time; run it on an otherwise idle machine.
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
from benchmarks.peers import logs, recipes, tasks

# name -> (XLA_FLAGS, devices)
SETTINGS = {
  'threads': ('', 1),
  'devices': (f'{CPU_DEVICE_COUNT_FLAG}={{n}} --xla_cpu_multi_thread_eigen=false', 0),
  'both': (f'{CPU_DEVICE_COUNT_FLAG}={{n}}', 0),
}


def _command(task, workdir: str, steps: int, devices: int) -> list[str]:
  # Evaluations only at the end, on 64 sources: they are not what is timed.
  plan = recipes.Plan(max_steps=steps, every=steps, log_every=50, eval_sources=64)
  return [
    sys.executable, '-m', 'attnlab.main', f'--workdir={workdir}',
    *recipes.attnlab_flags(task, plan, 'examples'),
    f'--config.parallel.num_devices={devices}',
  ]


def run_setting(task, name: str, steps: int, cores: int) -> dict:
  flags, devices = SETTINGS[name]
  devices = devices or cores
  with tempfile.TemporaryDirectory() as folder:
    env = dict(os.environ, JAX_PLATFORMS='cpu', XLA_FLAGS=flags.format(n=cores))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(_command(task, os.path.join(folder, 'run'), steps, devices), env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
      raise SystemExit(f'error: {name} failed (exit {done.returncode}): {done.stderr[-1500:]}')
    with open(os.path.join(folder, 'run', 'metrics.jsonl'), encoding='utf-8') as f:
      windows = logs.attnlab_windows(f.read().splitlines())
  cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
  return {'tokens_per_s': logs.steady_rate(windows), 'cpu_per_wall': cpu / wall}


def main(argv=None) -> dict:
  p = argparse.ArgumentParser(prog='python -m benchmarks.cores', description=__doc__.split('\n')[0])
  p.add_argument('--task', default='g2p', choices=sorted(tasks.TASKS))
  p.add_argument('--steps', type=int, default=600)
  p.add_argument('--rounds', type=int, default=2)
  p.add_argument('--settings', default=','.join(SETTINGS))
  args = p.parse_args(argv)
  names = args.settings.split(',')
  unknown = sorted(set(names) - set(SETTINGS))
  if unknown:
    p.error(f'unknown settings {unknown}; choose from {", ".join(SETTINGS)}')
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
                    'rounds': [round(x['tokens_per_s']) for x in found]}
  print(json.dumps({'task': task.name, 'steps': args.steps, 'cores': cores,
                    'load_average': os.getloadavg(), 'settings': result}, indent=1))
  return result


if __name__ == '__main__':
  main()
