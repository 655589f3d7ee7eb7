"""Decoding throughput of a trained G2P run through `attnlab.decode`: words per second.

    python -m benchmarks.decode_speed                     # trains configs/g2p.py briefly first
    python -m benchmarks.decode_speed --workdir=runs/g2p  # or decodes with a run you trained

Decodes the 6,175 CMUdict test words (one per line, as a user's file would hold them) with the
run's model, greedy and beam 5, through the same `Decoder` the command line uses: inputs are
bucketed by length and each padded shape is compiled once. Each setting decodes the whole list
twice: the first pass includes compilation, the second is the steady state (words/s);
`compile_s` is their difference and `compilations` the number of traced shapes. The whole
command (`python -m attnlab.decode --input=words.txt`, start-up and compilation included) is
timed once per setting too. --workdir takes a run with a checkpoint (a shipped one keeps only
its best: results/g2p); without --workdir a default-size G2P model (configs/g2p.py) is trained
for --train_steps steps into runs/bench-g2p (reused when it exists):
throughput depends on output lengths, so the model must have learnt where words end.

Writes benchmarks/results/decode_<machine>.json and .md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import jax

from attnlab.data import load_task
from attnlab.decoding import runs
from attnlab.rundir import layout
from attnlab.runtime import parallel
from attnlab.runtime.machine import cpu_model_name, default_machine_name
from benchmarks import measure

RESULTS_DIR = os.path.join(os.path.dirname(__file__), 'results')
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_WORKDIR = os.path.join(REPO, 'runs', 'bench-g2p')  # trained here when it has no checkpoint
SETTINGS = (('greedy', {'search': 'greedy'}), ('beam5', {'search': 'beam', 'beam_size': 5}))


def train_run(workdir: str, steps: int) -> None:
  """A default-size G2P model trained for `steps` steps (evaluated on 64 words only)."""
  subprocess.run([sys.executable, '-m', 'attnlab.main', '--config=configs/g2p.py',
                  f'--workdir={workdir}', f'--config.train.num_steps={steps}',
                  f'--config.train.eval_every={steps}', f'--config.train.checkpoint_every={steps}',
                  '--config.eval.max_examples=64'], cwd=REPO, check=True)


def time_decoder(run, words: list[str], settings: dict) -> dict:
  decoder = run.decoder(**settings)
  cold_s, _ = measure.timed(lambda: decoder.decode(words))
  warm_s, results = measure.timed(lambda: decoder.decode(words))
  lengths = [len(r.hypotheses[0].ids) for r in results if r.hypotheses]
  return {'words': len(words), 'words_per_s': round(len(words) / warm_s, 1),
          'steady_s': round(warm_s, 2), 'compile_s': round(cold_s - warm_s, 2),
          'compilations': decoder.compilations['search'], 'batch_size': decoder.batch_size,
          'mean_output_tokens': round(sum(lengths) / max(len(lengths), 1), 2),
          'load': measure.load_average()}


def time_command(workdir: str, words_file: str, settings: dict) -> float:
  flags = [f'--{k}={v}' for k, v in settings.items()]
  start = time.perf_counter()
  subprocess.run([sys.executable, '-m', 'attnlab.decode', f'--workdir={workdir}',
                  f'--input={words_file}', f'--output={os.devnull}', *flags], cwd=REPO,
                 check=True, stderr=subprocess.DEVNULL)
  return time.perf_counter() - start


def markdown(result: dict) -> str:
  lines = [f"# Decoding speed: {result['machine']}\n",
           f"`{result['command']}` on {result['cpu']} ({result['devices']}); model "
           f"{result['workdir']} at step {result['step']}, {result['words']} G2P test words.\n",
           '| search | words/s (steady) | compile s | compilations | whole command s '
           '(words/s) | mean output tokens | load |', '|---|---:|---:|---:|---:|---:|---:|']
  for name, row in result['rows'].items():
    lines.append(f"| {name} | {row['words_per_s']:,.0f} | {row['compile_s']} | "
                 f"{row['compilations']} | {row['command_s']:.1f} "
                 f"({row['words'] / row['command_s']:,.0f}) | {row['mean_output_tokens']} | "
                 f"{row['load']} |")
  return '\n'.join(lines) + '\n'


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(prog='python -m benchmarks.decode_speed')
  parser.add_argument('--workdir', default=DEFAULT_WORKDIR)
  parser.add_argument('--train_steps', type=int, default=400)
  parser.add_argument('--checkpoint', default='best')
  parser.add_argument('--out', default=RESULTS_DIR)
  parser.add_argument('--machine', default='', help='results file name (default: the '
                      'accelerator JAX uses, else the CPU kind)')
  args = parser.parse_args(argv)
  if not (layout.saved_steps(args.workdir) or layout.saved_steps(args.workdir, best=True)):
    if os.path.abspath(args.workdir) != DEFAULT_WORKDIR:  # a user's run is never trained into
      print(f'error: --workdir={args.workdir} holds no checkpoint to decode with; leave '
            '--workdir out to train a benchmark model into runs/bench-g2p', file=sys.stderr)
      raise SystemExit(2)
    train_run(args.workdir, args.train_steps)
  parallel.cpu_device_per_core()  # as attnlab.decode does, before JAX starts (not in training)
  run = runs.load_run(args.workdir, args.checkpoint)
  words = [example['source'] for example in load_task(run.cfg).split('test')]
  with tempfile.TemporaryDirectory() as tmp:
    words_file = os.path.join(tmp, 'words.txt')
    with open(words_file, 'w', encoding='utf-8') as f:
      f.write(''.join(w + '\n' for w in words))
    rows = {}
    for name, settings in SETTINGS:
      rows[name] = time_decoder(run, words, settings)
      rows[name]['command_s'] = round(time_command(args.workdir, words_file, settings), 2)
      print(name, rows[name], flush=True)
  machine = args.machine or default_machine_name()
  result = {'machine': machine, 'cpu': f'{cpu_model_name()}, {os.cpu_count()} cores',
            'devices': f'{jax.device_count()} {jax.default_backend()} device(s)',
            'command': 'python -m benchmarks.decode_speed',
            'workdir': os.path.relpath(args.workdir, REPO),
            'step': run.step, 'words': len(words), 'rows': rows}
  measure.write_result(os.path.join(args.out, f'decode_{machine}'), result, markdown(result))
  print(markdown(result))
  return result


if __name__ == '__main__':
  main()
