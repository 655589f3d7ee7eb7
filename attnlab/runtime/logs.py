"""The libraries' own logs go to the run's log file; the console keeps attnlab's lines.

By default the console gets attnlab's lines (a summary of the run, progress, evaluations and a
final summary with the test metrics and the run directory's files) and every WARNING and
ERROR. The INFO logs of absl, orbax and JAX (about 45 lines per checkpoint save) go only to
`<workdir>/train.log` (`train.process<p>.log` for process p > 0). absl's `--verbosity` (`-v`)
on the command line brings them back to the console. In a bucket's workdir the log file is a
local copy, uploaded whole every few seconds and at the end (attnlab/storage.py).

    route_library_logs(verbose=False)   # at start-up, before JAX logs anything
    with log_file(layout.log_path(workdir, process_index)):  # once the workdir may be written
      ...
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import traceback
from logging.handlers import MemoryHandler

from absl import logging as absl_logging

from attnlab import storage

_buffer: MemoryHandler | None = None  # records logged before the log file exists
_verbose = False  # --verbosity given: library logs on the console too


class _LibraryNoise(logging.Filter):
  """Drops asyncio's 'Task exception was never retrieved' reports from the console: orbax's
  abandoned reads of an unreadable checkpoint, thousands of lines each, printed long after the
  fallback to an older step has succeeded. They stay in the log file."""

  def filter(self, record: logging.LogRecord) -> bool:
    return not (record.name == 'asyncio' and 'never retrieved' in str(record.msg))


class _OnlyAttnlab(logging.Filter):
  def filter(self, record: logging.LogRecord) -> bool:
    return record.pathname.startswith(_PACKAGE_DIR)


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # attnlab/


@contextlib.contextmanager
def library_detail_to_log_file():
  """Within: the libraries' records (e.g. orbax's errors while a damaged checkpoint is tried)
  reach the log file only; attnlab's own warnings still reach the console."""
  if _verbose:
    yield
    return
  console, quiet = absl_logging.get_absl_handler(), _OnlyAttnlab()
  console.addFilter(quiet)
  try:
    yield
  finally:
    console.removeFilter(quiet)


def _unraisable_to_log_file(unraisable) -> None:
  """Python prints exceptions it cannot raise (abandoned coroutines, __del__) straight to
  stderr. orbax leaves thousands of lines of them behind after a failed checkpoint read (the
  fallback has already succeeded): those from library code go to the log file."""
  frames = traceback.extract_tb(unraisable.exc_traceback) if unraisable.exc_traceback else []
  if any(frame.filename.startswith(_PACKAGE_DIR) for frame in frames):
    sys.__unraisablehook__(unraisable)  # attnlab's own: a bug to see
    return
  logging.getLogger('attnlab.runtime.logs').info(
    '%s %r', unraisable.err_msg or 'Exception ignored in', unraisable.object,
    exc_info=(unraisable.exc_type, unraisable.exc_value, unraisable.exc_traceback))


def route_library_logs(verbose: bool) -> None:
  """Console: WARNING and above unless `verbose`; every record is kept for the log file."""
  global _buffer, _verbose
  _verbose = verbose
  console = absl_logging.get_absl_handler()
  if not verbose:
    console.setLevel(logging.WARNING)
    console.addFilter(_LibraryNoise())
    sys.unraisablehook = _unraisable_to_log_file
  if _buffer is None:
    _buffer = MemoryHandler(capacity=1 << 20, flushLevel=logging.CRITICAL + 1)
    logging.root.addHandler(_buffer)


class _UploadedFileHandler(logging.FileHandler):
  """Writes the local copy of a log file, and uploads it (when the folder is a bucket's)."""

  def __init__(self, copies: storage.LocalCopies, name: str):
    super().__init__(copies.path(name, continued=True), encoding='utf-8')
    self.copies = copies

  def emit(self, record: logging.LogRecord) -> None:
    super().emit(record)
    self.copies.upload()

  def close(self) -> None:
    super().close()
    self.copies.close()


@contextlib.contextmanager
def log_file(path: str):
  """Appends every log record (at the root logger's level) to the log file `path`."""
  global _buffer
  # A multi-process job's process p > 0 may get here before process 0 made the folder:
  # LocalCopies makes it.
  handler = _UploadedFileHandler(storage.LocalCopies(os.path.dirname(path) or '.'),
                                 os.path.basename(path))
  handler.setFormatter(absl_logging.PythonFormatter())
  if _buffer is not None:  # what was logged before the workdir was known comes first
    _buffer.setTarget(handler)
    _buffer.flush()
    logging.root.removeHandler(_buffer)
    _buffer.close()
    _buffer = None
  logging.root.addHandler(handler)
  try:
    yield path
  finally:
    logging.root.removeHandler(handler)
    handler.close()
