"""The run directory: the check that a reused one holds the same config, and the files of a start.

Rerunning a command on its workdir resumes the run. Before anything is written, the config is
compared with the run's saved `config.json` (or, without it, the config stored in the latest
checkpoint). Keys in `UNOBSERVABLE` (where and how often the run is watched and saved) change
freely, with a logged note. Any other difference stops with the changed keys (old -> new) and
the two ways out: a new `--workdir`, or `--allow_config_change=KEY,...` for keys in
`RESUMABLE`, which change how long or how fast training goes on but leave the checkpoints
restorable and meaningful. Every other key (model shape, task, data, seed, batch size,
optimiser, the evaluation settings the selected step was measured with, ...) cannot change on
resume. A key that only one of the two configs has (attnlab added or removed it since the run
started) may be accepted with the flag too. Accepted changes rewrite `config.json` and are
recorded in `config_changes.jsonl`; the vocabularies are never rewritten (a resumed run must
build the same ones, else it stops: the data changed).

Extending `train.num_steps`: the learning-rate schedule is rebuilt over the new number of steps
from the resumed step on. `constant` and `rsqrt` do not depend on it; `cosine` and `linear`
then jump (usually up) at the resumed step; the message gives both learning rates.

One training process at a time: `RunLock` holds an exclusive `flock` on WORKDIR/.lock for the
whole run, and a second process on the same workdir is refused, naming the holder's pid and host
(which the file records), before it reads or writes anything else. The kernel drops the lock
when its process dies, however it dies, so a file left by a killed run never blocks a resume.
"""

from __future__ import annotations

import contextlib
import datetime
import difflib
import errno
import fcntl
import json
import logging
import os
import socket
import tempfile
import time
from typing import Any

from attnlab.errors import UserError

CONFIG_FILE = 'config.json'
CONFIG_CHANGES = 'config_changes.jsonl'
METRICS_FILE = 'metrics.jsonl'  # one JSON event per line: {step, split, metric: value, ...}
FINAL_METRICS_FILE = 'final_metrics.json'  # written when the run ends: the test of the best step
VOCAB_FILES = {'source': 'source_vocab.json', 'target': 'target_vocab.json'}
CHECKPOINTS = 'checkpoints'  # RUN/checkpoints/<step>/ (the latest ones) and best/<step>/
# One line per process run, finished or not: {first_step, last_step, wall_s, outcome,
# finished_at}; a resumed run adds a line (attnlab.run_report sums wall_s).
RUN_TIMES = 'run_times.jsonl'
# The running process's line, rewritten at every log step: a process killed without a chance
# to append its line (SIGKILL, a machine or session that ends) leaves it, and the next start
# (or sweep launch) appends it as outcome 'killed', so no wall time is lost.
RUN_IN_PROGRESS = 'run_time_current.json'
LOCK_FILE = '.lock'  # held (flock) by the process that trains in the workdir; {pid, host}

# Keys that change neither what is trained nor how it is selected: accepted on resume.
UNOBSERVABLE = (
  'train.log_every',
  'train.checkpoint_every',
  'train.keep_checkpoints',
  'eval.num_samples',
  'eval.num_heatmaps',
  'data.prefetch',
  'parallel.mode',  # checkpoints hold host arrays, the same in both modes
  'parallel.num_devices',  # the global batch is the same on any number of devices
)
# Keys that may change on resume with --allow_config_change: how long training goes on, when
# it is evaluated and stopped (a lower learning-rate floor lets a run that stopped there go on),
# and the learning rate (to continue a diverged run from its last good checkpoint).
RESUMABLE = (
  'train.num_steps',
  'train.eval_every',
  'train.patience',
  'train.divergence_factor',
  'optim.learning_rate',
  'optim.plateau_min_scale',
)
_ABSENT = '(absent)'


def _now() -> str:
  return datetime.datetime.now().astimezone().isoformat()


class WorkdirConfigError(UserError):
  """The workdir holds a run whose config differs from this one."""


def flatten(tree: dict, prefix: str = '') -> dict[str, Any]:
  """{'train': {'num_steps': 4}} -> {'train.num_steps': 4}."""
  out = {}
  for key, value in tree.items():
    name = f'{prefix}{key}'
    if isinstance(value, dict):
      out.update(flatten(value, f'{name}.'))
    else:
      out[name] = value
  return out


def config_as_json(config) -> dict:
  """The ConfigDict as config.json stores it (tuples become lists)."""
  return json.loads(config.to_json_best_effort(sort_keys=True))


def checkpoint_dir(workdir: str) -> str:
  return os.path.join(workdir, CHECKPOINTS)


def saved_steps(workdir: str, *, best: bool = False) -> list[int]:
  """Checkpoint steps on disk, ascending: the numeric folders of RUN/checkpoints (finished
  saves; orbax writes into a temporary name first), or of RUN/checkpoints/best."""
  folder = checkpoint_dir(workdir)
  if best:
    folder = os.path.join(folder, 'best')
  return sorted(int(n) for n in os.listdir(folder) if n.isdigit()) if os.path.isdir(folder) else []


def saved_config(workdir: str) -> tuple[dict | None, str]:
  """The run's config dict and where it came from; (None, '') for a new workdir."""
  path = os.path.join(workdir, CONFIG_FILE)
  if os.path.isfile(path):
    try:
      with open(path, encoding='utf-8') as f:
        return json.load(f), path
    except (OSError, json.JSONDecodeError) as e:
      raise WorkdirConfigError(f'{path} cannot be read ({e}); use a new --workdir, or delete '
                               'the file to compare with the latest checkpoint') from None
  if saved_steps(workdir):
    from attnlab.checkpoint import Checkpointer  # JAX and orbax only for this rare case

    with Checkpointer(checkpoint_dir(workdir), keep=1) as ckpt:
      return ckpt.restore_config(), f'the latest checkpoint in {ckpt.directory}'
  return None, ''


def changed_keys(old: dict, new: dict) -> dict[str, tuple[Any, Any]]:
  """Dotted key -> (old, new) for every key whose value differs or that one side lacks."""
  old_flat, new_flat = flatten(old), flatten(new)
  keys = sorted(set(old_flat) | set(new_flat))
  return {k: (old_flat.get(k, _ABSENT), new_flat.get(k, _ABSENT)) for k in keys
          if old_flat.get(k, _ABSENT) != new_flat.get(k, _ABSENT)}


def _may_change(key: str, old: Any, new: Any) -> bool:
  return key in RESUMABLE or key in UNOBSERVABLE or _ABSENT in (old, new)


def schedule_note(old: dict, cfg, resume_step: int | None) -> str:
  """What extending (or shortening) train.num_steps does to the learning rate."""
  from attnlab import optim  # JAX only when the note is needed

  kind, new_steps = cfg.optim.schedule, cfg.train.num_steps
  if kind in ('constant', 'rsqrt', 'plateau'):
    return f'the {kind} schedule does not depend on train.num_steps: unchanged'
  if resume_step is None:
    return f'no checkpoint yet: the {kind} schedule simply runs over {new_steps} steps'
  try:
    before = float(optim.make_schedule(old['optim'], int(old['train']['num_steps']))(resume_step))
  except Exception:  # an old config this attnlab cannot read: say what is known
    return f'the {kind} schedule is rebuilt over {new_steps} steps from step {resume_step} on'
  after = float(optim.make_schedule(cfg.optim, new_steps)(resume_step))
  return (f'the {kind} schedule is rebuilt over {new_steps} steps, so at step {resume_step} the '
          f'learning rate jumps from {before:.3g} to {after:.3g}')


def check_allowed_changes(workdir: str, config, allow=()) -> None:
  """Raises `WorkdirConfigError` for a key in `allow` (`--allow_config_change`) that is not a
  key of `config`, nor of the run's config.json (a key attnlab removed since the run started)."""
  known = set(flatten(config_as_json(config)))
  if all(key in known for key in allow):
    return
  with contextlib.suppress(OSError, ValueError):  # only consulted for the names it holds
    with open(os.path.join(workdir, CONFIG_FILE), encoding='utf-8') as f:
      saved = json.load(f)
    known |= set(flatten(saved)) if isinstance(saved, dict) else set()
  for key in allow:
    if key not in known:
      close = difflib.get_close_matches(key, sorted(known), n=1)
      hint = f' (did you mean {close[0]}?)' if close else ''
      raise WorkdirConfigError(
        f'--allow_config_change={",".join(allow)}: {key!r} is not a config key{hint}; the keys '
        f'that may change on resume with it: {", ".join(RESUMABLE)}')


def check_reuse(workdir: str, config, cfg, allow=()) -> tuple[dict, list[str]]:
  """Raises `WorkdirConfigError` unless `config` matches the run in `workdir` (module doc).

  Args:
    workdir: the run directory (may not exist yet).
    config: the ConfigDict of this run; cfg: its parsed `attnlab.config.RunConfig`.
    allow: dotted keys accepted to change (`--allow_config_change`).

  Returns:
    The accepted changes {key: (old, new)} (empty for a new workdir or an identical config)
    and one line describing each, for the log.
  """
  old, origin = saved_config(workdir) if os.path.isdir(workdir) else (None, '')
  if old is None:
    return {}, []
  changes = changed_keys(old, config_as_json(config))
  if not changes:
    return {}, []
  steps = saved_steps(workdir)
  resume_step = steps[-1] if steps else None

  def describe(key: str) -> str:
    before, after = changes[key]
    line = f'  {key}: {before!r} -> {after!r}'
    if key == 'train.num_steps':
      line += f' ({schedule_note(old, cfg, resume_step)})'
    elif key in UNOBSERVABLE:
      line += ' (accepted: does not change what is trained)'
    elif not _may_change(key, before, after):
      line += ' (cannot change on resume)'
    return line

  refused = [k for k in changes
             if k not in UNOBSERVABLE and (k not in allow or not _may_change(k, *changes[k]))]
  new_steps = cfg.train.num_steps
  if resume_step is not None and 'train.num_steps' in changes and new_steps < resume_step:
    refused.append('train.num_steps')
  described = [describe(k) for k in changes]
  if not refused:
    return changes, [line.strip() for line in described]
  fixed = [k for k in changes if not _may_change(k, *changes[k])]
  resumable = [k for k in changes if k not in fixed and k not in UNOBSERVABLE]
  way_out = 'use a new --workdir to train this config'
  if resumable and not fixed:
    way_out += f', or resume with --allow_config_change={",".join(resumable)}'
  elif resumable:
    way_out += (f'; only {", ".join(resumable)} could change on resume (with '
                '--allow_config_change), the others cannot')
  if resume_step is not None and new_steps < resume_step:
    way_out += (f'; train.num_steps={new_steps} is below the step the run reached '
                f'({resume_step})')
  lines = [f'{workdir} holds a run with a different config (compared with {origin}); nothing '
           f'was written. {way_out}. Changed keys (old -> new):']
  lines += described
  lines.append(f'Keys that may change on resume with the flag: {", ".join(RESUMABLE)}; '
               f'without it: {", ".join(UNOBSERVABLE)}.')
  raise WorkdirConfigError('\n'.join(lines))


def check_vocabularies(workdir: str, task) -> None:
  """A resumed run must build the vocabularies it was trained with."""
  from attnlab.data.sentencepiece_vocab import load_vocab  # reads both kinds of file

  for side, name in VOCAB_FILES.items():
    path = os.path.join(workdir, name)
    built = getattr(task, f'{side}_vocab')
    if os.path.isfile(path) and load_vocab(path).to_json() != built.to_json():
      raise WorkdirConfigError(
        f'{path} differs from the {side} vocabulary this config builds ({built.size} ids): '
        'the data changed since the run started; use a new --workdir')


def _replace(path: str, write) -> None:
  """`write(tmp)`, then renames tmp to `path`: the job's other processes, which check the files
  process 0 writes here as they start, and a kill mid-write see the old file or the new one."""
  tmp = f'{path}.{os.getpid()}.tmp'
  write(tmp)
  os.replace(tmp, path)


def write_start_files(workdir: str, config, task, changes: dict, resume_step: int | None) -> None:
  """config.json (new run or accepted changes), the vocabularies (if absent), the change log."""
  os.makedirs(workdir, exist_ok=True)
  config_path = os.path.join(workdir, CONFIG_FILE)

  def write_config(path: str) -> None:
    with open(path, 'w', encoding='utf-8') as f:
      f.write(config.to_json_best_effort(indent=2, sort_keys=True))

  if changes or not os.path.isfile(config_path):
    _replace(config_path, write_config)
  if changes:
    record = {'step': resume_step, 'changes': {k: list(v) for k, v in changes.items()},
              'at': _now()}
    with open(os.path.join(workdir, CONFIG_CHANGES), 'a', encoding='utf-8') as f:
      f.write(json.dumps(record) + '\n')
  for side, name in VOCAB_FILES.items():
    path = os.path.join(workdir, name)
    if not os.path.isfile(path):
      _replace(path, getattr(task, f'{side}_vocab').save)


def _append_run_time(workdir: str, record: dict) -> None:
  with open(os.path.join(workdir, RUN_TIMES), 'a', encoding='utf-8') as f:
    f.write(json.dumps(record) + '\n')


class RunTimeRecord:
  """This process run's line of run_times.jsonl: kept current on disk while the run goes
  (`update`), appended with its outcome at the end (`close`). Does nothing when disabled (a
  multi-host run's other processes)."""

  def __init__(self, workdir: str, *, first_step: int, started: float, cpu_started: float,
               enabled: bool = True, machine: str | None = None):
    """started: time.perf_counter() when the run began; cpu_started: time.process_time() then;
    machine: what it runs on (attnlab/machine.py), so that its times can be compared."""
    self.workdir, self.first_step, self.started = workdir, first_step, started
    self.cpu_started, self.machine = cpu_started, machine
    self.enabled = enabled
    self.update(first_step)

  def _record(self, last_step: int, outcome: str) -> dict:
    # cpu_s: the CPU time of the process's threads during the run: the compute it used, which
    # a paused (SIGSTOP) or crowded run does not inflate as it does wall_s.
    return {'first_step': self.first_step, 'last_step': last_step,
            'wall_s': time.perf_counter() - self.started,
            'cpu_s': time.process_time() - self.cpu_started,
            'outcome': outcome, 'finished_at': _now(),
            **({'machine': self.machine} if self.machine else {})}

  def update(self, last_step: int) -> None:
    if not self.enabled:
      return
    path = os.path.join(self.workdir, RUN_IN_PROGRESS)
    with open(path + '.tmp', 'w', encoding='utf-8') as f:
      json.dump(self._record(last_step, 'killed'), f)
    os.replace(path + '.tmp', path)  # a kill mid-write leaves the previous record whole

  def close(self, last_step: int, outcome: str) -> None:
    """Appends the run's line (finished, stopped early, interrupted or failed)."""
    if not self.enabled:
      return
    _append_run_time(self.workdir, self._record(last_step, outcome))
    with contextlib.suppress(FileNotFoundError):
      os.remove(os.path.join(self.workdir, RUN_IN_PROGRESS))


def recover_killed_run(workdir: str) -> dict | None:
  """Appends the line a killed process left in RUN_IN_PROGRESS to run_times.jsonl (outcome
  'killed'; wall time up to its last log step) and returns it; None when there is none.
  Call only when no process is running in `workdir`."""
  path = os.path.join(workdir, RUN_IN_PROGRESS)
  try:
    with open(path, encoding='utf-8') as f:
      record = json.load(f)
  except FileNotFoundError:
    return None
  except (OSError, json.JSONDecodeError):
    record = None  # unreadable: nothing to recover, but do not fold it again
  if record is not None:
    _append_run_time(workdir, record)
  os.remove(path)
  return record


class WorkdirInUseError(UserError):
  """Another process is training in the workdir."""


def _file_on_the_way(path: str) -> str | None:
  """The existing non-folder that `path` passes through (a/FILE/b), if any."""
  head = os.path.dirname(path)
  while head and head != os.path.dirname(head):
    if os.path.lexists(head) and not os.path.isdir(head):
      return head
    head = os.path.dirname(head)
  return None


def _path_problem(workdir: str, error: OSError) -> str:
  """One line: why `workdir` cannot hold a run, from the OSError that making it (or a file in
  it) raised, and the way out."""
  way_out = 'name a folder that training can create or write its files in'
  if os.path.lexists(workdir) and not os.path.isdir(workdir):
    problem = 'it is a file, not a folder'
  elif error.errno == errno.ENOTDIR and _file_on_the_way(workdir):
    problem = f'{_file_on_the_way(workdir)} is a file, not a folder'
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
    record = {'pid': os.getpid(), 'host': socket.gethostname(), 'since': _now()}
    try:
      os.ftruncate(self._fd, 0)
      os.pwrite(self._fd, json.dumps(record).encode(), 0)
      with tempfile.TemporaryFile(dir=workdir):  # the folder itself takes new files
        pass
    except OSError as e:
      self.release()
      raise UserError(_path_problem(workdir, e)) from None

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
