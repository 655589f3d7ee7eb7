"""A trained model copied out of its run directory, so that a results folder opens as a run.

`copy_model(RUN, OUT)` copies RUN's vocabularies and its best checkpoint (parameters and the
record of the choice: checkpoints/best/<step>/, no optimizer state, about a third of a latest
checkpoint's size) from RUN, a local folder or a bucket's, into the local folder OUT beside
OUT's config.json. attnlab.decode, attnlab.evaluate, attnlab.explore and attnlab.load_run then
read OUT as they read RUN, with --checkpoint=best (the default), and a reader of the results
can decode with the model without training it.
"""

from __future__ import annotations

import os
import shutil

from etils import epath

from attnlab import storage
from attnlab.errors import UserError
from attnlab.rundir import layout


class PublishError(UserError):
  """A run whose model cannot be copied."""


def check_model(run_dir: str) -> tuple[int, str]:
  """(step, folder) of RUN's best checkpoint, after checking that RUN has one and its
  vocabularies.

  Raises:
    PublishError: no best checkpoint (a run still in its first evaluation interval), or a
      vocabulary missing.
  """
  steps = layout.saved_steps(run_dir, best=True)
  if not steps:
    raise PublishError(
      f'{run_dir} has no best checkpoint in {layout.best_checkpoint_dir(run_dir)}'
      ': a run saves one at each evaluation that improves the selection metric'
    )
  for name in layout.VOCAB_FILES.values():
    if not epath.Path(run_dir, name).is_file():
      raise PublishError(
        f'{os.path.join(run_dir, name)} is missing: the model cannot be used without it'
      )
  return steps[-1], os.path.join(layout.best_checkpoint_dir(run_dir), str(steps[-1]))


def copy_model(run_dir: str, out: str) -> int:
  """Copies RUN's vocabularies and best checkpoint into the existing folder OUT (replacing an
  earlier copy); returns the checkpoint's step.

  Raises:
    PublishError: as `check_model`; nothing is copied then.
  """
  step, source = check_model(run_dir)
  for name in layout.VOCAB_FILES.values():
    storage.copy_file(os.path.join(run_dir, name), os.path.join(out, name))
  target = layout.best_checkpoint_dir(out)
  tmp = f'{target}.{os.getpid()}.tmp'
  shutil.rmtree(tmp, ignore_errors=True)
  storage.copy_tree(source, os.path.join(tmp, str(step)))
  shutil.rmtree(target, ignore_errors=True)  # an earlier copy, perhaps of another step
  os.makedirs(os.path.dirname(target), exist_ok=True)
  os.replace(tmp, target)
  return step
