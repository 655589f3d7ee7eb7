"""`train_and_evaluate(config, workdir)`: set-up, then one flat training loop.

Cadences: training metrics every `train.log_every` steps, evaluation of `eval.splits` (with
decoding, samples and attention heatmaps) every `train.eval_every`, checkpoints every
`train.checkpoint_every`; the last step always evaluates and checkpoints. Each evaluation
updates the model selection (attnlab.train.selection): an improvement on the eval split saves the
best checkpoint, `train.patience` evaluations without one stop the run early, and with
`optim.schedule=plateau` `optim.plateau_patience` of them cut the learning rate (a cut below
`optim.plateau_min_scale` stops the run instead). At the end the test split is evaluated with
the best checkpoint. A diverging loss stops the run before that step is saved
(attnlab.train.divergence).

Rerunning the same command resumes from the latest checkpoint with the same data order and
selection state; a changed config is refused first (train/resume.py). Only process 0 writes
files other than checkpoints, and it holds the workdir's lock for the whole run, so a second
run on the same workdir is refused before it reads or writes anything there.
"""

from __future__ import annotations

import contextlib
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
from jax.experimental import multihost_utils

from attnlab import data, metrics
from attnlab.config import run as config_lib
from attnlab.config.run import SELECT_SPLIT
from attnlab.errors import UserError
from attnlab.models.factory import build_model
from attnlab.rundir import checkpoint, console, layout, run_times, writers
from attnlab.rundir import lock as run_lock
from attnlab.runtime import interrupt, logs, machine, provenance
from attnlab.runtime.parallel import DataParallel
from attnlab.train import divergence, optim, resume, steps
from attnlab.train.divergence import DivergenceError, NonFiniteLossError  # noqa: F401 (callers)
from attnlab.train.evaluation import Evaluator
from attnlab.train.selection import Selection, resolve_metric

RUN_TIMES = layout.RUN_TIMES


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
                   patience=cfg.train.patience, plateau_patience=plateau)


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
  with open(os.path.join(workdir, layout.PROVENANCE), 'a', encoding='utf-8') as f:
    f.write(json.dumps(entry) + '\n')


def stops_early(run: Run) -> bool:
  """Whether selection ends the run now: `train.patience` evaluations without improvement,
  or a plateau cut due that would go below `optim.plateau_min_scale`."""
  selection = run.selection
  if selection is None:
    return False
  floor_reached = (selection.lr_cut_due
                   and optim.next_plateau_scale(run.cfg.optim, run.lr_scale) is None)
  return selection.patience_exhausted or floor_reached


def cut_learning_rate(run: Run, p_state):
  """The plateau schedule's cut: the learning-rate scale in the optimiser state times
  `optim.plateau_factor`. A host round trip of the state, made a few times per run."""
  host = run.parallel.fetch(p_state)
  scale = optim.next_plateau_scale(run.cfg.optim, optim.lr_scale(host.opt_state))
  host = host.replace(opt_state=optim.with_lr_scale(host.opt_state, scale))
  run.lr_scale = scale
  run.selection.lr_cut_made()
  message = (f'learning rate cut to {run.cfg.optim.learning_rate * scale:.3g} (x{scale:g}): no '
             f'eval improvement in {run.cfg.optim.plateau_patience} evaluations')
  logging.info('step %d: %s', run.step, message)
  run.progress.note(message)
  return run.parallel.replicate(host)


def _diverged(run: Run, problem: str, step: int, error=DivergenceError) -> DivergenceError:
  latest = run.ckpt.latest_step()
  # This process saved a checkpoint only after its loss passed the guard; the one it resumed
  # from may have been saved without a guard (attnlab before it had one, or factor 0 then).
  bad_loss = None
  resumed = latest is not None and latest == run.resumed_step
  if resumed and run.resumed_loss is not None and run.guard.exceeds(run.resumed_loss):
    bad_loss = run.resumed_loss
  where = divergence.last_good(latest, run.ckpt.directory, run.cfg.train.checkpoint_every,
                               bad_loss)
  return error(f'training diverged at step {step}: {problem}; {where}. To fix it: '
               f'{divergence.advice(run.cfg)}')


class _Window:
  """The per-step sums since the last training event, still on the devices, and when the
  window began."""

  def __init__(self):
    self.sums, self.started = [], time.perf_counter()

  def take(self, parallel: DataParallel) -> tuple[dict[str, float], float]:
    """The window's summed metrics and seconds (the loop's only host sync); a new window
    begins."""
    sums = parallel.fetch_sums(self.sums)
    elapsed = time.perf_counter() - self.started
    self.sums, self.started = [], time.perf_counter()
    return sums, elapsed


def _log_train(run: Run, step: int, sums: dict[str, float], elapsed: float) -> None:
  """Checks a window's loss against the divergence guard, then writes one training event."""
  scalars = metrics.summarize(sums)
  loss = scalars['loss'] if np.isfinite(sums['loss_sum']) else math.nan
  problem = run.guard.problem(loss)
  if problem:
    raise _diverged(run, problem, step,
                    DivergenceError if math.isfinite(loss) else NonFiniteLossError)
  run.loss = loss
  # The update that produced `step` used schedule(step - 1): optax counts updates from 0.
  scalars.update(learning_rate=float(run.schedule(step - 1)) * run.lr_scale,
                 steps_per_sec=sums['steps'] / elapsed,
                 tokens_per_sec=sums['token_count'] / elapsed)
  run.writer.write(step, 'train', scalars)
  run.progress.update(step, scalars)
  run.run_time.update(step)


def _data_state(run: Run, step: int) -> dict:
  """What a checkpoint saves beside the state: the data position, selection and loss guard."""
  selection, lowest = run.selection, run.guard.lowest
  return {'step': step, 'selection': selection.to_json() if selection else None,
          'lowest_loss': lowest if math.isfinite(lowest) else None,
          'loss': run.loss if math.isfinite(run.loss) else None}


def _save(run: Run, step: int, p_state, *, force: bool = False) -> None:
  run.ckpt.save(step, run.parallel.fetch(p_state), _data_state(run, step), run.config_dict,
                force=force, best_step=run.selection.best_step if run.selection else None)


class _Loop:
  """train_loop's state between steps: the newest evaluations, the metrics window, a pending
  log event and `finished`, the last finished step with its replicated state. The two are one
  attribute, assigned together, so that a signal between two statements never pairs a step
  with another step's state."""

  def __init__(self, run: Run, state: steps.TrainState, start: int):
    self.run = run
    label_smoothing = run.cfg.train.label_smoothing
    self.train_step = run.parallel.compile_train_step(
        lambda s, b, k, axis_name: steps.train_step(
            s, b, k, axis_name=axis_name, label_smoothing=label_smoothing))
    p_state = run.parallel.replicate(state)
    selection = run.selection
    if not run.stopped_early and selection is not None and selection.lr_cut_due:
      # Resumed from a stop at the learning-rate floor under a lower optim.plateau_min_scale:
      # the cut that was due then is made now, as a run under the lower floor made it.
      p_state = cut_learning_rate(run, p_state)
    self.finished = (start, p_state)
    self.dropout_key = jax.random.fold_in(jax.random.key(run.cfg.seed), 1)
    self.window = _Window()
    self.log_due = None  # a step whose training event waits for the next step's dispatch
    self.latest = {}  # {split: (step, metrics)}

  @property
  def p_state(self):
    return self.finished[1]

  def train(self, batches, start: int, end: int) -> None:
    """Steps `start + 1` to `end`; on a stop (KeyboardInterrupt) saves the last finished step."""
    run = self.run
    try:
      for step in range(start + 1, end + 1):
        interrupt.check()  # a Ctrl-C / SIGTERM that arrived inside a finaliser stops here
        p_state, sums = self.train_step(self.p_state, run.parallel.shard_batch(next(batches)),
                                        self.dropout_key)
        self.finished = (step, p_state)
        run.step = step
        if self.log_due is not None:  # fetched only after the next step was dispatched
          self.flush(self.log_due)
          self.log_due = None
        self.window.sums.append(sums)
        if self.at_cadences(step):
          break
        self.save_if_preempted(step)
    except KeyboardInterrupt:
      self.save_at_stop(*self.finished)
      raise

  def at_cadences(self, step: int) -> bool:
    """Evaluates, checkpoints and logs where `step` is due; returns whether the run stops."""
    run, train_cfg = self.run, self.run.cfg.train
    is_last = step == train_cfg.num_steps
    save = step % train_cfg.checkpoint_every == 0 or is_last
    evaluate_now = step % train_cfg.eval_every == 0 or is_last
    if not (save or evaluate_now):
      if step % train_cfg.log_every == 0:
        self.log_due = step
      return False
    self.flush(step)  # never evaluate or checkpoint a diverged state
    if evaluate_now:
      self.evaluate(step)  # before the save: a non-finite eval metric keeps the last good one
      self.select(step)
    if save or run.stopped_early:
      _save(run, step, self.p_state)
    return run.stopped_early

  def flush(self, step: int) -> None:
    """Fetches the window's sums, checks them, writes one training event."""
    sums, elapsed = self.window.take(self.run.parallel)
    _log_train(self.run, step, sums, elapsed)

  def evaluate(self, step: int) -> None:
    """The eval splits at `step`: selection, divergence check, metrics and console lines."""
    run, selection, params = self.run, self.run.selection, self.p_state.params
    with run.progress.evaluating():
      for split in run.cfg.eval.splits:
        result = run.evaluator.evaluate(params, split, step)
        self.latest[split] = (step, result)
        run.writer.write(step, split, result)
        problem = divergence.eval_problem(split, result)
        improved = (selection is not None and split == SELECT_SPLIT and not problem
                    and selection.update(step, result))
        run.progress.report(step, split, result, 'best so far' if improved else '')
        if problem:
          raise _diverged(run, problem, step)
        if improved:
          run.ckpt.save_best(step, run.parallel.fetch(params),
                             {'eval': writers.to_json(result), **selection.to_json()})

  def select(self, step: int) -> None:
    """After an evaluation: stops early, or cuts the learning rate (before the save, so that a
    resumed run continues at the new rate)."""
    run, selection = self.run, self.run.selection
    run.stopped_early = stops_early(run)
    if run.stopped_early and not selection.patience_exhausted:
      run.progress.note(f'learning rate floor reached: a cut below '
                        f'x{run.cfg.optim.plateau_min_scale:g} (optim.plateau_min_scale) ends '
                        'the run')
    elif selection is not None and selection.lr_cut_due:
      self.finished = (step, cut_learning_rate(run, self.p_state))

  def save_if_preempted(self, step: int) -> None:
    """Multi-process jobs save where all processes agree JAX reported a preemption, then stop."""
    if jax.process_count() > 1 and self.run.ckpt.reached_preemption(step):
      _save(self.run, step, self.p_state, force=True)
      raise KeyboardInterrupt(f'preempted at step {step}')

  def save_at_stop(self, step: int, p_state) -> None:
    """On Ctrl-C or SIGTERM (a scheduler's time limit, a preemption): saves the state of the
    last finished step, so that the rerun resumes there rather than at the last interval
    checkpoint. Not when that step's updates diverged, nor when the signal came inside a step
    that had consumed its input state (donated), nor in multi-process jobs, whose processes
    may stop at different steps (they save where JAX reports the preemption,
    save_if_preempted)."""
    run = self.run
    if jax.process_count() > 1 or step <= (run.ckpt.latest_step() or 0):
      return
    if any(x.is_deleted() for x in jax.tree.leaves(p_state)):
      return
    if self.window.sums:
      try:
        self.flush(step)
      except (DivergenceError, NonFiniteLossError):
        return
    _save(run, step, p_state, force=True)
    logging.info('saved step %d at the stop', step)


def train_loop(run: Run, state: steps.TrainState, batches, start: int):
  """Trains from step `start` until `train.num_steps` or early stopping.

  Returns the replicated state and the newest evaluation of each split: {split: (step, metrics)}.
  """
  loop = _Loop(run, state, start)
  end = start if run.stopped_early else run.cfg.train.num_steps  # rerun of an early-stopped run
  loop.train(batches, start, end)
  return loop.p_state, loop.latest


def final_evaluation(run: Run, p_state, latest: dict) -> tuple[int, dict]:
  """The final splits with the selected checkpoint (the last step without selection).

  An evaluation of that step already made (in this process, or the eval metrics saved with
  the best checkpoint) is reused; the rest, the test split at least, is evaluated now.
  """
  selection = run.selection
  step = run.step
  if selection is not None and selection.best_step is not None:
    step = selection.best_step
  params, final = None, {}
  for split in final_splits(run.cfg):
    if split in latest and latest[split][0] == step:
      final[split] = latest[split][1]
      continue
    if split == SELECT_SPLIT and selection is not None and step == selection.best_step:
      final[split] = run.ckpt.best_info(step)['eval']
      continue
    if params is None:
      if step == run.step:
        params = p_state.params
      else:
        best, _ = run.ckpt.restore_params(step, target_params=run.params_shape)
        params = run.parallel.replicate(best)
    with run.progress.evaluating():
      final[split] = run.evaluator.evaluate(params, split, step)
    run.writer.write(step, split, final[split])
    if split != 'test':  # the test metrics close the run in the final summary
      run.progress.report(step, split, final[split])
  return step, final


def _write_final(run: Run, tested_step: int, final: dict) -> None:
  """final_metrics.json; metrics.jsonl gets a `selection` event at the tested step."""
  selection = run.selection
  chosen = None
  if selection is not None:
    chosen = {'split': SELECT_SPLIT, 'metric': selection.metric, 'mode': selection.mode,
              'best_step': selection.best_step, 'best_value': selection.best_value,
              'patience': selection.patience, 'stopped_early': run.stopped_early}
    run.writer.write(tested_step, 'selection',
                     {'metric': selection.metric, 'value': selection.best_value,
                      'trained_steps': run.step, 'stopped_early': run.stopped_early})
  if not run.is_writer:
    return
  with open(os.path.join(run.workdir, layout.FINAL_METRICS_FILE), 'w') as f:
    json.dump({'step': tested_step, 'trained_steps': run.step, 'num_params': run.num_params,
               'selection': chosen, **writers.to_json(final)}, f, indent=2)


def lock_workdir(workdir: str) -> contextlib.AbstractContextManager:
  """Process 0's hold on the workdir for the whole run (rundir/lock.py); the job's
  other processes write only checkpoints, as process 0 directs, and take no lock. They learn
  whether process 0 got it, so that a refused job stops as a whole with its error."""
  lock, refused = None, None
  if jax.process_index() == 0:
    try:
      lock = run_lock.RunLock(workdir)
    except UserError as e:
      refused = e
  if jax.process_count() > 1:
    got = multihost_utils.broadcast_one_to_all(np.int32(refused is None))
    if not got and refused is None:
      raise UserError(f'process 0 could not start the run in --workdir={workdir}; its error '
                      'line says why')
  if refused is not None:
    raise refused
  return lock or contextlib.nullcontext()


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str, *,
                       allow_config_change=()) -> dict:
  """Trains `config` in `workdir` (resuming if it holds a checkpoint); returns final metrics:
  {split: metrics} of the selected checkpoint (final_metrics.json says which step).

  Raises `attnlab.errors.UserError` for a bad config, an unusable workdir or one where another
  process is training; nothing is written in the workdir before those checks (but its lock).
  """
  started, cpu_started = time.perf_counter(), time.process_time()
  config_lib.parse(config)  # a config mistake leaves nothing behind, not even the lock file
  resume.check_allowed_changes(workdir, config, allow_config_change)
  with lock_workdir(workdir):
    return _train_and_evaluate(config, workdir, allow_config_change, started, cpu_started)


def _train_and_evaluate(config, workdir: str, allow_config_change, started: float,
                        cpu_started: float) -> dict:
  run, state, batches, start = setup(config, workdir, allow_config_change,
                                     started=started, cpu_started=cpu_started)
  outcome = 'failed'
  with logs.log_file(layout.log_path(workdir, jax.process_index())) as log:
    try:
      p_state, latest = train_loop(run, state, batches, start)
      tested_step, final = final_evaluation(run, p_state, latest)
      _write_final(run, tested_step, final)
      outcome = 'stopped early' if run.stopped_early else 'finished'
    except BaseException as e:
      outcome = 'interrupted' if isinstance(e, KeyboardInterrupt) else f'failed: {type(e).__name__}'
      interrupt.reset()  # this stop answered the signal; a later run in this process starts clean
      logging.info('the run stopped: %s', outcome, exc_info=True)  # the traceback: log file only
      raise
    finally:  # on errors too: finish pending checkpoint writes, so no good state is lost
      run.ckpt.close()
      run.writer.close()
      run.run_time.close(run.step, outcome)
    if run.is_writer:
      progress = run.progress
      progress.note(console.result_line('test', tested_step, final['test'], run.selection,
                                        run.step if run.stopped_early else None))
      progress.finish()
      progress.note(console.files_line(workdir, log=log))
  return final
