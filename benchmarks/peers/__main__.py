"""attnlab beside OpenNMT-py and Joey NMT: training speed, decoding speed and time to quality.

    python -m benchmarks.peers            # every system, 30 CPU-minutes each -> results/peers_*
    python -m benchmarks.peers --quick    # every stage for a few steps (smoke; writes nothing)

One run measures every system (attnlab with batches of 64 words, attnlab with its token
batching, OpenNMT-py, Joey NMT) on the same machine, one after another:

1. installs the peers into their own venv (environment.py; once) and exports attnlab's CMUdict
   G2P split as their files (export.py);
2. trains each system's matched network with its own command and recipe (recipes.py) until
   it has used --cpu_budget_min CPU-minutes, noting when each checkpoint appeared
   (supervise.py) and reading its training speed from its log (logs.py);
3. decodes the dev words with every checkpoint in the budget (greedy, the system's own
   translate command) and scores them with attnlab's WER (measures.py);
4. decodes the test words with each system's best checkpoint, greedy and beam 5, timing the
   command, and on one word for its start-up.

Writes benchmarks/results/peers_<machine>.json (one record per system and measure) and .md (the
table benchmarks/README.md quotes). Run it on an otherwise idle machine: every figure is a time.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import time

import jax

from attnlab.data import load_task
from attnlab.runtime import provenance
from attnlab.runtime.machine import cpu_model_name, machine_name
from benchmarks import measure
from benchmarks.peers import (
  environment,
  export,
  logs,
  measures,
  recipes,
  report,
  supervise,
  systems,
)
from configs import g2p

RESULTS_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), 'results')
FULL = {'plan': recipes.Plan(max_steps=24_000, every=1000, log_every=100), 'limits': None}
# A few steps of every stage on a slice of the data: the pipeline end to end in minutes.
QUICK = {
  'plan': recipes.Plan(max_steps=20, every=10, log_every=5, eval_words=50),
  'limits': {'train': 3000, 'eval': 50, 'test': 50},
}
ONE = 'one'  # the file prefix of the first test word alone: each command's start-up


def _parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog='python -m benchmarks.peers', description=__doc__.split('\n')[0])
  p.add_argument('--quick', action='store_true', help='every stage for a few steps (smoke)')
  p.add_argument(
    '--systems',
    default=','.join(systems.SYSTEM_NAMES),
    help='comma-separated, from ' + ', '.join(systems.SYSTEM_NAMES),
  )
  p.add_argument(
    '--cpu_budget_min',
    type=float,
    default=30.0,
    help='CPU-minutes each system may train (default 30)',
  )
  p.add_argument(
    '--threshold',
    type=float,
    default=None,
    help='dev WER %% for time to quality (default: the loosest best)',
  )
  p.add_argument('--venv', default=environment.DEFAULT_VENV, help="the peers' venv")
  p.add_argument('--runs', default='', help='work folder (default runs/peers[-quick])')
  p.add_argument(
    '--out',
    default='',
    help='results folder (default benchmarks/results; --quick: none unless given)',
  )
  p.add_argument('--machine', default='', help='results file name (default: the CPU kind)')
  return p


def _decode(system, step: int, data: str, name: str, output: str, beam: int) -> float:
  """Seconds of the system's translate command on the exported split `name`."""
  source = export.path(data, name, system.input_kind)
  cmd = system.translate_command(step, source, output, beam)
  started = time.perf_counter()
  done = subprocess.run(cmd, cwd=systems.REPO, env=system.env, capture_output=True, text=True)
  seconds = time.perf_counter() - started
  if done.returncode:
    raise environment.PeersError(
      f'{system.name} could not translate {source} (exit {done.returncode}): '
      f'{done.stderr.strip()[-1500:]}'
    )
  return seconds


def _train(system, cpu_budget_s: float) -> supervise.Supervised:
  shutil.rmtree(system.run, ignore_errors=True)
  system.prepare()
  log = os.path.join(system.run, systems.TRAIN_LOG)
  done = supervise.run(
    system.train_command(),
    log_path=log,
    cpu_budget_s=cpu_budget_s,
    checkpoint_steps=system.checkpoint_steps,
    cwd=systems.REPO,
    env=system.env,
  )
  if done.returncode and not done.over_budget:
    raise environment.PeersError(f'{system.name} training failed (exit {done.returncode}): {log}')
  return done


def _dev_curve(system, trained: supervise.Supervised, data: str, budget_s: float):
  refs = export.references(data, 'dev')
  points = []
  for step, stamp in sorted(trained.checkpoints.items()):
    if stamp.cpu_s > budget_s or step not in system.checkpoint_steps():
      continue
    output = os.path.join(system.run, f'dev_{step}.out')
    _decode(system, step, data, 'dev', output, beam=1)
    wer = measures.wer_percent(export.read_lines(output), refs)
    points.append(measures.Point(step, stamp.wall_s, stamp.cpu_s, wer))
  return points


def _test_decodes(system, step: int, data: str, words: int) -> dict[str, dict]:
  refs = export.references(data, 'test')
  decodes = {}
  for search, beam in measures.SEARCHES.items():
    start_s = _decode(system, step, data, ONE, os.path.join(system.run, 'one.out'), beam)
    output = os.path.join(system.run, f'test_{search}.out')
    command_s = _decode(system, step, data, 'test', output, beam)
    decodes[search] = {
      'words_per_s': measures.words_per_s(words, command_s, start_s),
      'command_s': command_s,
      'test_wer': measures.wer_percent(export.read_lines(output), refs),
    }
  return decodes


def _export(folder: str, limits) -> dict[str, int]:
  counts = export.export(load_task(g2p.get_config()), folder, limits)
  for kind in (export.SOURCE, export.WORDS, export.REFERENCES):
    first = export.read_lines(export.path(folder, 'test', kind))[0]
    with open(export.path(folder, ONE, kind), 'w', encoding='utf-8') as f:
      f.write(first + '\n')
  return counts


def main(argv=None) -> dict:
  parser = _parser()
  args = parser.parse_args(argv)
  names = [n for n in args.systems.split(',') if n]
  unknown = sorted(set(names) - set(systems.SYSTEM_NAMES))
  if unknown or not names:
    parser.error(f'unknown systems {unknown}; choose from {", ".join(systems.SYSTEM_NAMES)}')
  if args.cpu_budget_min <= 0:
    parser.error(f'--cpu_budget_min must be positive, got {args.cpu_budget_min:g}')
  settings = QUICK if args.quick else FULL
  plan, budget_s = settings['plan'], 60 * args.cpu_budget_min
  runs = args.runs or os.path.join(systems.REPO, 'runs', 'peers-quick' if args.quick else 'peers')
  machine = args.machine or machine_name()
  started = time.perf_counter()
  load_at_start = measure.load_average()
  peer_versions = {}
  if any(n in report.PEERS for n in names):
    peer_versions = environment.install(args.venv)
  data = os.path.join(runs, 'data')
  counts = _export(data, settings['limits'])
  print(f'data: {counts} in {data}', flush=True)

  chosen = [systems.build(n, args.venv, data, runs, plan) for n in names]
  trained, curves = {}, {}
  for system in chosen:
    print(f'{system.name}: training (budget {args.cpu_budget_min:g} CPU-min)', flush=True)
    trained[system.name] = _train(system, budget_s)
  for system in chosen:
    print(f'{system.name}: dev WER of each checkpoint', flush=True)
    curves[system.name] = _dev_curve(system, trained[system.name], data, budget_s)
  threshold = args.threshold
  if threshold is None:
    threshold = measures.shared_threshold(curves)
  records = []
  for system in chosen:
    points = curves[system.name]
    top = measures.best(points)
    decodes = _test_decodes(system, top.step, data, counts['test']) if top else {}
    records += measures.system_records(
      system.name,
      machine,
      points=points,
      threshold=threshold,
      speed=logs.steady_rate(system.speed_windows()),
      decodes=decodes,
    )
    print(report.row_line(system.name, records), flush=True)

  result = {
    'command': 'python -m benchmarks.peers'
    + (' --quick' if args.quick else '')
    + (f' --systems={args.systems}' if args.systems != parser.get_default('systems') else '')
    + (f' --cpu_budget_min={args.cpu_budget_min:g}' if args.cpu_budget_min != 30 else ''),
    'machine': machine,
    'cpu': cpu_model_name(),
    'cpu_count': os.cpu_count(),
    'quick': args.quick,
    'versions': {
      'jax': jax.__version__,
      'attnlab': provenance.git_state(),
      **{k: None for k in ('torch', 'OpenNMT-py', 'joeynmt')},
      **peer_versions,
    },
    'peer_pins': [environment.TORCH, *environment.TOOLKITS, *environment.IMPORTED],
    'load_at_start': load_at_start,
    'load_at_end': measure.load_average(),
    'cpu_budget_s': budget_s,
    'every': plan.every,
    'max_steps': plan.max_steps,
    'threshold_wer': threshold,
    'threshold_from': '--threshold' if args.threshold is not None else 'the loosest best',
    'data': counts,
    'training': {
      s.name: {
        'windows': s.speed_windows(),
        **{k: v for k, v in dataclasses.asdict(trained[s.name]).items() if k != 'checkpoints'},
      }
      for s in chosen
    },
    'curves': {n: [dataclasses.asdict(p) for p in ps] for n, ps in curves.items()},
    'records': records,
    'wall_s': round(time.perf_counter() - started, 1),
  }
  text = report.markdown(result)
  print(text)
  out = args.out or ('' if args.quick else RESULTS_DIR)
  if out:
    stem = os.path.join(out, f'peers_{machine}')
    measure.write_result(stem, result, text)
    print(f'wrote {stem}.json and {stem}.md')
  return result


if __name__ == '__main__':
  try:
    main()
  except environment.PeersError as e:
    sys.exit(f'error: {e}')
