"""Experiment files -> trials: expansion, directory names, config checks, the sweep manifest.

An experiment is a plain Python file (see experiments/):

    BASE = 'configs/reverse.py'                 # config file[:variant] every trial starts from
    FIXED = {'train.num_steps': 1000}           # optional: overrides shared by every trial
    def sweep(add):
      for score in ('dot', 'general'):
        for seed in range(3):
          add(**{'model.attention.score': score, 'seed': seed})

`add(config='configs/dates.py', fixed={...}, **overrides)` starts that trial from another
config file and adds overrides that, like FIXED, stay out of its name (`base()` returning the
config string may replace BASE). The report makes one section per config file, with one row
per variant (the overrides except the seed), labelled by those overrides or by
`add(label='no attention', ...)`: one label per variant, the same for all its seeds, kept in
the manifest and out of the trial's name and identity. A trial runs
`python -m attnlab.main --config=CONFIG --workdir=DIR/NAME --config.KEY=VALUE ...`; NAME is
built from the trial's own overrides (`score=dot,seed=0`), so it is readable and stays the same
when other trials are added. `trial_config` applies the overrides to the loaded config exactly
as the command line would and validates it with `attnlab.config.run.parse`.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
import json
import os
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any

import ml_collections

from attnlab.config import run as config_lib
from attnlab.errors import UserError

# Model and trial sizes an experiment file may pick (experiments/sizes.py), from this variable
# (attnlab.sweep --sizes sets it): sized for CPU cores, or the papers' widths for accelerators.
SIZES = ('cpu', 'accelerator')
SIZES_VARIABLE = 'ATTNLAB_SIZES'


def chosen_size() -> str:
  """The sizes ATTNLAB_SIZES names (cpu when unset); a SweepError for any other value."""
  size = os.environ.get(SIZES_VARIABLE) or SIZES[0]
  if size not in SIZES:
    raise SweepError(f'{SIZES_VARIABLE}={size!r} is not valid; choose from {", ".join(SIZES)}')
  return size

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MANIFEST = 'sweep.json'
SEED_KEY = 'seed'
_MAX_NAME = 120  # longer names are cut and get a hash of the full overrides
_SCALARS = (bool, int, float, str)


class SweepError(UserError):
  """An experiment file or a sweep directory that cannot be run."""


@dataclasses.dataclass(frozen=True)
class Trial:
  """One run of the sweep: a config file plus dotted-key overrides."""

  name: str
  config: str  # config file[:variant]
  overrides: dict  # this trial's own overrides, in the order `add` got them
  fixed: dict  # FIXED and add(fixed=...) overrides: applied first, not in the name
  label: str = ''  # the report's name for its variant ('' = the overrides but the seed)

  def all_overrides(self) -> dict:
    return {**self.fixed, **self.overrides}

  @property
  def variant(self) -> dict:
    """The overrides that make this trial's report row: all but the seed."""
    return {k: v for k, v in self.overrides.items() if k != SEED_KEY}

  def command(self, workdir: str, python: str = sys.executable) -> list[str]:
    args = [python, '-m', 'attnlab.main', f'--config={self.config}', f'--workdir={workdir}']
    return args + [f'--config.{k}={format_value(v)}' for k, v in self.all_overrides().items()]

  def to_json(self) -> dict:
    out = {
      'name': self.name,
      'config': self.config,
      'overrides': self.overrides,
      'fixed': self.fixed,
    }
    return {**out, 'label': self.label} if self.label else out


@dataclasses.dataclass(frozen=True)
class Experiment:
  path: str
  name: str
  base: str
  fixed: dict
  trials: tuple[Trial, ...]


def format_value(value: Any) -> str:
  """The command-line text that ml_collections' config flags parse back into `value`."""
  if isinstance(value, list | tuple):
    return repr(tuple(value))
  return str(value) if isinstance(value, str) else repr(value)


def short_keys(keys) -> dict[str, str]:
  """Each dotted key -> its shortest dotted suffix that no other key in `keys` ends with."""
  keys = list(keys)
  out = {}
  for key in keys:
    parts = key.split('.')
    for n in range(1, len(parts) + 1):
      suffix = '.'.join(parts[-n:])
      if not any(o != key and (o == suffix or o.endswith('.' + suffix)) for o in keys):
        break
    out[key] = suffix
  return out


def _name_value(value: Any) -> str:
  if isinstance(value, list | tuple):
    return '-'.join(_name_value(v) for v in value)
  return str(value)


def config_label(config: str) -> str:
  """'configs/reverse.py:smoke' -> 'reverse-smoke'."""
  path, _, arg = config.partition(':')
  stem = os.path.splitext(os.path.basename(path))[0]
  return f'{stem}-{arg}' if arg else stem


def trial_name(overrides: Mapping[str, Any], config: str | None = None) -> str:
  """A readable, filesystem-safe directory name that depends on this trial alone."""
  short = short_keys(overrides)
  parts = [config_label(config)] if config else []
  parts += [f'{short[k]}={_name_value(v)}' for k, v in overrides.items()]
  name = re.sub(r'[^A-Za-z0-9._=,+-]', '-', ','.join(parts)) or 'base'
  if len(name) > _MAX_NAME:
    canonical = json.dumps([config, list(overrides.items())], sort_keys=False)
    name = name[: _MAX_NAME - 9] + '-' + hashlib.sha1(canonical.encode()).hexdigest()[:8]
  return name.lstrip('.')  # never a hidden directory


def _check_value(key: str, value: Any) -> None:
  if not isinstance(key, str) or not key:
    raise SweepError(f'override keys must be dotted config keys, got {key!r}')
  items = value if isinstance(value, list | tuple) else (value,)
  if not all(isinstance(v, _SCALARS) for v in items):
    raise SweepError(
      f'override {key}={value!r}: values must be bool, int, float, str or tuples '
      'of them (they travel on the command line)'
    )


def _check_source(path: str) -> None:
  """A SweepError naming the first NUL byte of `path`: Python refuses such a file with a
  traceback that names neither the file nor where the byte is (a binary or corrupted file)."""
  try:
    with open(path, 'rb') as f:
      source = f.read()
  except OSError as e:
    raise SweepError(f'cannot read {path}: {e.strerror}') from None
  offset = source.find(b'\0')
  if offset >= 0:
    line = source.count(b'\n', 0, offset) + 1
    raise SweepError(f'{path}: NUL byte at byte offset {offset} (line {line}); a Python file '
                     'holds text only: restore it from its source or version control')


def _load_module(path: str, prefix: str):
  if not os.path.isfile(path):
    raise SweepError(f'no such file: {path}')
  _check_source(path)
  if PROJECT_ROOT not in sys.path:
    sys.path.insert(0, PROJECT_ROOT)  # config files import `configs.base`
  digest = hashlib.sha1(os.path.abspath(path).encode()).hexdigest()[:10]
  spec = importlib.util.spec_from_file_location(f'{prefix}_{digest}', path)
  module = importlib.util.module_from_spec(spec)
  try:
    spec.loader.exec_module(module)
  except SyntaxError as e:  # this file's or a file it imports: e.filename says which
    where = f'{e.filename or path}:{e.lineno}' if e.lineno else e.filename or path
    raise SweepError(f'{where}: {e.msg}') from None
  return module


def _check_labels(path: str, trials: list[Trial]) -> None:
  """One label per variant (all its seeds), and no two variants of a config file under one."""
  labels: dict[tuple, str] = {}
  owners: dict[tuple, dict] = {}
  for trial in trials:
    variant = (trial.config, json.dumps(trial.variant, sort_keys=True))
    if labels.setdefault(variant, trial.label) != trial.label:
      raise SweepError(f'{path}: the variant {trial.variant} is labelled both '
                       f'{labels[variant]!r} and {trial.label!r}; give all its seeds one label')
    if trial.label:
      other = owners.setdefault((trial.config, trial.label), trial.variant)
      if other != trial.variant:
        raise SweepError(f'{path}: the label {trial.label!r} names two variants, {other} and '
                         f'{trial.variant}; give each its own')


def load_experiment(path: str) -> Experiment:
  """Runs the experiment file's `sweep(add)` and returns its trials (nothing is checked yet)."""
  chosen_size()  # read by the file (experiments/sizes.py): a bad value is one line, not its error
  module = _load_module(path, 'attnlab_experiment')
  base = module.base() if callable(getattr(module, 'base', None)) else getattr(module, 'BASE', '')
  if not isinstance(base, str) or not base:
    raise SweepError(f'{path} needs BASE = "configs/<file>.py[:variant]" or a base() function')
  sweep_fn = getattr(module, 'sweep', None)
  if not callable(sweep_fn):
    raise SweepError(f'{path} needs a function sweep(add) that calls add(**overrides)')
  shared = dict(getattr(module, 'FIXED', {}))
  for key, value in shared.items():
    _check_value(key, value)
  trials: list[Trial] = []

  def add(config: str | None = None, fixed: dict | None = None, label: str = '', **overrides):
    for key, value in {**(fixed or {}), **overrides}.items():
      _check_value(key, value)
    if not isinstance(label, str):
      raise SweepError(f'{path}: add(label={label!r}) must be a string')
    name = trial_name(overrides, config)
    trials.append(Trial(name, config or base, dict(overrides), {**shared, **(fixed or {})},
                        label))

  sweep_fn(add)
  if not trials:
    raise SweepError(f'{path}: sweep(add) added no trials')
  _check_labels(path, trials)
  seen: dict[str, Trial] = {}
  for trial in trials:
    if trial.name in seen:
      raise SweepError(
        f'{path}: two trials share the directory name {trial.name!r} '
        f'({seen[trial.name].overrides} and {trial.overrides}); vary a key'
      )
    seen[trial.name] = trial
  name = os.path.splitext(os.path.basename(path))[0]
  return Experiment(path, name, base, shared, tuple(trials))


@functools.cache
def _config_module(path: str):
  return _load_module(path, 'attnlab_config')


def load_config(spec: str) -> ml_collections.ConfigDict:
  """Loads 'path.py[:arg]' the way `--config=path.py[:arg]` does: get_config(arg)."""
  path, sep, arg = spec.partition(':')
  module = _config_module(os.path.abspath(path))
  return module.get_config(arg) if sep else module.get_config()


def apply_overrides(config: ml_collections.ConfigDict, overrides: Mapping[str, Any]) -> None:
  """Sets dotted keys on a (locked) config as `--config.KEY=VALUE` would, or raises."""
  for key, value in overrides.items():
    *path, last = key.split('.')
    node, where = config, []
    for part in path + [last]:
      if not isinstance(node, ml_collections.ConfigDict) or part not in node:
        group = '.'.join(where) or 'the top level'
        choices = ', '.join(sorted(node.keys())) if hasattr(node, 'keys') else '(not a group)'
        raise config_lib.ConfigError(f'unknown config key {key}: {group} has {choices}')
      if part != last:
        node = node[part]
        where.append(part)
    old = node[last]
    if isinstance(old, ml_collections.ConfigDict):
      raise config_lib.ConfigError(f'{key} is a group; override its fields ({key}.<field>)')
    if isinstance(value, bool) != isinstance(old, bool) and old is not None:
      raise config_lib.ConfigError(f'{key}={value!r}: expected {type(old).__name__} like {old!r}')
    try:
      setattr(node, last, value)
    except (TypeError, ValueError) as e:
      raise config_lib.ConfigError(f'{key}={value!r}: {e}') from e


def trial_config(trial: Trial) -> ml_collections.ConfigDict:
  """The trial's full config, validated by `attnlab.config.run.parse`; raises ConfigError."""
  config = load_config(trial.config)
  apply_overrides(config, trial.all_overrides())
  config_lib.parse(config)
  return config


def check_trials(trials, check: Callable[[Trial], Any] = trial_config) -> tuple[dict, dict]:
  """Builds every trial's config: (name -> config, name -> error message of those that fail)."""
  configs, errors = {}, {}
  for trial in trials:
    try:
      configs[trial.name] = check(trial)
    except Exception as e:  # noqa: BLE001 - any error of the user's config file is reported
      errors[trial.name] = f'{type(e).__name__}: {e}'
  return configs, errors


def manifest_tmp(path: str) -> str:
  """Where this process writes the manifest `path` before it replaces the old one at once."""
  return f'{path}.{os.getpid()}.tmp'


def write_manifest(workdir: str, experiment: Experiment, backend: str) -> str:
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, MANIFEST)
  manifest = {
    'experiment': experiment.path,
    'name': experiment.name,
    'base': experiment.base,
    'fixed': experiment.fixed,
    'backend': backend,
    'seed_key': SEED_KEY,
    'trials': [t.to_json() for t in experiment.trials],
  }
  tmp = manifest_tmp(path)
  with open(tmp, 'w') as f:
    json.dump(manifest, f, indent=2)
  os.replace(tmp, path)
  return path


def read_manifest(workdir: str) -> tuple[dict, list[Trial]]:
  path = os.path.join(workdir, MANIFEST)
  if not os.path.isfile(path):
    raise SweepError(
      f'{workdir} holds no {MANIFEST}; run `python -m attnlab.sweep '
      f'experiments/<name>.py --workdir={workdir}` first'
    )
  try:
    with open(path, encoding='utf-8') as f:
      manifest = json.load(f)
    trials = [Trial(t['name'], t['config'], t['overrides'], t['fixed'], t.get('label', ''))
              for t in manifest['trials']]
  except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
    raise SweepError(
      f'{path} is not a readable sweep manifest ({type(e).__name__}: {e}); rerun '
      f'`python -m attnlab.sweep experiments/<name>.py --workdir={workdir}` to write it again'
    ) from None
  return manifest, trials
