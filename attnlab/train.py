"""`train_and_evaluate(config, workdir)`: set-up, then one flat training loop.

Cadences: training metrics every `train.log_every` steps, evaluation (with decoding, samples
and attention heatmaps) every `train.eval_every`, checkpoints every `train.checkpoint_every`;
the last step always evaluates (eval splits and test) and checkpoints. Rerunning the same
command resumes from the latest checkpoint with the same data order. Only process 0 writes
files other than checkpoints.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import os
import time
from typing import Any

import jax
import ml_collections
import numpy as np

from attnlab import checkpoint, data, metrics, optim, steps, writers
from attnlab import config as config_lib
from attnlab.evaluate import Evaluator
from attnlab.models.factory import build_model
from attnlab.parallel import DataParallel

# One line per finished process run: {first_step, last_step, wall_s, finished_at}; a resumed
# run adds a line (attnlab.run_report sums wall_s).
RUN_TIMES = 'run_times.jsonl'


class NonFiniteLossError(FloatingPointError):
  """Training produced a NaN/inf loss; the last good checkpoint is left untouched."""


def init_state(model, tx, cfg: config_lib.RunConfig) -> steps.TrainState:
  src = np.ones((1, cfg.data.max_source_length), np.int32)
  tgt = np.ones((1, cfg.data.max_target_length), np.int32)
  init = jax.jit(lambda key: model.init(key, src, tgt, train=False)['params'])
  params = jax.device_get(init(jax.random.key(cfg.seed)))
  return steps.TrainState.create(apply_fn=model.apply, params=params, tx=tx)


def final_splits(cfg: config_lib.RunConfig) -> tuple[str, ...]:
  return tuple(dict.fromkeys(cfg.eval.splits + ('test',)))


def _devices(num_devices: int):
  """`parallel.num_devices`: None (all devices) or the first N local devices."""
  if not num_devices:
    return None
  if jax.process_count() > 1:
    raise config_lib.ConfigError('parallel.num_devices must be 0 (all) in multi-process runs')
  if num_devices > jax.local_device_count():
    raise config_lib.ConfigError(f'parallel.num_devices={num_devices} but this process has '
                                 f'{jax.local_device_count()} devices')
  return jax.local_devices()[:num_devices]


@dataclasses.dataclass
class Run:
  """Everything the loop needs, built once by `setup`."""

  cfg: config_lib.RunConfig
  config_dict: dict
  workdir: str
  parallel: DataParallel
  ckpt: checkpoint.Checkpointer
  evaluator: Evaluator
  writer: writers.MetricWriter
  progress: writers.ProgressLine
  schedule: Any
  num_params: int
  is_writer: bool


def setup(config: ml_collections.ConfigDict, workdir: str):
  """Validates the config, builds task/model/state and restores the latest checkpoint."""
  cfg = config_lib.parse(config)  # every key and value checked before anything compiles
  parallel = DataParallel(cfg.parallel.mode, devices=_devices(cfg.parallel.num_devices))
  parallel.check_batch_size(cfg.data.global_batch_size)
  is_writer = jax.process_index() == 0
  os.makedirs(workdir, exist_ok=True)
  task = data.load_task(cfg)
  if is_writer:
    with open(os.path.join(workdir, 'config.json'), 'w') as f:
      f.write(config.to_json_best_effort(indent=2, sort_keys=True))
    task.source_vocab.save(os.path.join(workdir, 'source_vocab.json'))
    task.target_vocab.save(os.path.join(workdir, 'target_vocab.json'))
  model = build_model(cfg.model, task.source_vocab.size, task.target_vocab.size)
  tx, schedule = optim.make_optimizer(cfg.optim, cfg.train.num_steps)
  state = init_state(model, tx, cfg)
  ckpt = checkpoint.Checkpointer(os.path.join(workdir, 'checkpoints'),
                                 keep=cfg.train.keep_checkpoints)
  start = 0
  restored = ckpt.restore_or_none(target_state=state)
  if restored is not None:
    state, data_state, start = restored
    logging.info('resumed from step %d (data position %s)', start, data_state)
  batches = data.train_batches(task, cfg, start_step=start)
  num_params = steps.count_params(state.params)
  logging.info('%s model: %d parameters; %d devices; %d train pairs dropped by the length '
               'filter', cfg.model.kind, num_params, parallel.num_devices, batches.num_filtered)
  run = Run(cfg=cfg, config_dict=config.to_dict(), workdir=workdir, parallel=parallel,
            ckpt=ckpt, evaluator=Evaluator(model, task, cfg, parallel, workdir,
                                           enabled=is_writer),
            writer=writers.MetricWriter(workdir, enabled=is_writer),
            progress=writers.ProgressLine(cfg.train.num_steps, start_step=start,
                                          enabled=is_writer),
            schedule=schedule, num_params=num_params, is_writer=is_writer)
  return run, state, batches, start


def train_loop(run: Run, state: steps.TrainState, batches, start: int) -> dict:
  """Trains from step `start` to `train.num_steps`; returns the last evaluation's metrics."""
  cfg, parallel, ckpt = run.cfg, run.parallel, run.ckpt
  train_step = parallel.compile_train_step(
      lambda s, b, k, axis_name: steps.train_step(
          s, b, k, axis_name=axis_name, label_smoothing=cfg.train.label_smoothing))
  p_state = parallel.replicate(state)
  dropout_key = jax.random.fold_in(jax.random.key(cfg.seed), 1)
  last_good = ckpt.latest_step()
  window, window_start, log_due, final = [], time.perf_counter(), None, {}

  def flush_window(step: int) -> None:
    """Fetches the window's sums (the loop's only host sync), checks, writes one event."""
    nonlocal window, window_start
    sums = parallel.fetch_sums(window)
    elapsed = time.perf_counter() - window_start
    window, window_start = [], time.perf_counter()
    if not np.isfinite(sums['loss_sum']):
      raise NonFiniteLossError(
          f'non-finite training loss in steps up to {step}; the last good checkpoint (step '
          f'{last_good}) in {ckpt.directory} is kept; lower optim.learning_rate or set '
          'optim.clip_norm')
    scalars = metrics.summarize(sums)
    scalars.update(learning_rate=float(run.schedule(step)), steps_per_sec=sums['steps'] / elapsed,
                   tokens_per_sec=sums['token_count'] / elapsed)
    run.writer.write(step, 'train', scalars)
    run.progress.update(step, scalars)

  def evaluate(step: int, splits) -> None:
    for split in splits:
      final[split] = run.evaluator.evaluate(p_state.params, split, step)
      run.writer.write(step, split, final[split])
      run.progress.report(step, split, final[split])

  for step in range(start + 1, cfg.train.num_steps + 1):
    p_state, sums = train_step(p_state, parallel.shard_batch(next(batches)), dropout_key)
    if log_due is not None:  # fetched only after the next step was dispatched
      flush_window(log_due)
      log_due = None
    window.append(sums)
    is_last = step == cfg.train.num_steps
    save = step % cfg.train.checkpoint_every == 0 or is_last
    evaluate_now = step % cfg.train.eval_every == 0 or is_last
    if save or evaluate_now:
      flush_window(step)  # never checkpoint or evaluate a non-finite state
      if save:
        ckpt.save(step, parallel.fetch(p_state), {'step': step}, run.config_dict)
        last_good = step
      if evaluate_now:
        evaluate(step, final_splits(cfg) if is_last else cfg.eval.splits)
    elif step % cfg.train.log_every == 0:
      log_due = step
  if not final:  # a finished run was rerun: evaluate its final state again
    evaluate(cfg.train.num_steps, final_splits(cfg))
  return final


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Trains `config` in `workdir` (resuming if it holds a checkpoint); returns final metrics."""
  started = time.perf_counter()
  run, state, batches, start = setup(config, workdir)
  try:
    final = train_loop(run, state, batches, start)
  finally:  # on errors too: finish pending checkpoint writes, so no good state is lost
    run.ckpt.close()
    run.writer.close()
  if run.is_writer:
    with open(os.path.join(workdir, 'final_metrics.json'), 'w') as f:
      json.dump({'step': run.cfg.train.num_steps, 'num_params': run.num_params, **final}, f,
                indent=2, default=float)
    run.progress.finish(workdir)
    with open(os.path.join(workdir, RUN_TIMES), 'a') as f:
      f.write(json.dumps({'first_step': start, 'last_step': run.cfg.train.num_steps,
                          'wall_s': time.perf_counter() - started,
                          'finished_at': datetime.datetime.now().astimezone().isoformat()}) + '\n')
  return final
