"""The start of a training: the config's checks and warnings, the `Run` the loop carries, the
state restored from the latest checkpoint (or initialised), the start files and the provenance
record of this process run (attnlab/train/loop.py trains from there)."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import time
from typing import Any

import jax
import ml_collections
import numpy as np

from attnlab import data, storage
from attnlab.config import run as config_lib
from attnlab.config.run import SELECT_SPLIT
from attnlab.models.factory import build_model
from attnlab.rundir import checkpoint, console, layout, run_times, writers
from attnlab.runtime import machine, provenance
from attnlab.runtime.parallel import DataParallel
from attnlab.train import divergence, optim, resume, steps
from attnlab.train.divergence import DivergenceError, NonFiniteLossError  # noqa: F401 (callers)
from attnlab.train.evaluation import Evaluator
from attnlab.train.selection import Selection, resolve_metric


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


def config_warnings(cfg: config_lib.RunConfig) -> list[str]:
  """Settings that run but probably not as meant."""
  out = []
  warmup, num_steps = cfg.optim.warmup_steps, cfg.train.num_steps
  if warmup >= num_steps:
    out.append(f'optim.warmup_steps={warmup} >= train.num_steps={num_steps}: the learning rate '
               f'never reaches optim.learning_rate={cfg.optim.learning_rate:g} (at most '
               f'{cfg.optim.learning_rate * (num_steps - 1) / warmup:.3g}); shorten the warmup')
  return out


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
  selection: Selection | None  # None when eval.splits has no eval split: the last step is tested
  guard: divergence.LossGuard
  params_shape: Any  # ShapeDtypeStructs of the params: the target of a best-checkpoint restore
  step: int = 0  # the last step trained (or restored)
  stopped_early: bool = False
  lr_scale: float = 1.0  # optim.schedule=plateau: the multiplier held in the optimiser state
  loss: float = math.nan  # the latest logged training loss: saved with each checkpoint
  resumed_step: int | None = None  # the checkpoint this run resumed from
  resumed_loss: float | None = None  # the training loss saved with it
  run_time: run_times.RunTimeRecord | None = None  # this process's line of run_times.jsonl


def setup(config: ml_collections.ConfigDict, workdir: str, allow_config_change=(), *,
          started: float | None = None, cpu_started: float | None = None):
  """Validates the config and the workdir, builds task/model/state, restores the latest
  checkpoint. Nothing is written before the config and the vocabularies are checked.
  `started` (time.perf_counter) and `cpu_started` (time.process_time) are when this process
  run began, for run_times.jsonl."""
  started = time.perf_counter() if started is None else started
  cpu_started = time.process_time() if cpu_started is None else cpu_started
  cfg = config_lib.parse(config)  # every key and value checked before anything compiles
  changes, change_notes = resume.check_reuse(workdir, config, cfg, allow_config_change)
  parallel = DataParallel(cfg.parallel.mode, devices=_devices(cfg.parallel.num_devices))
  parallel.check_batch_size(cfg.data.global_batch_size)
  is_writer = jax.process_index() == 0
  task = data.load_task(cfg)
  resume.check_vocabularies(workdir, task)
  if is_writer:
    _write_start_files(workdir, config, task, changes)
  for note in change_notes:
    logging.warning('config change accepted on resume: %s', note)
  for warning in config_warnings(cfg):
    logging.warning('%s', warning)
  model = build_model(cfg.model, task.source_vocab.size, task.target_vocab.size)
  tx, schedule = optim.make_optimizer(cfg.optim, cfg.train.num_steps)
  state = init_state(model, tx, cfg)
  ckpt = checkpoint.Checkpointer(layout.checkpoint_dir(workdir),
                                 keep=cfg.train.keep_checkpoints)
  selection = _selection(cfg)
  start, data_state = 0, {}
  restored = _restore(ckpt, state, selection)
  if restored is not None:
    state, data_state, start = restored
  batches = data.train_batches(task, cfg, start_step=start)
  num_params = steps.count_params(state.params)
  progress = _start_progress(cfg, workdir, parallel, selection, start, num_params,
                             batches.num_filtered, enabled=is_writer)
  run = Run(cfg=cfg, config_dict=config.to_dict(), workdir=workdir, parallel=parallel,
            ckpt=ckpt, evaluator=Evaluator(model, task, cfg, parallel, workdir,
                                           enabled=is_writer),
            writer=writers.MetricWriter(workdir, enabled=is_writer), progress=progress,
            schedule=schedule, num_params=num_params, is_writer=is_writer,
            selection=selection,
            guard=divergence.LossGuard(cfg.train.divergence_factor, data_state.get('lowest_loss'),
                                       vocab_size=task.target_vocab.size),
            params_shape=jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype),
                                      state.params),
            step=start, lr_scale=optim.lr_scale(state.opt_state) or 1.0,
            resumed_step=start if restored is not None else None,
            resumed_loss=data_state.get('loss'),
            run_time=run_times.RunTimeRecord(workdir, first_step=start, started=started,
                                               cpu_started=cpu_started, enabled=is_writer,
                                               machine=machine.default_machine_name()))
  if is_writer:
    _append_provenance(workdir, cfg, start)
  run.stopped_early = stops_early(run)  # a rerun of a run that stopped early trains no more
  return run, state, batches, start


def _write_start_files(workdir: str, config, task, changes) -> None:
  """Process 0's files before anything trains; a killed earlier process gets its line of
  run_times.jsonl."""
  resume_step = (layout.saved_steps(workdir) or [None])[-1]
  resume.write_start_files(workdir, config, task, changes, resume_step)
  killed = run_times.recover_killed_run(workdir)
  if killed:
    logging.info('an earlier process was killed at step %d after %.0f s; recorded in %s',
                 killed['last_step'], killed['wall_s'], layout.RUN_TIMES)


def _selection(cfg: config_lib.RunConfig) -> Selection | None:
  """Model selection on the eval split; None when eval.splits has none."""
  if SELECT_SPLIT not in cfg.eval.splits:
    return None
  plateau = cfg.optim.plateau_patience if cfg.optim.schedule == 'plateau' else 0
  return Selection(resolve_metric(cfg.train.select_metric, cfg.task.name),
                   patience=cfg.train.patience, plateau_patience=plateau,
                   min_improvement=cfg.train.min_improvement)


def _restore(ckpt: checkpoint.Checkpointer, state: steps.TrainState,
             selection: Selection | None) -> tuple[steps.TrainState, dict, int] | None:
  """The latest checkpoint's (state, data_state, step), with `selection` restored from it;
  None when there is none."""
  restored = ckpt.restore_or_none(target_state=state)
  if restored is None:  # a killed first attempt's best steps belong to no saved state
    ckpt.resume_best(0, None)
    return None
  _, data_state, start = restored
  logging.info('resumed from step %d (data position %s)', start, data_state)
  if selection is not None:
    selection.restore(data_state.get('selection'))
  if not ckpt.resume_best(start, selection.best_step if selection else None):
    logging.warning('the best checkpoint (step %d) that step %d refers to is missing; model '
                    'selection starts again from step %d', selection.best_step, start, start)
    selection.restore({'metric': selection.metric, 'best_step': None, 'best_value': None,
                       'evals_since_best': 0})
  return restored


def _start_progress(cfg: config_lib.RunConfig, workdir: str, parallel: DataParallel,
                    selection: Selection | None, start: int, num_params: int, filtered: int, *,
                    enabled: bool) -> writers.ProgressLine:
  """The console's progress line, opened with the run's summary (also logged)."""
  logging.info('%s model: %d parameters; %d devices; %d train pairs dropped by the length '
               'filter', cfg.model.kind, num_params, parallel.num_devices, filtered)
  progress = writers.ProgressLine(cfg.train.num_steps, start_step=start, enabled=enabled,
                                  eval_every=cfg.train.eval_every)
  for line in console.start_summary(
      cfg, num_params=num_params, num_devices=parallel.num_devices, workdir=workdir,
      log=layout.log_path(workdir, jax.process_index()), selection=selection,
      start_step=start, filtered=filtered):
    progress.note(line)
  return progress


def _append_provenance(workdir: str, cfg: config_lib.RunConfig, start: int) -> None:
  """One line of provenance.jsonl per process run: the machine and the software it ran."""
  entry = {'first_step': start, 'at': layout.now(),
           **provenance.record(_devices(cfg.parallel.num_devices) or jax.devices(),
                              jax.process_count())}
  storage.append_text(os.path.join(workdir, layout.PROVENANCE), json.dumps(entry) + '\n')


def stops_early(run: Run) -> bool:
  """Whether selection ends the run now: `train.patience` evaluations without improvement,
  or a plateau cut due that would go below `optim.plateau_min_scale` under
  `optim.plateau_at_floor=stop`."""
  selection = run.selection
  if selection is None:
    return False
  floor_reached = (run.cfg.optim.plateau_at_floor == 'stop' and selection.lr_cut_due
                   and optim.next_plateau_scale(run.cfg.optim, run.lr_scale) is None)
  return selection.patience_exhausted or floor_reached
