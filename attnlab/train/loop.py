"""`train_and_evaluate(config, workdir)`: the start (train/start.py), then one flat training loop.

Cadences: training metrics every `train.log_every` steps, evaluation of `eval.splits` (with
decoding, samples and attention heatmaps) every `train.eval_every`, checkpoints every
`train.checkpoint_every`; the last step always evaluates and checkpoints. Each evaluation
updates the model selection (attnlab.train.selection): an improvement on the eval split saves the
best checkpoint, `train.patience` evaluations without one stop the run early, and with
`optim.schedule=plateau` `optim.plateau_patience` of them cut the learning rate (a cut below
`optim.plateau_min_scale` stops the run, or is not made under `optim.plateau_at_floor=hold`).
At the end the test split is evaluated with the best checkpoint. A diverging loss stops the
run before that step is saved (attnlab.train.divergence).

Rerunning the same command resumes from the latest checkpoint with the same data order and
selection state; a changed config is refused first (train/resume.py). Only process 0 writes
files other than checkpoints, and it holds the workdir's lock for the whole run, so a second
run on the same local workdir is refused before it reads or writes anything there (a bucket has
no locks: rundir/lock.py).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import time

import jax
import ml_collections
import numpy as np
from jax.experimental import multihost_utils

from attnlab import metrics, storage
from attnlab.config import run as config_lib
from attnlab.config.run import SELECT_SPLIT
from attnlab.errors import UserError
from attnlab.rundir import checkpoint_params, console, layout, writers
from attnlab.rundir import lock as run_lock
from attnlab.runtime import interrupt, logs
from attnlab.runtime.parallel import DataParallel
from attnlab.train import divergence, optim, resume, steps
from attnlab.train.divergence import DivergenceError, NonFiniteLossError  # noqa: F401 (callers)
from attnlab.train.start import Run, final_splits, setup, stops_early

RUN_TIMES = layout.RUN_TIMES


def cut_learning_rate(run: Run, p_state):
  """The plateau schedule's cut: the learning-rate scale in the optimiser state times
  `optim.plateau_factor`. A host round trip of the state, made a few times per run."""
  # run.lr_scale mirrors the state's scale: a hold needs no host round trip of the state.
  scale = optim.next_plateau_scale(run.cfg.optim, run.lr_scale)
  if scale is None:  # optim.plateau_at_floor=hold: the rate stays, train.patience ends the run
    run.selection.lr_cut_made()
    message = (f'learning rate held at the floor x{run.lr_scale:g} (optim.plateau_at_floor=hold):'
               f' train.patience={run.cfg.train.patience} ends the run')
    logging.info('step %d: %s', run.step, message)
    run.progress.note(message)
    return p_state
  host = run.parallel.fetch(p_state)
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
      # Resumed from a stop at the learning-rate floor under a lower optim.plateau_min_scale
      # or optim.plateau_at_floor=hold: the cut that was due then is made (or held) now, as a
      # run under those settings from the start did.
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
        best, _ = checkpoint_params.restore(run.ckpt, step, target_params=run.params_shape)
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
    ended_by = ('patience' if selection.patience_exhausted else 'floor') if run.stopped_early \
      else 'cap'
    chosen = {'split': SELECT_SPLIT, 'metric': selection.metric, 'mode': selection.mode,
              'best_step': selection.best_step, 'best_value': selection.best_value,
              'patience': selection.patience, 'min_improvement': selection.min_improvement,
              'stopped_early': run.stopped_early, 'ended_by': ended_by}
    run.writer.write(tested_step, 'selection',
                     {'metric': selection.metric, 'value': selection.best_value,
                      'trained_steps': run.step, 'stopped_early': run.stopped_early})
  if not run.is_writer:
    return
  record = {'step': tested_step, 'trained_steps': run.step, 'num_params': run.num_params,
            'selection': chosen, **writers.to_json(final)}
  storage.write_text(os.path.join(run.workdir, layout.FINAL_METRICS_FILE),
                     json.dumps(record, indent=2))


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
  storage.check_reachable(workdir, '--workdir')
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
