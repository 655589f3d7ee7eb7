"""Several sweep processes on one host share out trials: each claims a trial before starting it.

Run the same sweep command twice (two shells, or `make ablations`: ABLATION_WORKERS=2) and
the two processes divide the trials between them: a trial is started only by the process that
holds its claim, an exclusive `flock` on one file per trial in WORKDIR/../.sweep_claims/. The
kernel drops a claim when its process exits, however it exits, so a killed sweep leaves none
behind. A process that finds no trial left to claim moves on (to the next experiment of a
queue) while the other finishes what it holds: every core stays busy across experiments.

The claim is named by the trial's resolved config when the sweep shares trials
(attnlab/sweeps/shared.py), so one file stands for the same config in every experiment whose
workdir is beside this one (runs/bottleneck and runs/score_timing_bible). A trial whose config
another experiment is training right now then waits for it and is copied when it finishes,
instead of being trained twice. Without sharing the claim is named by the trial directory. The
same folder holds the locks that serialize one sweep's setup and report (sweep_lock) and every
sweep's dataset preparation (data_lock).

Each claim file holds the JSON of its holder ({'trial_dir', 'pid', 'host'}) so the others can
tell "another process runs this very trial" (leave it) from "another experiment trains the same
config" (wait). flock is per host: processes on other hosts do not see these claims, and on a
filesystem without locks (some cluster filesystems refuse flock) claims are not enforced: run
one sweep process there.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import socket
from collections.abc import Iterator

CLAIMS_DIR = '.sweep_claims'  # beside the workdir: shared by the experiments of one runs/ folder


def claims_dir(workdir: str) -> str:
  return os.path.join(os.path.dirname(os.path.abspath(workdir)), CLAIMS_DIR)


def claim_path(workdir: str, key: str) -> str:
  """The claim file for `key` (a config key, or a trial directory's absolute path)."""
  digest = hashlib.sha256(key.encode()).hexdigest()[:24]
  return os.path.join(claims_dir(workdir), f'{digest}.lock')


_NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)  # a filesystem that cannot flock


def _flock(handle, blocking: bool) -> bool:
  """Locks `handle`: False when another process holds it (non-blocking). A filesystem without
  locks counts as locked: nothing to share out there."""
  try:
    fcntl.flock(handle, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
  except BlockingIOError:
    return False
  except OSError as e:
    if e.errno not in _NO_LOCKS:
      raise
  return True


class Claim:
  """A held claim: the open, locked file. `release()` (or the process's exit) drops it."""

  def __init__(self, handle):
    self._handle = handle

  def release(self) -> None:
    if self._handle is not None:
      self._handle.close()  # closing the only descriptor of the file lets go of the lock
      self._handle = None


def try_claim(path: str, trial_dir: str) -> Claim | dict:
  """Claims `path` for `trial_dir`: the Claim, or, when another process holds it, what its
  file says of the holder ({} while the holder is still writing it)."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  handle = open(path, 'a+')  # noqa: SIM115 - kept open while the claim is held
  if not _flock(handle, blocking=False):
    handle.seek(0)
    text = handle.read()
    handle.close()
    try:
      return json.loads(text)
    except ValueError:
      return {}
  handle.seek(0)
  handle.truncate()
  holder = {
    'trial_dir': os.path.abspath(trial_dir),
    'pid': os.getpid(),
    'host': socket.gethostname(),
  }
  handle.write(json.dumps(holder))
  handle.flush()
  return Claim(handle)


@contextlib.contextmanager
def _exclusive(path: str) -> Iterator[None]:
  """Blocks until this process alone holds the lock file `path`."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'a') as handle:  # closing the file lets go of the lock
    _flock(handle, blocking=True)
    yield


def sweep_lock(workdir: str) -> contextlib.AbstractContextManager[None]:
  """The steps two sweep processes on one workdir must not interleave: restoring and archiving
  trials, writing the report."""
  return _exclusive(claim_path(workdir, f'sweep {os.path.abspath(workdir)}'))


def data_lock(workdir: str) -> contextlib.AbstractContextManager[None]:
  """Preparing datasets: sweeps beside each other (two workers, or two experiments on one task)
  would otherwise write the same TFDS files at once on first use."""
  return _exclusive(claim_path(workdir, 'data'))
