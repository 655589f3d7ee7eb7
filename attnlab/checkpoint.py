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
step numbers again.
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

_ITEMS = ('state', 'data', 'config')


class Checkpointer:
  """A run's checkpoints: keep the newest `keep` steps, save every `save_interval_steps`."""

  def __init__(
    self,
    directory: str | epath.PathLike,
    *,
    keep: int,
    save_interval_steps: int = 1,
    async_save: bool = True,
  ):
    """Opens (and creates) the checkpoint directory.

    Args:
      directory: where step directories live; relative paths are made absolute.
      keep: how many of the newest steps to keep (older ones are deleted after each save).
      save_interval_steps: `save` writes only steps divisible by this (unless `force=True`);
        1 leaves the cadence to the caller.
      async_save: write in a background thread (`wait()` joins it).
    """
    if not isinstance(keep, int) or keep < 1:
      raise ValueError(f'keep={keep!r} must be a positive integer (train.keep_checkpoints)')
    if not isinstance(save_interval_steps, int) or save_interval_steps < 1:
      raise ValueError(f'save_interval_steps={save_interval_steps!r} must be a positive integer')
    path = epath.Path(directory)
    if not path.is_absolute() and '://' not in str(directory):
      path = epath.Path(path.resolve())
    self.directory = path
    options = ocp.CheckpointManagerOptions(
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
    """
    if hasattr(config_dict, 'to_dict'):
      config_dict = config_dict.to_dict()
    data_state, config_dict = _jsonable('data_state', data_state), _jsonable('config', config_dict)
    args = ocp.args.Composite(
      state=ocp.args.StandardSave(state),
      data=ocp.args.JsonSave(data_state),
      config=ocp.args.JsonSave(config_dict),
    )
    return bool(self._manager.save(int(step), args=args, force=force))

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
    unreadable, first_error = [], None
    for candidate in reversed(steps):
      try:
        result = self._restore_step(candidate, abstract)
        error = None
      except Exception as e:  # Any read failure means "try an older step".
        result, error = None, e
      if not _all_processes_agree(error is None):
        reason = f'{type(error).__name__}: {str(error)[:500]}' if error else 'another process'
        logging.warning(
          'checkpoint step %d in %s is unreadable (%s); trying an older step',
          candidate,
          self.directory,
          reason,
        )
        unreadable.append(candidate)
        first_error = first_error or error
        continue
      if unreadable:
        self._set_aside(unreadable)
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
    self._manager.wait_until_finished()

  def close(self) -> None:
    """Waits for pending saves and releases orbax's resources."""
    self._manager.wait_until_finished()
    self._manager.close()

  def __enter__(self) -> Checkpointer:
    return self

  def __exit__(self, *exc) -> None:
    self.close()

  def _restore_step(self, step: int, abstract_state: Any) -> tuple[Any, dict, int]:
    args = ocp.args.Composite(
      state=ocp.args.StandardRestore(abstract_state),
      data=ocp.args.JsonRestore(),
    )
    out = self._manager.restore(step, args=args)
    return out.state, out.data, step

  def _set_aside(self, steps: list[int]) -> None:
    """Renames unreadable step directories out of orbax's view (process 0), then re-lists."""
    if jax.process_index() == 0:
      for step in steps:
        src = self.directory / str(step)
        if not src.exists():
          continue
        dst = self.directory / f'{step}.unreadable'
        if dst.exists():
          dst = self.directory / f'{step}.unreadable-{int(time.time())}'
        src.rename(dst)
        logging.warning('moved unreadable checkpoint %s to %s', src, dst)
    if jax.process_count() > 1:
      ocp.multihost.sync_global_processes(f'attnlab_set_aside_{"_".join(map(str, steps))}')
    self._manager.reload()


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
