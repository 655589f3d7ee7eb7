"""The parameters of one checkpoint read back (decode, evaluate, the final test), and what is
wrong with a checkpoint that does not read.

    params, step = checkpoint_params.restore(ckpt, 'best')   # or 'latest' or a step number

`ckpt` is a `Checkpointer` (attnlab/rundir/checkpoint.py), often opened `read_only`. Only the
`params` of the `state` item are read, not the optimiser state. Reading back never falls back
or moves anything, unlike resuming a training: a checkpoint that does not read raises
`UnreadableCheckpointError`, which names the damaged file (attnlab/rundir/damage.py) and the
other checkpoints that read.
"""

from __future__ import annotations

import json
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from etils import epath

from attnlab.errors import UserError
from attnlab.rundir import damage
from attnlab.rundir.checkpoint import BEST_CHECKPOINTS, Checkpointer, MissingCheckpointError


class UnreadableCheckpointError(UserError):
  """The checkpoint asked for has damaged or missing files; the message names the file and the
  checkpoints that still read."""


def restore(ckpt: Checkpointer, which: str | int = 'best', target_params: Any = None):
  """Parameters of one checkpoint: `(params, step)`.

  Args:
    ckpt: the run's checkpoints.
    which: 'best' (the selected step), 'latest' (the newest saved step) or a step number,
      looked up among the latest steps and then the best ones.
    target_params: optional pytree of arrays / ShapeDtypeStructs; restored leaves get its
      shapes and dtypes. Without it, the saved shapes and dtypes (NumPy arrays).

  Raises:
    MissingCheckpointError (a UserError): no such checkpoint; the message lists what exists.
    UnreadableCheckpointError (a UserError): its files are damaged or missing (or do not fit
      `target_params`); the message names the file and the other checkpoints that read.
  """
  ckpt.wait()
  latest, best = ckpt.all_steps(), ckpt.best_steps()
  if which == 'best':
    folder, step = BEST_CHECKPOINTS, (best[-1] if best else None)
  elif which == 'latest':
    folder, step = '', (latest[-1] if latest else None)
  elif str(which).isdigit() and int(which) in latest + best:
    step = int(which)
    folder = '' if step in latest else BEST_CHECKPOINTS
  else:
    folder, step = '', None
  if step is None:
    raise MissingCheckpointError(
      f'no {which!r} checkpoint in {ckpt.directory}: latest steps {latest or "none"}, best '
      f'{best[-1] if best else "none"}; choose best, latest or one of those steps'
    )
  try:
    return _read_params(ckpt.directory, folder, step, target_params), step
  except Exception as e:  # orbax and tensorstore raise many types for damaged files
    error = e
  others = _readable_choices(ckpt, (folder, step), target_params)
  found = (
    f'these read: {", ".join(others)}'
    if others
    else f'no other checkpoint in {ckpt.directory} reads either'
  )
  raise UnreadableCheckpointError(
    f'checkpoint {_step_dir(ckpt.directory, folder, step)} cannot be read: '
    f'{damage.describe(error, _step_dir(ckpt.directory, folder, step))}; {found}'
  ) from error


def damaged_metadata(ckpt: Checkpointer) -> list[epath.Path]:
  """The `_CHECKPOINT_METADATA` files that are not JSON. Orbax keeps its record of a save
  there (timestamps, item handlers); restoring the items does not need it."""
  bad = []
  for folder, steps in (('', ckpt.all_steps()), (BEST_CHECKPOINTS, ckpt.best_steps())):
    for step in steps:
      path = _step_dir(ckpt.directory, folder, step) / '_CHECKPOINT_METADATA'
      try:
        json.loads(path.read_text())
      except FileNotFoundError:
        continue
      except (OSError, ValueError):
        bad.append(path)
  return bad


def _step_dir(directory: epath.Path, folder: str, step: int) -> epath.Path:
  return directory / folder / str(step) if folder else directory / str(step)


def _read_params(directory: epath.Path, folder: str, step: int, target_params: Any) -> Any:
  path = _step_dir(directory, folder, step) / 'state'
  damage.drop_orphaned_read_errors(directory)
  reader = ocp.PyTreeCheckpointHandler()  # reads the `state` item alone, a subset of it
  try:
    if target_params is None:
      saved = reader.metadata(path)
      saved = getattr(saved, 'tree', saved)['params']
      target_params = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype), saved)
    abstract = {'params': jax.tree.map(ocp.utils.to_shape_dtype_struct, target_params)}
    restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), abstract)
    out = reader.restore(
      path,
      args=ocp.args.PyTreeRestore(item=abstract, restore_args=restore_args, partial_restore=True),
    )
  finally:
    reader.close()
  return out['params']


def _readable_choices(ckpt: Checkpointer, failed: tuple[str, int], target_params: Any) -> list[str]:
  """`--checkpoint=...` for each other checkpoint whose parameters read, newest first. A step
  number finds the latest folder first, so a best step also kept there is offered by its
  number, and the newest best step as `best`."""
  latest, best = ckpt.all_steps(), ckpt.best_steps()
  candidates = [(s, '', str(s)) for s in latest]
  candidates += [
    (s, BEST_CHECKPOINTS, 'best' if s == best[-1] else str(s))
    for s in best
    if s == best[-1] or s not in latest
  ]
  choices = []
  for step, folder, choice in sorted(candidates, key=lambda c: -c[0]):
    if (folder, step) == failed:
      continue
    try:
      _read_params(ckpt.directory, folder, step, target_params)
    except Exception:  # unreadable for any reason: not offered
      continue
    choices.append(f'--checkpoint={choice}' + (f' (step {step})' if choice == 'best' else ''))
  return choices
