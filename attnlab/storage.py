"""Where a run's files live: a local folder, or a bucket of an object store that etils.epath
reads and writes without a mount (`--workdir=gs://bucket/run`; docs/running.md, Cloud workdirs).

Readers and writers of a run directory go through `epath.Path` and the helpers here, so that one
path string serves both. An object store is not a disk in three ways they meet:

- An object cannot grow. `append_text` rewrites it whole (the few lines a process run appends);
  files that grow all run long (metrics.jsonl, train.log, TensorBoard events) are written to a
  local copy that `LocalCopies` uploads whole, at most every UPLOAD_EVERY_S seconds and at the end.
- One upload replaces an object at once, and a rename there is a copy and a delete: `replace_whole`
  writes in place there, and through a temporary file renamed over the target on a local disk.
- There are no file locks (attnlab/rundir/lock.py says what a training does instead).
"""

from __future__ import annotations

import io
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable

from etils import epath

from attnlab.errors import UserError

SCHEMES = ('gs', 's3', 'az', 'hf')  # the object stores etils.epath reaches, as URL schemes
# Object stores take about one write per second of an object (GCS answers more with HTTP 429):
# a growing file is uploaded at most this often, so a killed run loses at most its last seconds.
UPLOAD_EVERY_S = 10.0


def is_remote(path: str | os.PathLike) -> bool:
  """Whether `path` is a URL (gs://bucket/run) rather than a local path."""
  return '://' in os.fspath(path)


def check_reachable(path: str, flag: str) -> None:
  """Raises UserError, naming `flag`, for a URL of a scheme etils.epath does not know."""
  scheme, separator, _ = os.fspath(path).partition('://')
  if separator and scheme not in SCHEMES:
    raise UserError(
      f'{flag}={path}: {scheme}:// is not a storage attnlab reaches; give a local '
      f'folder or a {", ".join(s + "://" for s in SCHEMES)} URL'
    )


def open_text(path: str | os.PathLike, *, errors: str = 'strict') -> io.TextIOWrapper:
  """Opens the UTF-8 text file `path` for reading, wherever it is (epath's own text mode
  leaves the encoding to the object store's library)."""
  return io.TextIOWrapper(epath.Path(path).open('rb'), encoding='utf-8', errors=errors)


def read_text(path: str | os.PathLike) -> str:
  return epath.Path(path).read_bytes().decode('utf-8')


def write_text(path: str | os.PathLike, text: str) -> None:
  epath.Path(path).write_bytes(text.encode('utf-8'))


def make_folder(path: str | os.PathLike) -> None:
  """Makes the local folder `path` and its parents; a bucket has no folders to make (an object
  is named by its whole path)."""
  if not is_remote(path):
    os.makedirs(path, exist_ok=True)


def copy_file(source: str | os.PathLike, target: str | os.PathLike) -> None:
  """Copies the bytes of the file `source` to `target`, each local or a bucket's."""
  epath.Path(target).write_bytes(epath.Path(source).read_bytes())


def copy_tree(source: str | os.PathLike, target: str, *, top_only: bool = False) -> None:
  """Copies the files under the folder `source` (local or a bucket's) into the local folder
  `target`, keeping their relative paths; with `top_only`, the files directly in it alone. A
  folder at a time: a bucket is not searched recursively (one listing per folder)."""
  for path in epath.Path(source).iterdir():
    local = os.path.join(target, path.name)
    if path.is_dir():
      if not top_only:
        copy_tree(path, local)
    else:
      os.makedirs(target, exist_ok=True)
      copy_file(path, local)


def append_text(path: str | os.PathLike, text: str) -> None:
  """Adds `text` at the end of the UTF-8 file `path`, made if absent. An object is read and
  written again whole: it cannot grow."""
  if not is_remote(path):
    with open(path, 'a', encoding='utf-8') as f:
      f.write(text)
    return
  target = epath.Path(path)
  before = target.read_bytes() if target.exists() else b''
  target.write_bytes(before + text.encode('utf-8'))


def replace_whole(path: str | os.PathLike, write: Callable[[str], None]) -> None:
  """`write(p)` writes the file `path` so that a reader (another process of the job, the next
  start after a kill mid-write) finds the old file or the new one, never part of one. On a
  local disk `p` is a temporary file beside `path`, renamed over it; on an object store `p` is
  `path` itself, since one upload replaces an object at once."""
  path = os.fspath(path)
  if is_remote(path):
    write(path)
    return
  tmp = f'{path}.{os.getpid()}.tmp'
  write(tmp)
  os.replace(tmp, path)


def probe_writable(folder: str | os.PathLike) -> None:
  """Writes a file into the existing `folder` and removes it; OSError if it cannot be written.
  Permission bits alone do not say it: root writes past them, a read-only mount stops everyone,
  and a bucket has none."""
  if not is_remote(folder):
    with tempfile.TemporaryFile(dir=folder):
      return
  probe = epath.Path(folder) / f'.attnlab-probe-{os.getpid()}'
  probe.write_bytes(b'')
  probe.unlink()


def _stamp(path: str) -> tuple[int, int]:
  info = os.stat(path)
  return info.st_size, info.st_mtime_ns


class LocalCopies:
  """Files of the folder `folder` that grow all run long, written as local files: the files
  themselves when `folder` is local; otherwise copies in a temporary folder, which `upload`
  puts into `folder` whole (an object cannot grow) and `close` removes."""

  def __init__(self, folder: str | os.PathLike):
    self.folder = os.fspath(folder)
    self.remote = is_remote(self.folder)
    self.root = tempfile.mkdtemp(prefix='attnlab-copies-') if self.remote else self.folder
    self._uploaded: dict[str, tuple[int, int]] = {}  # local path -> (size, mtime) uploaded
    self._last_upload = -math.inf

  def path(self, name: str, *, continued: bool = False) -> str:
    """The local file for `name` (a path relative to the folder), its folders made. With
    `continued`, the copy starts as the folder's file, if there is one, so that appends to the
    copy continue it (a resumed run's metrics.jsonl)."""
    local = os.path.join(self.root, name)
    os.makedirs(os.path.dirname(local) or '.', exist_ok=True)
    source = epath.Path(self.folder) / name if self.remote and continued else None
    if source is not None and source.exists():
      with open(local, 'wb') as f:
        f.write(source.read_bytes())
      self._uploaded[local] = _stamp(local)
    return local

  def upload(self, *, now: bool = False) -> None:
    """Uploads each copy that changed since its last upload, unless the last upload was less
    than UPLOAD_EVERY_S seconds ago (and not `now`)."""
    if not self.remote or (not now and time.monotonic() - self._last_upload < UPLOAD_EVERY_S):
      return
    self._last_upload = time.monotonic()  # first: an upload that logs starts no other (train.log)
    for directory, _, names in os.walk(self.root):
      for name in sorted(names):
        local = os.path.join(directory, name)
        stamp = _stamp(local)
        if self._uploaded.get(local) == stamp:
          continue
        target = epath.Path(self.folder) / os.path.relpath(local, self.root)
        with open(local, 'rb') as f:
          target.write_bytes(f.read())
        self._uploaded[local] = stamp

  def close(self) -> None:
    """Uploads what changed and removes the local copies of a remote folder."""
    if self.remote and os.path.isdir(self.root):
      self.upload(now=True)
      shutil.rmtree(self.root, ignore_errors=True)
