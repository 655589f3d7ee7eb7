"""run_times.jsonl: one line per process run of a training, finished, stopped or killed, so
that no wall or CPU time is lost or counted twice (attnlab.run_report and sweep reports sum it).
"""

from __future__ import annotations

import json
import math
import os
import time

from etils import epath

from attnlab import storage
from attnlab.rundir.layout import RUN_IN_PROGRESS, RUN_TIMES, now


def _append_run_time(workdir: str, record: dict) -> None:
  storage.append_text(os.path.join(workdir, RUN_TIMES), json.dumps(record) + '\n')


class RunTimeRecord:
  """This process run's line of run_times.jsonl: kept current on disk while the run goes
  (`update`), appended with its outcome at the end (`close`). Does nothing when disabled (a
  multi-host run's other processes)."""

  def __init__(self, workdir: str, *, first_step: int, started: float, cpu_started: float,
               enabled: bool = True, machine: str | None = None):
    """started: time.perf_counter() when the run began; cpu_started: time.process_time() then;
    machine: what it runs on (attnlab/runtime/machine.py), so that its times can be compared."""
    self.workdir, self.first_step, self.started = workdir, first_step, started
    self.cpu_started, self.machine = cpu_started, machine
    self.enabled = enabled
    self._written = -math.inf  # when update last wrote the record
    self.update(first_step)

  def _record(self, last_step: int, outcome: str) -> dict:
    # cpu_s: the CPU time of the process's threads during the run: the compute it used, which
    # a paused (SIGSTOP) or crowded run does not inflate as it does wall_s.
    return {'first_step': self.first_step, 'last_step': last_step,
            'wall_s': time.perf_counter() - self.started,
            'cpu_s': time.process_time() - self.cpu_started,
            'outcome': outcome, 'finished_at': now(),
            **({'machine': self.machine} if self.machine else {})}

  def update(self, last_step: int) -> None:
    """Rewrites the record (in a bucket at most every storage.UPLOAD_EVERY_S seconds)."""
    if not self.enabled:
      return
    if (storage.is_remote(self.workdir)
        and time.monotonic() - self._written < storage.UPLOAD_EVERY_S):
      return
    self._written = time.monotonic()
    text = json.dumps(self._record(last_step, 'killed'))
    # A kill mid-write leaves the previous record whole.
    storage.replace_whole(os.path.join(self.workdir, RUN_IN_PROGRESS),
                          lambda path: storage.write_text(path, text))

  def close(self, last_step: int, outcome: str) -> None:
    """Appends the run's line (finished, stopped early, interrupted or failed)."""
    if not self.enabled:
      return
    _append_run_time(self.workdir, self._record(last_step, outcome))
    epath.Path(self.workdir, RUN_IN_PROGRESS).unlink(missing_ok=True)


def recover_killed_run(workdir: str) -> dict | None:
  """Appends the line a killed process left in RUN_IN_PROGRESS to run_times.jsonl (outcome
  'killed'; wall time up to its last log step) and returns it; None when there is none.
  Call only when no process is running in `workdir`."""
  path = epath.Path(workdir, RUN_IN_PROGRESS)
  try:
    record = json.loads(storage.read_text(path))
  except FileNotFoundError:
    return None
  except (OSError, ValueError):  # not JSON, or not UTF-8
    record = None  # unreadable: nothing to recover, but do not fold it again
  if record is not None:
    _append_run_time(workdir, record)
  path.unlink()
  return record
