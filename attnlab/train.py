"""`train_and_evaluate(config, workdir)`: set-up, then one flat training loop.

Cadences: training metrics every `train.log_every` steps, evaluation (with decoding, samples
and attention heatmaps) every `train.eval_every`, checkpoints every `train.checkpoint_every`;
the last step always evaluates and checkpoints. Rerunning the same command resumes from the
latest checkpoint with the same data order. Only process 0 writes files other than checkpoints.
"""

from __future__ import annotations

import json
import logging
import os
import time

import jax
import ml_collections
import numpy as np

from attnlab import checkpoint, data, metrics, optim, steps, writers
from attnlab import config as config_lib
from attnlab.evaluate import Evaluator
from attnlab.models.factory import build_model
from attnlab.parallel import DataParallel


class NonFiniteLossError(FloatingPointError):
  """Training produced a NaN/inf loss; the last good checkpoint is left untouched."""


def init_state(model, tx, cfg: config_lib.RunConfig) -> steps.TrainState:
  src = np.ones((1, cfg.data.max_source_length), np.int32)
  tgt = np.ones((1, cfg.data.max_target_length), np.int32)
  init = jax.jit(lambda key: model.init(key, src, tgt, train=False)['params'])
  params = jax.device_get(init(jax.random.key(cfg.seed)))
  return steps.TrainState.create(apply_fn=model.apply, params=params, tx=tx)


def _write_run_files(workdir: str, config: ml_collections.ConfigDict, task) -> None:
  with open(os.path.join(workdir, 'config.json'), 'w') as f:
    f.write(config.to_json_best_effort(indent=2, sort_keys=True))
  task.source_vocab.save(os.path.join(workdir, 'source_vocab.json'))
  task.target_vocab.save(os.path.join(workdir, 'target_vocab.json'))


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Trains `config` in `workdir` (resuming if it holds a checkpoint); returns final metrics."""
  cfg = config_lib.parse(config)  # every key and value checked before anything compiles
  parallel = DataParallel(cfg.parallel.mode)
  parallel.check_batch_size(cfg.data.global_batch_size)
  is_writer = jax.process_index() == 0
  os.makedirs(workdir, exist_ok=True)
  task = data.load_task(cfg)
  if is_writer:
    _write_run_files(workdir, config, task)
  model = build_model(cfg.model, task.source_vocab.size, task.target_vocab.size)
  tx, schedule = optim.make_optimizer(cfg.optim, cfg.train.num_steps)
  state = init_state(model, tx, cfg)
  num_params = steps.count_params(state.params)
  ckpt = checkpoint.Checkpointer(os.path.join(workdir, 'checkpoints'),
                                 keep=cfg.train.keep_checkpoints)
  restored = ckpt.restore_or_none(target_state=state)
  start = 0
  if restored is not None:
    state, data_state, start = restored
    logging.info('resumed from step %d (data position %s)', start, data_state)
  train_batches = data.train_batches(task, cfg, start_step=start)
  logging.info('%s: %d parameters, %d devices; %d train pairs dropped by the length filter',
               cfg.model.kind, num_params, parallel.num_devices, train_batches.num_filtered)

  p_state = parallel.replicate(state)
  p_train_step = parallel.compile_train_step(
      lambda s, b, k, axis_name: steps.train_step(
          s, b, k, axis_name=axis_name, label_smoothing=cfg.train.label_smoothing))
  evaluator = Evaluator(model, task, cfg, parallel, workdir, enabled=is_writer)
  writer = writers.MetricWriter(workdir, enabled=is_writer)
  progress = writers.ProgressLine(cfg.train.num_steps, start_step=start, enabled=is_writer)
  dropout_key = jax.random.fold_in(jax.random.key(cfg.seed), 1)
  last_good = ckpt.latest_step()
  window, window_start, log_due, final = [], time.perf_counter(), None, {}

  def flush_window(step: int) -> dict:
    """Fetches the window's sums (the only host sync), checks them, writes one event."""
    nonlocal window, window_start
    sums = parallel.fetch_sums(window)
    elapsed = time.perf_counter() - window_start
    window, window_start = [], time.perf_counter()
    if not np.isfinite(sums['loss_sum']):
      raise NonFiniteLossError(
          f'non-finite training loss in steps up to {step}; the last good checkpoint '
          f'(step {last_good}) in {ckpt.directory} is kept; lower optim.learning_rate or set '
          'optim.clip_norm')
    scalars = metrics.summarize(sums)
    scalars['learning_rate'] = float(schedule(step))
    scalars['tokens_per_sec'] = sums['token_count'] / elapsed
    scalars['steps_per_sec'] = sums['steps'] / elapsed
    writer.write(step, 'train', scalars)
    progress.update(step, scalars)
    return scalars

  for step in range(start + 1, cfg.train.num_steps + 1):
    batch = parallel.shard_batch(next(train_batches))
    p_state, sums = p_train_step(p_state, batch, dropout_key)
    if log_due is not None:  # fetched after the next step was dispatched
      flush_window(log_due)
      log_due = None
    window.append(sums)
    is_last = step == cfg.train.num_steps
    if step % cfg.train.log_every == 0 and not is_last:
      log_due = step
    if step % cfg.train.checkpoint_every == 0 or step % cfg.train.eval_every == 0 or is_last:
      if window:
        flush_window(step)  # never checkpoint or evaluate a non-finite state
      log_due = None
      if step % cfg.train.checkpoint_every == 0 or is_last:
        ckpt.save(step, parallel.fetch(p_state), {'step': step}, config.to_dict())
        last_good = step
      if step % cfg.train.eval_every == 0 or is_last:
        splits = cfg.eval.splits + (('test',) if is_last and 'test' not in cfg.eval.splits
                                    else ())
        for split in splits:
          final[split] = evaluator.evaluate(p_state.params, split, step)
          writer.write(step, split, final[split])
          progress.report(step, split, final[split])
  if not final:  # resumed a finished run: evaluate its final state again
    for split in cfg.eval.splits + ('test',):
      final[split] = evaluator.evaluate(p_state.params, split, cfg.train.num_steps)
  ckpt.wait()
  ckpt.close()
  writer.close()
  if is_writer:
    final_path = os.path.join(workdir, 'final_metrics.json')
    with open(final_path, 'w') as f:
      json.dump({'step': cfg.train.num_steps, 'num_params': num_params, **final}, f, indent=2,
                default=float)
    progress.finish(workdir)
  return final
