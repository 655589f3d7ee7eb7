"""`python -m attnlab.evaluate --workdir=RUN --split=test`: re-evaluates a saved checkpoint.

The same metrics the run wrote in final_metrics.json, for the same checkpoint and search
settings unless flags change them, computed by the run's own evaluation
(attnlab/train/evaluation.py) and written to RUN/evaluations/, never over the run's files:

    python -m attnlab.evaluate --workdir=RUN --split=test [--checkpoint=best|latest|STEP] \\
        [--search=beam --beam_size=5 --length_penalty=0.6 --max_decode_length=N]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

import jax
import numpy as np

from attnlab import cli, data, storage
from attnlab.config.fields import ConfigError
from attnlab.config.run import SEARCH_METHODS, RunConfig
from attnlab.decoding import runs
from attnlab.errors import UserError
from attnlab.rundir import layout
from attnlab.runtime import compilation_cache, parallel
from attnlab.runtime.parallel import DataParallel
from attnlab.train.evaluation import PROGRESS_EVERY_S, Evaluator


def _parallel_for(cfg: RunConfig) -> DataParallel:
  """The run's devices (parallel.*), or the most of this machine's that divide the batch."""
  devices = jax.local_devices()
  if cfg.parallel.num_devices:
    devices = devices[:cfg.parallel.num_devices]
  count = max(n for n in range(1, len(devices) + 1) if cfg.data.global_batch_size % n == 0)
  return DataParallel(cfg.parallel.mode, devices=devices[:count])


def _settings_name(split: str, step: int, e) -> str:
  name = f'{split}_step{step:07d}_{e.search}'
  if e.search == 'beam':
    name += f'{e.beam_size}_lp{e.length_penalty:g}'
  if e.max_decode_length:
    name += f'_len{e.max_decode_length}'
  if e.max_examples:
    name += f'_first{e.max_examples}'
  return name


def evaluate_checkpoint(workdir: str, split: str = 'test', *, checkpoint: str = 'best',
                        progress_every_s: float | None = PROGRESS_EVERY_S,
                        **eval_overrides) -> tuple[dict, str]:
  """Evaluates a saved checkpoint of RUN on `split`; returns (record, output directory).

  `eval_overrides` replace eval.* keys (search, beam_size, length_penalty, max_decode_length,
  max_examples; None keeps the run's). The record, `{'step', 'checkpoint', 'note', 'settings'
  (the eval.* used), <split>: metrics}` (final_metrics.json's layout), is written to
  RUN/evaluations/<split>_step<N>_<search>/metrics.json beside that evaluation's predictions,
  samples and heatmaps; the run's own files are never touched.
  """
  run = runs.load_run(workdir, checkpoint)
  check_writable(workdir, os.path.join(workdir, layout.EVALUATIONS))
  overrides = {k: v for k, v in eval_overrides.items() if v is not None}
  try:
    eval_cfg = dataclasses.replace(run.cfg.eval, **overrides)
  except TypeError as e:
    raise ConfigError(f'unknown eval setting: {e}') from None
  eval_cfg.validate()
  cfg = dataclasses.replace(run.cfg, eval=eval_cfg)
  task = data.load_task(cfg)
  if split not in task.split_names:
    raise ConfigError(f'--split={split!r} is not valid; choose from {", ".join(task.split_names)}')
  if (task.source_vocab, task.target_vocab) != (run.source_vocab, run.target_vocab):
    raise runs.RunDirError(
        f'the data of task {cfg.task.name!r} now give other vocabularies than the ones saved in '
        f'{workdir}; the corpus changed since training, so its metrics would not be comparable')
  out_dir = os.path.join(workdir, layout.EVALUATIONS, _settings_name(split, run.step, eval_cfg))
  check_writable(workdir, out_dir, create=True)
  parallel = _parallel_for(cfg)
  evaluator = Evaluator(run.model, task, cfg, parallel, out_dir, enabled=True,
                        progress_every_s=progress_every_s)
  result = evaluator.evaluate(parallel.replicate(run.params), split, run.step)
  record = {'step': run.step, 'checkpoint': str(checkpoint), 'note': run.note,
            'settings': dataclasses.asdict(eval_cfg), split: result}
  storage.write_text(os.path.join(out_dir, 'metrics.json'),
                     json.dumps(record, indent=2, default=float))
  return record, out_dir


def check_writable(workdir: str, folder: str, *, create: bool = False) -> None:
  """Writes a file into `folder` (made first if `create`, else its nearest existing parent; a
  bucket's folder itself), so that a run directory evaluate cannot write (read-only files or
  mount, a bucket without write access) is refused before the split is decoded."""
  existing = folder
  while (not storage.is_remote(folder)  # a bucket's folders need not exist to take files
         and not os.path.exists(existing) and os.path.dirname(existing) != existing):
    existing = os.path.dirname(existing)
  try:
    if create:
      storage.make_folder(folder)
      existing = folder
    storage.probe_writable(existing)
  except OSError as e:
    raise UserError(
        f'evaluate writes its results to {folder}, which cannot be written ({e.strerror or e}); '
        f'evaluate a writable copy of the run (cp -r {workdir} COPY) or make {workdir} '
        'writable') from None


def _summary(split: str, step: int, result: dict) -> str:
  parts = [f'{split} @ step {step}']
  for key, value in result.items():
    if isinstance(value, int | float | np.number) and not isinstance(value, bool):
      parts.append(f'{key} {float(value):.4g}')
  return ' | '.join(parts)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(
      prog='python -m attnlab.evaluate',
      description='Re-evaluate a checkpoint of a trained run on a split (metrics as in '
                  'final_metrics.json), written to RUN/evaluations/.')
  parser.add_argument('--workdir', required=True, help='the run directory')
  parser.add_argument('--split', default='test', help='eval or test (default test)')
  parser.add_argument('--checkpoint', default='best', help='best (default), latest or a step')
  parser.add_argument('--search', choices=SEARCH_METHODS, help="default: the run's eval.search")
  parser.add_argument('--beam_size', type=int)
  parser.add_argument('--length_penalty', type=float, help='GNMT alpha')
  parser.add_argument('--max_decode_length', type=int, help='0 = data.max_target_length')
  parser.add_argument('--max_examples', type=int, help='first N examples (0 = all)')
  args = parser.parse_args(argv)
  parallel.cpu_device_per_core()  # before JAX starts: a batch's rows on every core
  compilation_cache.enable()
  try:
    with cli.library_warnings_only():
      record, out_dir = evaluate_checkpoint(
          args.workdir, args.split, checkpoint=args.checkpoint, search=args.search,
          beam_size=args.beam_size, length_penalty=args.length_penalty,
          max_decode_length=args.max_decode_length, max_examples=args.max_examples)
  except UserError as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  if record['note']:
    print(f"note: {record['note']}", file=sys.stderr)
  print(_summary(args.split, record['step'], record[args.split]))
  print(f"written to {os.path.join(out_dir, 'metrics.json')}")
  return 0


if __name__ == '__main__':
  sys.exit(main())
