"""Checkpoints of a run: train state, data position and config, through orbax's CheckpointManager.

Each saved step is one directory `<directory>/<step>/` with three items:
  state   the train-state pytree (params, opt_state, step, ...), `ocp.args.StandardSave`
  data    JSON: where the data pipeline stands, e.g. {'step': k}
  config  JSON: the run's config as a dict, so a checkpoint explains itself

Typical use in the training loop (the resume order: latest readable checkpoint, else init):

    ckpt = Checkpointer(workdir / 'checkpoints', keep=3, save_interval_steps=500)
    restored = ckpt.restore_or_none(target_state=state)   # state: freshly initialised
    if restored is not None:
      state, data_state, step = restored
    ...
    ckpt.save(step, state, {'step': step}, config.to_dict(), force=step == num_steps)
    ...
    ckpt.close()

Multi-process runs: EVERY process must construct the Checkpointer and call `save`, `restore*`
and `close` with the same arguments in the same order; orbax writes each process's shards,
lets process 0 write the JSON items and metadata, and synchronises with barriers. The directory
must be shared by all processes (GCS, NFS, ...). Saves are asynchronous: `save` returns once
the arrays are copied off the devices and `wait()` blocks until the files are committed.

Robustness: orbax writes a step into a temporary directory and renames it when complete, so an
interrupted save never shows up as a step (leftover temporaries are removed at start-up). If
the newest step still cannot be read (files damaged later, a partial copy), `restore` logs a
warning and falls back to the newest older step that reads. Once an older step reads with the
same target (so the target is not to blame), the unreadable newer steps are renamed to
`<step>.unreadable` (kept for inspection, ignored by orbax) so that training can save those
step numbers again. The warning names the step, the reason in one line and where the step was
moved; the libraries' full error goes to the log (the run's train.log, not the console).
Reading one checkpoint's parameters back (attnlab/rundir/checkpoint_params.py) never falls back
or moves anything.

The best checkpoint (model selection, attnlab.train.selection) lives apart from the rolling latest
ones, in `<directory>/best/<step>/` (items `state` = {'params': ...} and `data` = JSON about
the selection), so `keep` never deletes it:

    ckpt.save_best(step, params, {'metric': 'wer', 'value': 0.21, ...})
    ckpt.save(step, state, data_state, config, best_step=step)  # the best it refers to
    params, step = checkpoint_params.restore(ckpt, 'best')     # or 'latest' or a step number

A best step is deleted only once a committed latest checkpoint refers to a newer one, and on
resume (`resume_best`) the best steps newer than the resumed step (a killed attempt's future)
are dropped, so the best checkpoint always matches the state training continues from.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from absl import logging
from etils import epath
from jax.experimental import multihost_utils

from attnlab import storage
from attnlab.errors import UserError
from attnlab.rundir import damage
from attnlab.rundir.layout import BEST_CHECKPOINTS
from attnlab.runtime import logs

_ITEMS = ('state', 'data', 'config')
# Options orbax would otherwise change for read_only=True, one warning each.
_READ_ONLY = ocp.CheckpointManagerOptions(
  read_only=True, max_to_keep=None, save_interval_steps=0, create=False,
  cleanup_tmp_directories=False, enable_async_checkpointing=False)


class MissingCheckpointError(UserError):
  """The checkpoint asked for (best, latest or a step) is not in the directory."""


class Checkpointer:
  """A run's checkpoints: keep the newest `keep` steps, save every `save_interval_steps`."""

  def __init__(
    self,
    directory: str | epath.PathLike,
    *,
    keep: int,
    save_interval_steps: int = 1,
    async_save: bool = True,
    read_only: bool = False,
  ):
    """Opens (and creates) the checkpoint directory.

    Args:
      directory: where step directories live; relative paths are made absolute.
      keep: how many of the newest steps to keep (older ones are deleted after each save).
      save_interval_steps: `save` writes only steps divisible by this (unless `force=True`);
        1 leaves the cadence to the caller.
      async_save: write in a background thread (`wait()` joins it).
      read_only: for reading a run back (decode, evaluate): nothing is created, saved or
        deleted, not even orbax's leftover temporaries, which may be the save in progress of a
        training that is still running.
    """
    if not isinstance(keep, int) or keep < 1:
      raise ValueError(f'keep={keep!r} must be a positive integer (train.keep_checkpoints)')
    if not isinstance(save_interval_steps, int) or save_interval_steps < 1:
      raise ValueError(f'save_interval_steps={save_interval_steps!r} must be a positive integer')
    path = epath.Path(directory)
    if not path.is_absolute() and not storage.is_remote(directory):
      path = epath.Path(path.resolve())
    self.directory = path
    self._async, self._read_only = async_save, read_only
    self._best: ocp.CheckpointManager | None = None  # opened on first use (`_best_manager`)
    self._referenced_best: int | None = None  # best step the newest latest save refers to
    options = _READ_ONLY if read_only else ocp.CheckpointManagerOptions(
      max_to_keep=keep,
      # Every `save_interval_steps`, or when JAX reports a preemption; not orbax's default extra
      # save at the first call, which would surprise a caller that sets the cadence.
      save_decision_policy=ocp.checkpoint_managers.AnySavePolicy(
        [
          ocp.checkpoint_managers.FixedIntervalPolicy(save_interval_steps),
          ocp.checkpoint_managers.PreemptionCheckpointingPolicy(),
        ]
      ),
      cleanup_tmp_directories=True,
      enable_async_checkpointing=async_save,
      create=True,
    )
    self._manager = ocp.CheckpointManager(path, item_names=_ITEMS, options=options)

  def all_steps(self) -> list[int]:
    """Steps present on disk, ascending."""
    return sorted(self._manager.all_steps())

  def latest_step(self) -> int | None:
    """The newest saved step, or None when the directory holds none."""
    return self._manager.latest_step()

  def save(
    self,
    step: int,
    state: Any,
    data_state: Mapping[str, Any],
    config_dict: Mapping[str, Any] | Any,
    *,
    force: bool = False,
    best_step: int | None = None,
  ) -> bool:
    """Saves `state`, `data_state` and `config_dict` as `step`; returns whether it saved.

    Skips (returns False) when `step` is not a multiple of `save_interval_steps` or is not
    newer than the latest saved step, unless `force=True` (which still never overwrites an
    existing step). All processes must call this.

    Args:
      step: the number of optimiser steps taken.
      state: pytree of arrays (jax or numpy); restored with the same structure and dtypes.
      data_state: JSON-serialisable dict, the data pipeline position.
      config_dict: JSON-serialisable dict (a ConfigDict is converted with `to_dict()`).
      force: save regardless of the interval (e.g. the last step, a preemption).
      best_step: the best checkpoint this state refers to (its data_state records it); once
        this save is committed, older best steps are deleted.
    """
    if hasattr(config_dict, 'to_dict'):
      config_dict = config_dict.to_dict()
    data_state, config_dict = _jsonable('data_state', data_state), _jsonable('config', config_dict)
    args = ocp.args.Composite(
      state=ocp.args.StandardSave(state),
      data=ocp.args.JsonSave(data_state),
      config=ocp.args.JsonSave(config_dict),
    )
    if self._best is not None:
      self._best.wait_until_finished()  # a latest step never refers to an uncommitted best
    self._manager.wait_until_finished()  # the previous save is committed: its best is safe
    self._prune_best()
    saved = bool(self._manager.save(int(step), args=args, force=force))
    if saved and best_step is not None:
      self._referenced_best = int(best_step)
    return saved

  def save_best(self, step: int, params: Any, info: Mapping[str, Any]) -> None:
    """Saves `params` as the best checkpoint of `step`, with `info` (JSON) about the choice."""
    args = ocp.args.Composite(
      state=ocp.args.StandardSave({'params': params}),
      data=ocp.args.JsonSave(_jsonable('info', info)),
    )
    self._best_manager(create=True).save(int(step), args=args, force=True)

  def best_steps(self) -> list[int]:
    manager = self._best_manager(create=False)
    return sorted(manager.all_steps()) if manager is not None else []

  def best_step(self) -> int | None:
    """The selected (best) step, or None when no best checkpoint was saved."""
    steps = self.best_steps()
    return steps[-1] if steps else None  # improvements only are saved: the newest is the best

  def best_info(self, step: int | None = None) -> dict:
    """The JSON saved with a best checkpoint (default: the best step)."""
    step = self.best_step() if step is None else step
    if step is None or step not in self.best_steps():
      which = '' if step is None else f' for step {step}'
      raise MissingCheckpointError(
        f'no best checkpoint{which} in {self.directory / BEST_CHECKPOINTS}'
      )
    manager = self._best_manager(create=False)
    manager.wait_until_finished()
    return manager.restore(step, args=ocp.args.Composite(data=ocp.args.JsonRestore())).data

  def resume_best(self, step: int, best_step: int | None) -> bool:
    """On resume from `step`: drops best steps after it and keeps `best_step` (the one the
    resumed state refers to); returns whether that best checkpoint exists."""
    manager = self._best_manager(create=False)
    for newer in [s for s in self.best_steps() if s > step]:
      logging.info('dropping best checkpoint %d: newer than the resumed step %d', newer, step)
      manager.delete(newer)
    if manager is not None:
      manager.reload()
    self._referenced_best = best_step
    return best_step is None or best_step in self.best_steps()

  def restore(self, step: int | None = None, *, target_state: Any) -> tuple[Any, dict, int]:
    """Restores `(state, data_state, step)`.

    Args:
      step: the step to read; None reads the newest readable step (falling back past
        unreadable ones, see the module docstring). An explicit step never falls back.
      target_state: a pytree with the structure of the saved state whose leaves are arrays or
        `jax.ShapeDtypeStruct`s (e.g. a freshly initialised state); restored leaves get its
        shapes, dtypes and, for jax arrays, shardings.

    Raises:
      FileNotFoundError: no checkpoint exists (see `restore_or_none`) or `step` is absent.
      RuntimeError: no step can be read (chained to the newest step's error); nothing is
        moved then, since a wrong `target_state` fails on every step.
    """
    self.wait()
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, target_state)
    steps = self.all_steps()
    if step is not None:
      if step not in steps:
        raise FileNotFoundError(
          f'no checkpoint for step {step} in {self.directory}; available steps: {steps}'
        )
      return self._restore_step(step, abstract)
    if not steps:
      raise FileNotFoundError(f'no checkpoint in {self.directory}')
    unreadable, first_error = {}, None
    for candidate in reversed(steps):
      try:
        with logs.library_detail_to_log_file():
          result = self._restore_step(candidate, abstract)
        error = None
      except Exception as e:  # Any read failure means "try an older step".
        result, error = None, e
        logging.info('reading checkpoint step %d in %s failed', candidate, self.directory,
                     exc_info=e)  # the libraries' detail: the log file, not the console
      if not _all_processes_agree(error is None):
        unreadable[candidate] = damage.reason(error) if error else 'unreadable on another process'
        first_error = first_error or error
        continue
      if unreadable:
        moved = self._set_aside(list(unreadable))
        for bad, reason in unreadable.items():
          logging.warning('checkpoint step %d in %s is unreadable (%s); moved to %s; using step %d '
                          'instead (details in the log file)', bad, self.directory, reason,
                          moved.get(bad, f'{bad}.unreadable by process 0'), candidate)
      return result
    raise RuntimeError(
      f'no checkpoint in {self.directory} can be read with this target state '
      f'(steps tried: {list(reversed(steps))}); nothing was moved or deleted'
    ) from first_error

  def restore_or_none(self, step: int | None = None, *, target_state: Any):
    """Like `restore`, but returns None when the directory holds no checkpoint at all."""
    if step is None and self.latest_step() is None:
      return None
    return self.restore(step, target_state=target_state)

  def restore_config(self, step: int | None = None) -> dict:
    """The config dict saved with `step` (default: the latest step)."""
    self.wait()
    step = self.latest_step() if step is None else step
    if step is None:
      raise FileNotFoundError(f'no checkpoint in {self.directory}')
    out = self._manager.restore(step, args=ocp.args.Composite(config=ocp.args.JsonRestore()))
    return out.config

  def reached_preemption(self, step: int) -> bool:
    """True when JAX signalled a preemption (all processes agree); `save` then saves `step`."""
    return bool(self._manager.reached_preemption(step))

  def wait(self) -> None:
    """Blocks until pending asynchronous saves are committed to disk."""
    if self._best is not None:
      self._best.wait_until_finished()
    self._manager.wait_until_finished()

  def close(self) -> None:
    """Waits for pending saves and releases orbax's resources."""
    self.wait()
    self._prune_best()
    if self._best is not None:
      self._best.close()
    self._manager.close()

  def __enter__(self) -> Checkpointer:
    return self

  def __exit__(self, *exc) -> None:
    self.close()

  def _best_manager(self, create: bool) -> ocp.CheckpointManager | None:
    if self._best is None:
      path = self.directory / BEST_CHECKPOINTS
      if not create and not path.exists():
        return None
      options = _READ_ONLY if self._read_only else ocp.CheckpointManagerOptions(
        max_to_keep=None,  # `_prune_best` decides: never a best a latest step refers to
        cleanup_tmp_directories=True,
        enable_async_checkpointing=self._async,
        create=True,
      )
      self._best = ocp.CheckpointManager(path, item_names=('state', 'data'), options=options)
    return self._best

  def _prune_best(self) -> None:
    """Deletes best steps older than the one the newest committed latest step refers to."""
    if self._referenced_best is None or self._best is None:
      return
    for old in [s for s in self.best_steps() if s < self._referenced_best]:
      self._best.delete(old)

  def _restore_step(self, step: int, abstract_state: Any) -> tuple[Any, dict, int]:
    args = ocp.args.Composite(
      state=ocp.args.StandardRestore(abstract_state),
      data=ocp.args.JsonRestore(),
    )
    out = self._manager.restore(step, args=args)
    return out.state, out.data, step

  def _set_aside(self, steps: list[int]) -> dict[int, epath.Path]:
    """Renames unreadable step directories out of orbax's view (process 0), then re-lists;
    returns where each went (on process 0)."""
    moved = {}
    if jax.process_index() == 0:
      for step in steps:
        src = self.directory / str(step)
        if not src.exists():
          continue
        dst = self.directory / f'{step}.unreadable'
        if dst.exists():
          dst = self.directory / f'{step}.unreadable-{int(time.time())}'
        src.rename(dst)
        moved[step] = dst
    if jax.process_count() > 1:
      ocp.multihost.sync_global_processes(f'attnlab_set_aside_{"_".join(map(str, steps))}')
    self._manager.reload()
    return moved


def _jsonable(name: str, value: Any) -> dict:
  """Fails now, with the key's name, rather than later in orbax's background thread."""
  if not isinstance(value, Mapping):
    raise TypeError(f'{name} must be a dict, got {type(value).__name__}')
  try:
    json.dumps(value)
  except TypeError as e:
    raise TypeError(f'{name} must be JSON-serialisable: {e}') from e
  return dict(value)


def _all_processes_agree(ok: bool) -> bool:
  """True only if `ok` holds on every process, so all processes pick the same step."""
  if jax.process_count() == 1:
    return ok
  return bool(np.all(multihost_utils.process_allgather(np.int32(ok))))
