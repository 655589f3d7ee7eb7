"""Starting or resuming a run: the check that a reused workdir holds the same config, and the
files a start writes.

Rerunning a command on its workdir resumes the run. Once the run holds the workdir's lock (whose
file records the process: rundir/lock.py) and before anything else is written, the config is
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

"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
from typing import Any

from etils import epath

from attnlab import storage
from attnlab.data.sentencepiece_vocab import load_vocab
from attnlab.errors import UserError
from attnlab.rundir.checkpoint import Checkpointer
from attnlab.rundir.layout import (
  CONFIG_CHANGES,
  CONFIG_FILE,
  VOCAB_FILES,
  checkpoint_dir,
  now,
  saved_steps,
)
from attnlab.train import optim

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
# it is evaluated and stopped (a lower learning-rate floor, or holding the rate there, lets a
# run that stopped at the floor go on), and the learning rate (to continue a diverged run from
# its last good checkpoint).
RESUMABLE = (
  'train.num_steps',
  'train.eval_every',
  'train.patience',
  'train.min_improvement',
  'train.divergence_factor',
  'optim.learning_rate',
  'optim.plateau_min_scale',
  'optim.plateau_at_floor',
)
_ABSENT = '(absent)'


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


def saved_config(workdir: str) -> tuple[dict | None, str]:
  """The run's config dict and where it came from; (None, '') for a new workdir."""
  path = os.path.join(workdir, CONFIG_FILE)
  if epath.Path(path).is_file():
    try:
      return json.loads(storage.read_text(path)), path
    except (OSError, ValueError) as e:  # not JSON, or not UTF-8
      raise WorkdirConfigError(f'{path} cannot be read ({e}); use a new --workdir, or delete '
                               'the file to compare with the latest checkpoint') from None
  if saved_steps(workdir):
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
    saved = json.loads(storage.read_text(os.path.join(workdir, CONFIG_FILE)))
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
    config: the ConfigDict of this run; cfg: its parsed `attnlab.config.run.RunConfig`.
    allow: dotted keys accepted to change (`--allow_config_change`).

  Returns:
    The accepted changes {key: (old, new)} (empty for a new workdir or an identical config)
    and one line describing each, for the log.
  """
  old, origin = saved_config(workdir) if epath.Path(workdir).is_dir() else (None, '')
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
           f'was written but the lock file\'s record of this process. {way_out}. Changed keys '
           '(old -> new):']
  lines += described
  lines.append(f'Keys that may change on resume with the flag: {", ".join(RESUMABLE)}; '
               f'without it: {", ".join(UNOBSERVABLE)}.')
  raise WorkdirConfigError('\n'.join(lines))


def check_vocabularies(workdir: str, task) -> None:
  """A resumed run must build the vocabularies it was trained with."""
  for side, name in VOCAB_FILES.items():
    path = os.path.join(workdir, name)
    built = getattr(task, f'{side}_vocab')
    if epath.Path(path).is_file() and load_vocab(path).to_json() != built.to_json():
      raise WorkdirConfigError(
        f'{path} differs from the {side} vocabulary this config builds ({built.size} ids): '
        'the data changed since the run started; use a new --workdir')


def write_start_files(workdir: str, config, task, changes: dict, resume_step: int | None) -> None:
  """config.json (new run or accepted changes), the vocabularies (if absent), the change log.
  The job's other processes check the files process 0 writes here as they start: each is
  replaced whole (`storage.replace_whole`), so they, and a start after a kill mid-write, see the
  old file or the new one."""
  storage.make_folder(workdir)
  config_path = os.path.join(workdir, CONFIG_FILE)
  config_text = config.to_json_best_effort(indent=2, sort_keys=True)
  if changes or not epath.Path(config_path).is_file():
    storage.replace_whole(config_path, lambda path: storage.write_text(path, config_text))
  if changes:
    record = {'step': resume_step, 'changes': {k: list(v) for k, v in changes.items()},
              'at': now()}
    storage.append_text(os.path.join(workdir, CONFIG_CHANGES), json.dumps(record) + '\n')
  for side, name in VOCAB_FILES.items():
    path = os.path.join(workdir, name)
    if not epath.Path(path).is_file():
      storage.replace_whole(path, getattr(task, f'{side}_vocab').save)


