"""The workdir's lock: one training process at a time.

One training process at a time: `RunLock` holds an exclusive `flock` on WORKDIR/.lock for the
whole run, and a second process on the same workdir is refused, naming the holder's pid and host
(which the file records), before it reads or writes anything else. The kernel drops the lock
when its process dies, however it dies, so a file left by a killed run never blocks a resume.

An object store (--workdir=gs://bucket/run) has no locks, and a lock object of its own would
outlive a killed run and block its resume. There the holder's record is written all the same,
as a check that the bucket takes the run's files, and a warning says that nothing stops a second
process: it is up to the user (or the scheduler) to start one training per workdir.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import socket
import time

from attnlab import storage
from attnlab.errors import UserError
from attnlab.rundir.layout import LOCK_FILE, file_on_the_way, now


class WorkdirInUseError(UserError):
  """Another process is training in the workdir."""


def _path_problem(workdir: str, error: OSError) -> str:
  """One line: why `workdir` cannot hold a run, from the OSError that making it (or a file in
  it) raised, and the way out."""
  way_out = 'name a folder that training can create or write its files in'
  if os.path.lexists(workdir) and not os.path.isdir(workdir):
    problem = 'it is a file, not a folder'
  elif error.errno == errno.ENOTDIR and file_on_the_way(workdir):
    problem = f'{file_on_the_way(workdir)} is a file, not a folder'
  elif error.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
    problem = ('it is on a read-only file system' if error.errno == errno.EROFS
               else 'it is not writable (permission denied)')
    way_out = ('training (and a rerun of a finished run) writes there, so copy the run to a '
               'writable folder to resume it, or name another --workdir')
  else:
    problem = f'it cannot be created or written ({error.strerror or error})'
  return f'--workdir={workdir}: {problem}; {way_out}'


_NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)  # a filesystem that cannot flock


class RunLock:
  """The workdir's lock, held from `RunLock(workdir)` until `release()` (or the process's end).

  Raises `WorkdirInUseError` when another process holds it and `UserError` when `workdir` cannot
  be a run directory (empty, a file, under a file, not writable); in both cases nothing in the
  workdir was changed.
  """

  def __init__(self, workdir: str):
    if not workdir:
      raise UserError('--workdir is empty; name the folder of the run, e.g. '
                      '--workdir=runs/reverse')
    self.path = os.path.join(workdir, LOCK_FILE)
    self._fd = None
    record = {'pid': os.getpid(), 'host': socket.gethostname(), 'since': now()}
    if storage.is_remote(workdir):
      self._record_without_lock(workdir, record)
      return
    try:
      os.makedirs(workdir, exist_ok=True)
      # O_RDWR without O_TRUNC: a refused process leaves the holder's record as it is.
      self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
      raise UserError(_path_problem(workdir, e)) from None
    try:
      fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      holder = self._holder()
      os.close(self._fd)
      raise WorkdirInUseError(
        f'--workdir={workdir} is in use: another training process ({holder}) holds {self.path}; '
        'wait for it to finish (or stop it), or use another --workdir') from None
    except OSError as e:
      if e.errno not in _NO_LOCKS:
        os.close(self._fd)
        raise
      logging.warning('%s cannot be locked (%s): nothing stops a second process from training '
                      'in %s at the same time', self.path, e.strerror, workdir)
    try:
      os.ftruncate(self._fd, 0)
      os.pwrite(self._fd, json.dumps(record).encode(), 0)
      storage.probe_writable(workdir)  # the folder itself takes new files
    except OSError as e:
      self.release()
      raise UserError(_path_problem(workdir, e)) from None

  def _record_without_lock(self, workdir: str, record: dict) -> None:
    try:  # a missing bucket or one without write access fails here, before anything else
      storage.write_text(self.path, json.dumps(record))
    except OSError as e:
      raise UserError(_path_problem(workdir, e)) from None
    logging.warning('%s is on an object store, which has no file locks: nothing stops a second '
                    'process from training in it at the same time', workdir)

  def _holder(self) -> str:
    """'pid P on HOST' from the lock file; the holder writes it right after locking."""
    for _ in range(20):
      with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        record = json.loads(os.pread(self._fd, 4096, 0))
        return f'pid {record["pid"]} on {record["host"]}'
      time.sleep(0.05)
    return 'pid and host not recorded'

  def release(self) -> None:
    if self._fd is not None:
      os.close(self._fd)  # the only descriptor of this open file: the lock goes with it
      self._fd = None

  def __enter__(self) -> RunLock:
    return self

  def __exit__(self, *exc) -> None:
    self.release()
