"""On whatever JAX backend this machine has (a GPU or TPU where one is lent; CPU devices
otherwise): does attnlab train and decode correctly over all its devices, and how fast?

    python -m benchmarks.device_check     # -> benchmarks/results/device_check_<machine>.md
    python -m benchmarks.device_check --steps=20 --config=configs/reverse.py:smoke --out=DIR

1. Trains `--config` for `--steps` steps over every device twice, with parallel.mode=shard_map
   and with pmap (same seed, same batches), and checks that the two agree: every logged
   training loss and every final parameter within `--rtol`.
2. Decodes the eval split's first inputs with the shard_map run (attnlab.load_run) and checks
   them against what the run's own evaluation wrote (predictions_eval.jsonl).
3. Decodes the first test inputs of each model shipped in results/ (or those `--shipped` names)
   and compares them with its archived predictions (reported, not a failure: those were made
   on a CPU).
4. Runs `python -m benchmarks.run --quick` and keeps its table.
Writes one Markdown file with the device, the command, the agreement and the timings; exits 1
when a check fails. Sized to finish within ~8 minutes on one accelerator.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time

import jax
import numpy as np

from attnlab.decoding import runs
from attnlab.rundir import checkpoint, checkpoint_params, layout
from attnlab.runtime.machine import default_machine_name
from attnlab.train import loop

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS_DIR = os.path.join(ROOT, 'benchmarks', 'results')


def load_config(spec: str, steps: int):
  """The config of `spec` (configs/NAME.py[:variant], as attnlab.main takes it) for `steps`
  steps, evaluated once at the end on the first 64 eval examples, over every device."""
  path, _, variant = spec.partition(':')
  module = importlib.import_module(path.removesuffix('.py').replace('/', '.'))
  config = module.get_config(variant) if variant else module.get_config()
  with config.unlocked():
    config.train.num_steps = steps
    config.train.log_every = 1
    config.train.eval_every = steps
    config.train.checkpoint_every = steps
    config.train.patience = 0
    config.eval.max_examples = 64
    config.eval.num_heatmaps = 0
    config.eval.splits = ('eval',)
    config.parallel.num_devices = 0  # every device
  return config


def train_losses(workdir: str) -> list[tuple[int, float]]:
  with layout.open_text(os.path.join(workdir, layout.METRICS_FILE)) as f:
    events = [json.loads(line) for line in f]
  return sorted((e['step'], e['loss']) for e in events if e.get('split') == 'train')


def final_params(workdir: str):
  with checkpoint.Checkpointer(layout.checkpoint_dir(workdir), keep=1) as ckpt:
    return checkpoint_params.restore(ckpt, 'latest')[0]


def compare_modes(spec: str, steps: int, rtol: float, folder: str) -> dict:
  """Trains in both modes; {'agree', 'max_loss_diff', 'max_param_diff', 'seconds': {...}}."""
  seconds = {}
  for mode in ('shard_map', 'pmap'):
    config = load_config(spec, steps)
    with config.unlocked():
      config.parallel.mode = mode
    started = time.perf_counter()
    loop.train_and_evaluate(config, os.path.join(folder, mode))
    seconds[mode] = time.perf_counter() - started
  a, b = (train_losses(os.path.join(folder, m)) for m in ('shard_map', 'pmap'))
  loss_diff = max(abs(x - y) / max(abs(x), 1e-12) for (_, x), (_, y) in zip(a, b, strict=True))
  params = [final_params(os.path.join(folder, m)) for m in ('shard_map', 'pmap')]
  param_diff = max(float(np.max(np.abs(np.asarray(x) - np.asarray(y))
                                / np.maximum(np.abs(np.asarray(x)), 1e-6)))
                   for x, y in zip(*(jax.tree.leaves(p) for p in params), strict=True))
  same_steps = [s for s, _ in a] == [s for s, _ in b]
  return {'agree': same_steps and loss_diff <= rtol and param_diff <= 100 * rtol,
          'logged_steps': len(a), 'max_loss_diff': loss_diff, 'max_param_diff': param_diff,
          'seconds': seconds}


def check_decoding(workdir: str, count: int = 16, split: str = 'eval',
                   which: str = 'latest') -> dict:
  """Decodes `split`'s first sources with load_run (checkpoint `which`); they must equal the
  run's own predictions of them (the same search, the same parameters)."""
  with layout.open_text(os.path.join(workdir, layout.predictions_file(split))) as f:
    rows = [json.loads(line) for line in f][:count]
  run = runs.load_run(workdir, which)
  started = time.perf_counter()
  decoded = run.decode([r['source'] for r in rows])
  seconds = time.perf_counter() - started
  same = sum(d.output == r['hypothesis'] for d, r in zip(decoded, rows, strict=True))
  return {'agree': same == len(rows), 'same': same, 'count': len(rows), 'seconds': seconds}


def shipped_names() -> list[str]:
  """The models shipped in results/: folders with checkpoints/best (attnlab.run_report --model)."""
  results = os.path.join(ROOT, 'results')
  return [name for name in sorted(os.listdir(results))
          if os.path.isdir(layout.best_checkpoint_dir(os.path.join(results, name)))]


def shipped_models(names: list[str]) -> dict[str, dict]:
  """Each of those shipped models decoding its first test inputs on this backend, against its
  archived predictions (made on a CPU: another backend may turn a near-tie of the beam the
  other way)."""
  return {name: check_decoding(os.path.join(ROOT, 'results', name), split='test', which='best')
          for name in names}


def quick_benchmark() -> str:
  """`python -m benchmarks.run --quick`'s table (its stdout)."""
  result = subprocess.run([sys.executable, '-m', 'benchmarks.run', '--quick', '--no-memory'],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
  return result.stdout if result.returncode == 0 else f'failed:\n{result.stderr[-2000:]}'


def markdown(command: str, modes: dict, decoding: dict, shipped: dict, benchmark: str) -> str:
  devices = jax.devices()
  return '\n'.join([
    f'# attnlab device check: {default_machine_name()}',
    '',
    f'Command: `{command}` ({time.strftime("%Y-%m-%d")}); JAX {jax.__version__}, backend '
    f'{jax.default_backend()}, {len(devices)} x {devices[0].device_kind}.',
    '',
    '| check | result |',
    '|---|---|',
    f'| shard_map vs pmap, {modes["logged_steps"]} logged steps | '
    f'{"agree" if modes["agree"] else "DISAGREE"}: largest relative loss difference '
    f'{modes["max_loss_diff"]:.2e}, parameter difference {modes["max_param_diff"]:.2e} |',
    f'| training time, shard_map / pmap | {modes["seconds"]["shard_map"]:.1f} s / '
    f'{modes["seconds"]["pmap"]:.1f} s (compilation included) |',
    f'| load_run decodes the eval split as the run did | {decoding["same"]} of '
    f'{decoding["count"]} equal ({decoding["seconds"]:.2f} s) |',
    *(f'| results/{name} (shipped) decodes its test inputs as archived | {d["same"]} of '
      f'{d["count"]} equal ({d["seconds"]:.2f} s) |' for name, d in shipped.items()),
    '',
    '## benchmarks.run --quick',
    '',
    benchmark.strip(),
    '',
  ])


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--config', default='configs/g2p.py', help='path.py[:variant]')
  parser.add_argument('--steps', type=int, default=300)
  parser.add_argument('--rtol', type=float, default=1e-4,
                      help='largest relative difference of the two modes\' losses')
  parser.add_argument('--out', default=RESULTS_DIR)
  parser.add_argument('--no-benchmark', action='store_true', help='skip benchmarks.run --quick')
  parser.add_argument('--shipped', type=lambda s: s.split(','), default=None,
                      help='the shipped models of results/ to decode, comma-separated '
                           '(default: all)')
  args = parser.parse_args(argv)
  shipped_choice = shipped_names()
  unknown = sorted(set(args.shipped or ()) - set(shipped_choice))
  if unknown:  # before any training
    print(f'error: --shipped={",".join(unknown)}: no shipped model of that name in results/; '
          f'choose from {", ".join(shipped_choice)}', file=sys.stderr)
    return 2
  command = 'python -m benchmarks.device_check ' + ' '.join(argv if argv is not None
                                                             else sys.argv[1:])
  with tempfile.TemporaryDirectory() as folder:
    modes = compare_modes(args.config, args.steps, args.rtol, folder)
    decoding = check_decoding(os.path.join(folder, 'shard_map'))
  shipped = shipped_models(args.shipped or shipped_choice)
  benchmark = 'skipped (--no-benchmark)' if args.no_benchmark else quick_benchmark()
  os.makedirs(args.out, exist_ok=True)
  path = os.path.join(args.out, f'device_check_{default_machine_name()}.md')
  with open(path, 'w', encoding='utf-8') as f:
    f.write(markdown(command.strip(), modes, decoding, shipped, benchmark))
  print(path)
  return 0 if modes['agree'] and decoding['agree'] else 1


if __name__ == '__main__':
  sys.exit(main())
