"""Runs the trials of a sweep as local subprocesses, with a progress display (progress.py; SLURM:
slurm.py).

Per trial directory DIR/NAME the runner keeps, next to what `attnlab.main` writes:
  sweep_status.json  {'status': running | finished | failed | interrupted, 'attempts', 'wall_s'
                      (summed over attempts), 'returncode', 'error' (the telling line) and
                      'error_tail' (the last lines of the log), 'config', 'overrides'}
  sweep_log.txt      stdout and stderr of every attempt, appended
A trial is finished when its final_metrics.json exists. Anything else is (re)started; the
training loop resumes it from its latest checkpoint. A trial is started only under its claim
(attnlab/sweeps/claims.py), so several sweep processes on one workdir share the trials out.
Each trial's `attnlab.main` keeps what it compiles in the per-user compilation cache
(attnlab/runtime/compilation_cache.py), so the seeds of a variant compile its programs once.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

from attnlab.rundir import layout, run_times
from attnlab.sweeps import archive as archive_lib
from attnlab.sweeps import claims, slots
from attnlab.sweeps import shared as shared_lib
from attnlab.sweeps.progress import Progress, duration
from attnlab.sweeps.trial_dirs import (
  FINAL_FILE,
  LOG_FILE,
  identity,
  read_status,
  resume_args,
  running_elsewhere,
  tested_line,
  trial_dir,
  trial_state,
  write_status,
)
from attnlab.sweeps.trials import PROJECT_ROOT, SweepError, Trial

_TAIL_LINES = 30
WAIT_RETRY_S = 15.0  # between tries of a trial whose config another experiment is training
_ERROR_LINE = re.compile(r'^(\w+\.)*\w*(Error|Exception|Exit|Interrupt)\b|^FATAL|^Killed')


def error_summary(tail: Sequence[str]) -> str:
  """The line that says what went wrong: the exception line of a traceback, if any."""
  lines = [line.strip() for line in tail if line.strip()]
  for line in reversed(lines):
    if _ERROR_LINE.search(line):
      return line
  return lines[-1] if lines else 'no output'


def _tail(path: str, offset: int) -> list[str]:
  with open(path, errors='replace') as f:
    f.seek(offset)
    return f.read().splitlines()[-_TAIL_LINES:]


def _resume_note(directory: str, killed: dict | None) -> str:
  """' (resuming from checkpoint step 12000; the last attempt was killed at step 12700 after
  41m02s)', or '' for a trial without a checkpoint."""
  saved = layout.saved_steps(directory)
  parts = [f'resuming from checkpoint step {saved[-1]}'] if saved else []
  if killed:
    parts.append(f'the last attempt was killed at step {killed["last_step"]} after '
                 f'{duration(killed["wall_s"])}')
  return f' ({"; ".join(parts)})' if parts else ''


def subprocess_env() -> dict:
  env = dict(os.environ)
  # Config files import `configs.base`; trials must find it from any working directory.
  env['PYTHONPATH'] = os.pathsep.join(p for p in (PROJECT_ROOT, env.get('PYTHONPATH')) if p)
  env['PYTHONUNBUFFERED'] = '1'
  return env


class LocalRunner:
  """Runs trials as `python -m attnlab.main` subprocesses, `parallel` at a time.

  Args:
    workdir: the sweep directory.
    total_steps: trial name -> train.num_steps, for the progress display.
    parallel: trials running at once.
    cpu_share: (K, N): run on the K-th of N shares of this process's CPUs (slots.py).
    archive: a folder that gets a copy of each trial as it finishes (attnlab/sweeps/archive.py).
    progress_every: seconds between progress lines (one also comes whenever a trial ends).
    python: the interpreter that runs `-m attnlab.main`.
    claim_key: what names a trial's claim (claims.py): its resolved config where trials are
      shared, by default its directory.
    copy_shared: copies a trial that another experiment has finished under the same config
      (shared.py) and returns where from, or None; tried once the trial is claimed.
    retry_every: seconds between tries of a trial whose config another experiment is training
      (default WAIT_RETRY_S).
  """

  def __init__(
    self,
    workdir: str,
    total_steps: dict[str, int],
    *,
    parallel: int = 1,
    cpu_share: tuple[int, int] | None = None,
    archive: str | None = None,
    progress_every: float = 30.0,
    poll: float = 0.5,
    python: str = sys.executable,
    out=sys.stdout,
    sleep=time.sleep,
    claim_key: Callable[[Trial], str] | None = None,
    copy_shared: Callable[[Trial], str | None] | None = None,
    retry_every: float | None = None,
  ):
    if parallel < 1:
      raise SweepError(f'--parallel={parallel} must be >= 1')
    self.workdir, self.total_steps, self.parallel = workdir, total_steps, parallel
    self.archive = archive
    self.progress_every, self.poll, self.python, self.out = progress_every, poll, python, out
    self._sleep = sleep  # between polls of the running processes
    self.claim_key = claim_key or (lambda trial: os.path.abspath(trial_dir(workdir, trial)))
    self.copy_shared = copy_shared
    self.retry_every = WAIT_RETRY_S if retry_every is None else retry_every
    self._running: dict[str, tuple[Trial, subprocess.Popen, float, int, claims.Claim]] = {}
    self._waiting: dict[str, float] = {}  # trial name -> when to try it again
    self._progress = Progress(workdir, total_steps, progress_every)
    self._slots = slots.plan(parallel, share=cpu_share)  # the devices of each trial at once
    self._free_slots = list(range(parallel))
    self._slot_of: dict[str, int] = {}

  def _print(self, line: str) -> None:
    print(line, file=self.out, flush=True)

  def record_invalid(self, trial: Trial, error: str) -> None:
    """A trial whose config does not build is failed without starting a process."""
    directory = trial_dir(self.workdir, trial)
    status = {
      **read_status(directory),
      **identity(trial),
      'status': 'failed',
      'returncode': None,
      'error': error,
      'error_tail': [error],
    }
    status.setdefault('wall_s', 0.0)
    status.setdefault('attempts', 0)
    write_status(directory, status)
    self._progress.settle(trial.name, 'failed')
    self._print(f'[FAILED] {trial.name}: invalid config: {error}')

  def run(self, trials: Sequence[Trial]) -> dict[str, str]:
    """Runs `trials` (none of them finished); returns name -> final state, 'running' for a
    trial another process runs (that process finishes it)."""
    queue, states = list(trials), {}
    self._progress.start(trials)
    last_progress = time.monotonic()
    done_before = self._progress.ended(self._running)  # a progress line whenever it changes
    if queue and any(slot.has_own_devices for slot in self._slots):
      self._print('devices: ' + '; '.join(f'slot {slot.index}: {slot.devices}'
                                          for slot in self._slots))
    try:
      while queue or self._running:
        while queue and len(self._running) < self.parallel:
          picked = self._claim_next(queue, states)
          if picked is None:
            break
          self._launch(*picked)
        ended = [name for name, (_, p, *_) in self._running.items() if p.poll() is not None]
        for name in ended:
          states[name] = self._finish(name)
        done_here = self._progress.ended(self._running)
        if done_here != done_before or time.monotonic() - last_progress >= self.progress_every:
          done_before = done_here
          self._print(self._progress.line(self._running))
          last_progress = time.monotonic()
        if self._running or queue:  # a queue left: trials waiting for another experiment
          self._sleep(self.poll)
    except KeyboardInterrupt:
      self._interrupt()
      raise
    return states

  def _claim_next(self, queue: list[Trial], states: dict) -> tuple[Trial, claims.Claim] | None:
    """Takes the first trial of `queue` this process can start, claimed. On the way it drops
    the trials another process runs or has finished, copies those another experiment has
    finished, and leaves queued, to try again later, those whose config another experiment is
    training now."""
    now = time.monotonic()
    for trial in list(queue):
      if self._waiting.get(trial.name, now) > now:
        continue
      directory = trial_dir(self.workdir, trial)
      pid = running_elsewhere(directory)  # a trial process that outlived its sweep
      if pid:
        queue.remove(trial)
        states[trial.name] = 'running'
        self._progress.leave_elsewhere(trial.name)
        self._print(f'[skip] {trial.name}: still running as process {pid}; not started twice')
        continue
      claim = claims.try_claim(claims.claim_path(self.workdir, self.claim_key(trial)), directory)
      if not isinstance(claim, claims.Claim):
        if claim.get('trial_dir') == os.path.abspath(directory):
          queue.remove(trial)
          states[trial.name] = 'running'
          self._progress.leave_elsewhere(trial.name)
          self._print(f'[skip] {trial.name}: sweep process {claim.get("pid")} runs it')
          continue
        if trial.name not in self._waiting:
          where = claim.get('trial_dir', 'another sweep')
          self._print(f'[wait] {trial.name}: the same config is training in {where}; copied '
                      'from there when it finishes')
        self._waiting[trial.name] = now + self.retry_every
        continue
      # Claimed: what another process did before letting go is on disk now.
      queue.remove(trial)
      if trial_state(directory) == 'finished':
        claim.release()
        states[trial.name] = 'finished'
        self._progress.settle(trial.name, 'finished')
        self._print(f'[skip] {trial.name}: finished by another sweep process')
        continue
      origin = self.copy_shared(trial) if self.copy_shared else None
      if origin:
        claim.release()
        states[trial.name] = 'finished'
        self._progress.settle(trial.name, 'finished')
        self._print(shared_lib.copied_line(trial.name, origin))
        continue
      return trial, claim
    return None

  def _launch(self, trial: Trial, claim: claims.Claim) -> None:
    directory = trial_dir(self.workdir, trial)
    os.makedirs(directory, exist_ok=True)
    slot = self._free_slots.pop(0)
    status = read_status(directory)
    # A trial process killed with no chance to record its time (a session or machine that
    # ended) left its run-time line; a 'running' status means no runner counted that attempt.
    killed = run_times.recover_killed_run(directory)
    wall_s = status.get('wall_s', 0.0)
    if killed and status.get('status') == 'running':
      wall_s += killed['wall_s']
    command = trial.command(directory, self.python) + resume_args(directory, trial)
    log_path = os.path.join(directory, LOG_FILE)
    with open(log_path, 'a') as log:
      offset = log.tell()
      attempt = status.get('attempts', 0) + 1
      log.write(
        f'=== attempt {attempt} {time.strftime("%Y-%m-%d %H:%M:%S")}: {shlex.join(command)}\n'
      )
      log.flush()
      process = subprocess.Popen(
        command,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**subprocess_env(), **self._slots[slot].env},
        cwd=os.getcwd(),
      )
      self._slots[slot].pin(process.pid)
    write_status(
      directory,
      {
        **status,
        **identity(trial),
        'status': 'running',
        'attempts': attempt,
        'command': command,
        'wall_s': wall_s,
        'pid': process.pid,
        'host': socket.gethostname(),
      },
    )
    self._running[trial.name] = (trial, process, time.monotonic(), offset, claim)
    self._slot_of[trial.name] = slot
    where = (f' (slot {slot}: {self._slots[slot].devices})'
             if self._slots[slot].has_own_devices else '')
    self._print(f'[start] {trial.name}{where}{_resume_note(directory, killed)}')

  def _finish(self, name: str) -> str:
    trial, process, started, offset, claim = self._running.pop(name)
    self._free_slots.append(self._slot_of.pop(name))
    self._free_slots.sort()
    directory = trial_dir(self.workdir, trial)
    elapsed = time.monotonic() - started
    status = read_status(directory)
    status.pop('pid', None)
    status['wall_s'] = status.get('wall_s', 0.0) + elapsed
    status['returncode'] = process.returncode
    if process.returncode == 0 and os.path.isfile(os.path.join(directory, FINAL_FILE)):
      status.update(status='finished', error=None, error_tail=[])
      self._progress.settle(name, 'finished')
      took = duration(elapsed)
      if status.get('attempts', 1) > 1:  # a resumed trial: its whole wall time beside this one
        took += f" ({duration(status['wall_s'])} over {status['attempts']} attempts)"
      result = tested_line(directory, 'sequence_accuracy')
      self._print(f'[done] {trial.name} in {took}' + (f' | {result}' if result else ''))
    else:
      tail = _tail(os.path.join(directory, LOG_FILE), offset)
      status.update(status='failed', error=error_summary(tail), error_tail=tail)
      self._progress.settle(name, 'failed')
      self._print(
        f'[FAILED] {trial.name} (exit {process.returncode}): {status["error"]} '
        f'-- log: {os.path.join(directory, LOG_FILE)}'
      )
    write_status(directory, status)
    if self.archive and status['status'] == 'finished':
      with claims.sweep_lock(self.workdir):  # not while another process restores the archive
        kept = archive_lib.archive_trial(self.workdir, self.archive, trial)
      self._print(f'[archived] {trial.name} -> {kept}')
    claim.release()  # only now: a trial of the same config elsewhere copies the archived one
    return status['status']

  def _interrupt(self) -> None:
    """Stops running trials and records them as interrupted (a rerun resumes them)."""
    for name, (trial, process, started, _, claim) in list(self._running.items()):
      process.terminate()
      try:
        process.wait(timeout=30)
      except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
      directory = trial_dir(self.workdir, trial)
      status = read_status(directory)
      status.pop('pid', None)
      status.update(
        status='interrupted',
        returncode=process.returncode,
        wall_s=status.get('wall_s', 0.0) + time.monotonic() - started,
      )
      write_status(directory, status)
      claim.release()
      self._print(f'[interrupted] {name}; rerun the sweep to resume it')
    self._running.clear()
