"""attnlab beside OpenNMT-py and Joey NMT: training speed, decoding speed and time to quality.

    python -m benchmarks.peers                # G2P, every system, 30 CPU-minutes each
    python -m benchmarks.peers --task=bible   # Bible Spanish -> English, the same
    python -m benchmarks.peers --quick        # every stage for a few steps (smoke; writes nothing)

One run measures every system (attnlab with batches of 64 sources, attnlab with its token
batching in float32 and with bfloat16 matmuls, OpenNMT-py, Joey NMT) on one task (tasks.py) on
the same machine, one after another:

1. installs the peers into their own venv (environment.py; once) and exports attnlab's split of
   the task as their files (export.py);
2. trains each system's matched network with its own command and recipe (recipes.py) until
   it has used --cpu_budget_min CPU-minutes, noting when each checkpoint appeared
   (supervise.py) and reading its training speed from its log (logs.py);
3. decodes the dev split with every checkpoint in the budget (greedy, the system's own
   translate command) and scores it with the task's metric (measures.py);
4. decodes the test split with each system's best checkpoint, greedy and beam 5, timing the
   command on the test sources `decode_repeats` times over (tasks.py: long enough to time)
   and on one source for its start-up; the first pass is scored.

Writes benchmarks/results/peers_<task>_<machine>.json (one record per system and measure) and
.md (the table benchmarks/README.md quotes); a run of some of the systems, or with another
budget, writes under a name of its own (`results_name`). Run it on an otherwise idle machine:
every figure is a time.
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
  tasks,
)

RESULTS_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), 'results')
DEFAULT_BUDGET_MIN = 30.0  # CPU-minutes of training a system
FULL = {'max_steps': 24_000, 'log_every': 100, 'limits': None}  # checkpoints: the task's `every`
# A few steps of every stage on a slice of the data: the pipeline end to end in minutes.
QUICK = {
  'plan': recipes.Plan(max_steps=20, every=10, log_every=5, eval_sources=50),
  'limits': {'train': 3000, 'eval': 50, 'test': 50},
}
ONE = 'one'  # the file prefix of the first test source alone: each command's start-up
TIMED = 'timed'  # the test sources task.decode_repeats times over: the decoding that is timed


def _parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog='python -m benchmarks.peers', description=__doc__.split('\n')[0])
  p.add_argument('--task', default='g2p', help='the task: ' + ', '.join(tasks.TASKS))
  p.add_argument('--quick', action='store_true', help='every stage for a few steps (smoke)')
  p.add_argument(
    '--systems',
    default=','.join(systems.SYSTEM_NAMES),
    help='comma-separated, from ' + ', '.join(systems.SYSTEM_NAMES),
  )
  p.add_argument(
    '--cpu_budget_min',
    type=float,
    default=DEFAULT_BUDGET_MIN,
    help=f'CPU-minutes each system may train (default {DEFAULT_BUDGET_MIN:g})',
  )
  p.add_argument(
    '--threshold',
    type=float,
    default=None,
    help="the dev score (WER %% or BLEU) for time to quality (default: the loosest best)",
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


def _score(system, output: str, data: str, name: str) -> float:
  """The task's metric of the system's output file on the exported split `name`."""
  task = system.task
  text = task.text(export.read_lines(output), pieces=system.input_kind == export.SOURCE)
  return task.score(text, export.read_lines(export.path(data, name, export.REFERENCES)))


def _dev_curve(system, trained: supervise.Supervised, data: str, budget_s: float):
  points = []
  for step, stamp in sorted(trained.checkpoints.items()):
    if stamp.cpu_s > budget_s or step not in system.checkpoint_steps():
      continue
    output = os.path.join(system.run, f'dev_{step}.out')
    _decode(system, step, data, 'dev', output, beam=1)
    score = _score(system, output, data, 'dev')
    points.append(measures.Point(step, stamp.wall_s, stamp.cpu_s, score))
  return points


def _test_decodes(system, step: int, data: str, inputs: int) -> dict[str, dict]:
  decodes = {}
  for search, beam in measures.SEARCHES.items():
    start_s = _decode(system, step, data, ONE, os.path.join(system.run, 'one.out'), beam)
    output = os.path.join(system.run, f'test_{search}.out')
    command_s = _decode(system, step, data, TIMED, output, beam)
    # The first pass over the test sources is scored as the test split's output.
    lines = export.read_lines(output)
    with open(output, 'w', encoding='utf-8') as f:
      f.write(''.join(line + '\n' for line in lines[:inputs]))
    decodes[search] = {
      'inputs_per_s': measures.inputs_per_s(inputs * system.task.decode_repeats, command_s,
                                            start_s),
      'command_s': command_s,
      'test_score': _score(system, output, data, 'test'),
    }
  return decodes


def _export(task, folder: str, limits) -> dict[str, int]:
  counts = export.export(task, folder, limits)
  for kind in (export.SOURCE, export.INPUT, export.REFERENCES):
    test = export.read_lines(export.path(folder, 'test', kind))
    for name, lines in ((ONE, test[:1]), (TIMED, test * task.decode_repeats)):
      with open(export.path(folder, name, kind), 'w', encoding='utf-8') as f:
        f.write(''.join(line + '\n' for line in lines))
  return counts


def results_name(task: str, machine: str, names: list[str], budget_min: float) -> str:
  """peers_<task>_<machine>, the whole comparison; a run of some systems or another budget
  gets its own name (+systems, -<N>cpumin), so it never replaces the whole comparison."""
  name = f'peers_{task}_{machine}'
  if sorted(names) != sorted(systems.SYSTEM_NAMES):
    name += '+' + '+'.join(names)
  if budget_min != DEFAULT_BUDGET_MIN:
    name += f'-{budget_min:g}cpumin'
  return name


def main(argv=None) -> dict:
  parser = _parser()
  args = parser.parse_args(argv)
  names = [n for n in args.systems.split(',') if n]
  unknown = sorted(set(names) - set(systems.SYSTEM_NAMES))
  if unknown or not names:
    parser.error(f'unknown systems {unknown}; choose from {", ".join(systems.SYSTEM_NAMES)}')
  if args.task not in tasks.TASKS:
    parser.error(f'unknown --task {args.task!r}; choose from {", ".join(tasks.TASKS)}')
  if args.cpu_budget_min <= 0:
    parser.error(f'--cpu_budget_min must be positive, got {args.cpu_budget_min:g}')
  task = tasks.TASKS[args.task]
  settings = QUICK if args.quick else FULL
  plan = settings.get('plan') or recipes.Plan(
    max_steps=settings['max_steps'], every=task.every, log_every=settings['log_every'])
  budget_s = 60 * args.cpu_budget_min
  folder = f'peers-{task.name}' + ('-quick' if args.quick else '')
  runs = args.runs or os.path.join(systems.REPO, 'runs', folder)
  machine = args.machine or machine_name()
  started = time.perf_counter()
  load_at_start = measure.load_average()
  peer_versions = {}
  if any(n in report.PEERS for n in names):
    peer_versions = environment.install(args.venv)
  data = os.path.join(runs, 'data')
  counts = _export(task, data, settings['limits'])
  print(f'data: {counts} in {data}', flush=True)

  chosen = [systems.build(n, task, args.venv, data, runs, plan) for n in names]
  trained, curves = {}, {}
  for system in chosen:
    print(f'{system.name}: training (budget {args.cpu_budget_min:g} CPU-min)', flush=True)
    trained[system.name] = _train(system, budget_s)
  for system in chosen:
    print(f'{system.name}: dev {task.metric_label} of each checkpoint', flush=True)
    curves[system.name] = _dev_curve(system, trained[system.name], data, budget_s)
  threshold = args.threshold
  if threshold is None:
    threshold = measures.shared_threshold(task, curves)
  records = []
  for system in chosen:
    points = curves[system.name]
    top = measures.best(task, points)
    decodes = _test_decodes(system, top.step, data, counts['test']) if top else {}
    records += measures.system_records(
      task,
      system.name,
      machine,
      points=points,
      threshold=threshold,
      speed=logs.steady_rate(system.speed_windows()),
      decodes=decodes,
    )
    print(report.row_line(task, system.name, records), flush=True)

  result = {
    'command': 'python -m benchmarks.peers'
    + (f' --task={task.name}' if task.name != parser.get_default('task') else '')
    + (' --quick' if args.quick else '')
    + (f' --systems={args.systems}' if args.systems != parser.get_default('systems') else '')
    + (f' --cpu_budget_min={args.cpu_budget_min:g}'
       if args.cpu_budget_min != DEFAULT_BUDGET_MIN else ''),
    'task': task.name,
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
    'threshold': threshold,
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
  text = report.markdown(task, result)
  print(text)
  out = args.out or ('' if args.quick else RESULTS_DIR)
  if out:
    stem = os.path.join(out, results_name(task.name, machine, names, args.cpu_budget_min))
    measure.write_result(stem, result, text)
    print(f'wrote {stem}.json and {stem}.md')
  return result


if __name__ == '__main__':
  try:
    main()
  except environment.PeersError as e:
    sys.exit(f'error: {e}')
