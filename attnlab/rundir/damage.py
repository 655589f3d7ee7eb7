"""A checkpoint that cannot be read, told in one line: which file of the step folder is damaged
or missing (`describe`), with the noise a failed orbax read leaves behind dropped
(`drop_orphaned_read_errors`, `orbax_logs_dropped`)."""

from __future__ import annotations

import contextlib
import logging as std_logging
import os
import re
import sys
import traceback
from collections.abc import Iterator

from etils import epath


def reason(error: BaseException, limit: int = 200) -> str:
  """`ValueError: OUT_OF_RANGE: Error reading ...`: the type and the first line, shortened."""
  lines = str(error).strip().splitlines()
  text = f'{type(error).__name__}: {lines[0] if lines else ""}'
  return text if len(text) <= limit else text[:limit - 3] + '...'


def describe(error: BaseException, step_dir: epath.Path) -> str:
  """`state/manifest.ocdbt is damaged (Error decoding manifest: ...)`: the file tensorstore names
  last (the innermost read that failed) and its complaint, else the error's first line."""
  text = str(error).split(' [tensorstore_spec=', 1)[0].strip()
  files = list(re.finditer(r'local file "([^"]+)"(?:: )?', text))
  if isinstance(error, FileNotFoundError):
    if not (step_dir / 'state').exists():
      return 'state is missing'
    named = re.findall(r'/\S*\w', text)  # orbax names the file or folder it looked for
    return f'{_relative(named[-1], step_dir) if named else "a file"} is missing'
  if files and not files[-1].group(1).endswith('/'):
    name = _relative(files[-1].group(1), step_dir)
    if text.startswith('NOT_FOUND'):
      return f'{name} is missing'
    detail = text[files[-1].end():].strip()
    return f'{name} is damaged' + (f' ({detail})' if detail else '')
  absent = re.search(r'Metadata at "([^"]+)/\.zarray" .*does not exist', text)
  if files and absent:
    return (f'{_relative(files[-1].group(1), step_dir)} has no data for {absent.group(1)} (files '
            'are missing, manifest.ocdbt or d/)')
  return reason(error).replace(f'{step_dir}/', '')


def _relative(path: str, step_dir: epath.Path) -> str:
  """The path inside the step folder (the message names the folder once)."""
  return path.removeprefix(f'{step_dir}/')


_orphaned_read_dirs: set[str] = set()


class _OrphanedReads(std_logging.Filter):
  """asyncio's 'Future exception was never retrieved' about a read of a checkpoint directory
  that already failed (see `drop_orphaned_read_errors`)."""

  def filter(self, record: std_logging.LogRecord) -> bool:
    error = record.exc_info[1] if record.exc_info else None
    return not ('never retrieved' in str(record.msg) and error is not None
                and any(d in str(error) for d in _orphaned_read_dirs))


def drop_orphaned_read_errors(directory: epath.Path) -> None:
  """From now on, drops what a failed read of `directory` leaves behind. Tensorstore finishes
  the read's other requests on its own threads and hands each to orbax's event loop, closed by
  then: every one becomes an unraisable `RuntimeError: Event loop is closed` or an asyncio
  'Future exception was never retrieved' record, hundreds of lines on stderr until the process
  exits, after the one error that says what is wrong. Called before the read: the first of
  those records can come while the read's own exception is still on its way to the caller."""
  if not _orphaned_read_dirs:
    std_logging.getLogger('asyncio').addFilter(_OrphanedReads())
    previous = sys.unraisablehook

    def hook(unraisable):
      frames = traceback.extract_tb(unraisable.exc_traceback) if unraisable.exc_traceback else []
      if not (isinstance(unraisable.exc_value, RuntimeError)
              and str(unraisable.exc_value) == 'Event loop is closed'
              and not any(f.filename.startswith(_PACKAGE_DIR) for f in frames)):
        previous(unraisable)

    sys.unraisablehook = hook
  _orphaned_read_dirs.add(str(directory))


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # attnlab/


@contextlib.contextmanager
def orbax_logs_dropped() -> Iterator[None]:
  """Within: the records of absl's logger, which orbax writes to, are dropped. Reading a run
  back, orbax's ERROR about a `_CHECKPOINT_METADATA` that is not JSON (see
  checkpoint_params.damaged_metadata) and its INFO lines are noise; the errors that matter are
  raised."""
  absl_logger, drop = std_logging.getLogger('absl'), (lambda record: False)
  absl_logger.addFilter(drop)
  try:
    yield
  finally:
    absl_logger.removeFilter(drop)
