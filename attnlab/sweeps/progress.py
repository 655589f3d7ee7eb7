"""How far a sweep stands, for the runner's progress lines (attnlab/sweeps/runner.py):

    sweep 3/8 done, 1 failed, 2 running (1 in another process) | steps 4500/12000 (37.5%) |
    5m02s | at most 8m20s left

Several sweep processes may work on one sweep (attnlab/sweeps/claims.py), so the counts cover
the trials of this process and, as their status files tell, the trials the others run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection, Sequence

from attnlab.sweeps.trial_dirs import (
  FINAL_FILE,
  metric_events,
  running_elsewhere,
  trial_dir,
  trial_state,
)
from attnlab.sweeps.trials import Trial

DISK_READ_EVERY_S = 5.0  # at most, between reads of the other processes' trials for progress


def duration(seconds: float) -> str:
  """`1h02m03s`, or `2m03s` under an hour (reports read it back: attnlab/reporting/html.py)."""
  seconds = int(round(max(seconds, 0.0)))
  hours, rest = divmod(seconds, 3600)
  minutes, secs = divmod(rest, 60)
  return f'{hours}h{minutes:02d}m{secs:02d}s' if hours else f'{minutes}m{secs:02d}s'


def last_train_step(directory: str) -> int:
  """The latest step in metrics.jsonl (0 when the run has not logged yet)."""
  steps = (event.get('step', 0) for event in metric_events(directory))
  return max((int(step) for step in steps if isinstance(step, int | float)), default=0)


class Progress:
  """The trials of a sweep as they stand: finished, failed, running, and their steps.

  Args:
    workdir: the sweep directory.
    total_steps: trial name -> train.num_steps.
    progress_every: seconds between progress lines; the other processes' trials are read
      from disk at most this often (and at most every DISK_READ_EVERY_S).
  """

  def __init__(self, workdir: str, total_steps: dict[str, int], progress_every: float):
    self.workdir, self.total_steps, self.progress_every = workdir, total_steps, progress_every
    self._counts = {'finished': 0, 'failed': 0}
    self._settled: set[str] = set()  # trials counted in _counts: ended or resolved here
    # Trials left to another process (or to a trial process that outlived its sweep); the
    # others this process has not reached yet are read from disk too (`_all_counts`).
    self._elsewhere: set[str] = set()
    self._trials: Sequence[Trial] = ()
    self._on_disk: tuple[float, dict[str, int]] | None = None  # (when, counts) of that read

  def start(self, trials: Sequence[Trial]) -> None:
    """Counts `trials` (the ones this process is to run) from now on, and their steps."""
    self._trials, self._total = trials, len(trials)
    self._start = time.monotonic()
    self._done_steps_at_start = sum(self._steps_done(t) for t in trials)

  def settle(self, name: str, state: str) -> None:
    """Trial `name` ended here, or was resolved here: 'finished' or 'failed'."""
    self._settled.add(name)
    self._counts[state] += 1
    self._on_disk = None  # it may have been counted there

  def leave_elsewhere(self, name: str) -> None:
    """Trial `name` is another process's to finish; its status file tells how it stands."""
    self._elsewhere.add(name)

  def line(self, running: Collection[str]) -> str:
    """`sweep 3/8 done, 1 failed, 2 running | steps 4500/12000 (37.5%) | 5m02s | at most 8m20s
    left`: a finished trial counts its whole step cap, the others are assumed to run to theirs,
    so trials that stop early only make the sweep end sooner. The counts include the trials
    another sweep process runs (`2 running (1 in another process)`). `running`: the names of
    the trials this process runs now."""
    trials = self._trials
    total = sum(self.total_steps.get(t.name, 0) for t in trials)
    done = sum(self._steps_done(t) for t in trials)
    elapsed = time.monotonic() - self._start
    rate = (done - self._done_steps_at_start) / elapsed if elapsed > 0 else 0.0
    eta = duration((total - done) / rate) if rate > 0 else '?'  # at the rate since the start
    counts = self._all_counts(running)
    running_text = f'{counts["running"]} running'
    if counts['running'] > len(running):
      running_text += f' ({counts["running"] - len(running)} in another process)'
    percent = 100.0 * done / total if total else 100.0
    return (
      f'sweep {counts["finished"]}/{self._total} done, {counts["failed"]} failed, {running_text}'
      f' | steps {done}/{total} ({percent:.1f}%) | {duration(elapsed)} | at most {eta} left'
    )

  def ended(self, running: Collection[str]) -> int:
    """Trials finished or failed, wherever they ran (a progress line is due when it changes)."""
    counts = self._all_counts(running)
    return counts['finished'] + counts['failed']

  def _steps_done(self, trial: Trial) -> int:
    directory = trial_dir(self.workdir, trial)
    if os.path.isfile(os.path.join(directory, FINAL_FILE)):
      return self.total_steps.get(trial.name, 0)
    return min(last_train_step(directory), self.total_steps.get(trial.name, 0))

  def _all_counts(self, running: Collection[str]) -> dict[str, int]:
    """finished / failed / running over the trials of this sweep, wherever they run: this
    process's own, and the others as they stand on disk (`_others_on_disk`)."""
    others = self._others_on_disk(running)
    return {
      state: n + others[state] for state, n in {**self._counts, 'running': len(running)}.items()
    }

  def _others_on_disk(self, running: Collection[str]) -> dict[str, int]:
    """The trials this process neither ran nor resolved, read from their status files at most
    every few seconds (the runner polls twice a second; a sweep may hold hundreds of trials).
    A trial still queued here counts as running when a live process runs it (another worker
    took it first) and as finished once one has finished it; a failure on disk counts only
    for a trial left to another process (a queued one is tried again here)."""
    now = time.monotonic()
    if self._on_disk and now - self._on_disk[0] < min(self.progress_every, DISK_READ_EVERY_S):
      return self._on_disk[1]
    counts = {'finished': 0, 'failed': 0, 'running': 0}
    for trial in self._trials:
      if trial.name in self._settled or trial.name in running:
        continue
      directory = trial_dir(self.workdir, trial)
      state = trial_state(directory)
      if state == 'finished' or (state == 'failed' and trial.name in self._elsewhere):
        counts[state] += 1
      elif state == 'running' and (trial.name in self._elsewhere or running_elsewhere(directory)):
        counts['running'] += 1
    self._on_disk = (now, counts)
    return counts
