"""A sweep's trial directories DIR/NAME: the runner's status file, whether a trial is running
or finished, and whether a directory may be reused for a trial (attnlab/sweeps/runner.py)."""

from __future__ import annotations

import json
import os
import socket

from attnlab import workdir as workdir_lib
from attnlab.sweeps.trials import SweepError, Trial

STATUS_FILE = 'sweep_status.json'
LOG_FILE = 'sweep_log.txt'
FINAL_FILE = 'final_metrics.json'


def trial_dir(workdir: str, trial: Trial) -> str:
  return os.path.join(workdir, trial.name)


def read_status(directory: str) -> dict:
  path = os.path.join(directory, STATUS_FILE)
  if not os.path.isfile(path):
    return {}
  with open(path) as f:
    return json.load(f)


def write_status(directory: str, status: dict) -> None:
  os.makedirs(directory, exist_ok=True)
  path = os.path.join(directory, STATUS_FILE)
  tmp = f'{path}.{os.getpid()}.tmp'
  with open(tmp, 'w') as f:
    json.dump(status, f, indent=2)
  os.replace(tmp, path)


def trial_state(directory: str) -> str:
  """finished | failed | running | interrupted | new."""
  if os.path.isfile(os.path.join(directory, FINAL_FILE)):
    return 'finished'
  return read_status(directory).get('status', 'new')


def running_elsewhere(directory: str) -> int | None:
  """The pid of a live process of this host that an earlier sweep started on the trial."""
  status = read_status(directory)
  pid = status.get('pid')
  if status.get('status') != 'running' or not pid or status.get('host') != socket.gethostname():
    return None
  try:
    os.kill(pid, 0)  # signal 0: only checks that the process exists
  except ProcessLookupError:
    return None
  except PermissionError:
    return pid
  return pid


def _identity(trial: Trial) -> dict:
  # JSON round trip: tuples read back as lists, so compare the stored form.
  return json.loads(json.dumps({'config': trial.config, 'overrides': trial.all_overrides()}))


_UNSET = object()


def _shown(overrides: dict, key: str) -> str:
  return repr(overrides[key]) if key in overrides else '(unset)'


def _saved_settings(directory: str) -> dict:
  """Dotted key -> value of the trial run's config.json ({} when it has none or it is broken:
  then nothing counts as unchanged)."""
  try:
    with open(os.path.join(directory, workdir_lib.CONFIG_FILE), encoding='utf-8') as f:
      return workdir_lib.flatten(json.load(f))
  except (OSError, ValueError):
    return {}


def check_same_trial(directory: str, trial: Trial) -> None:
  """Refuses to reuse a directory that a trial with another config (BASE, FIXED) wrote.

  An override that is new or changed but equal to what the trial's run already had (its
  config.json) changes nothing, so it is accepted: an experiment may pin a value of its base
  config before that config's default moves on."""
  status = read_status(directory)
  now = _identity(trial)
  if not status or {k: status.get(k) for k in now} == now:
    return
  saved = _saved_settings(directory)
  changes = []
  if status.get('config') != now['config']:
    changes.append(f'config {status.get("config")} -> {now["config"]}')
  before, after = status.get('overrides') or {}, now['overrides']
  for key in sorted(set(before) | set(after)):
    new = after.get(key, _UNSET)
    if before.get(key, _UNSET) == new or (key in saved and saved[key] == new):
      continue
    changes.append(f'{key} {_shown(before, key)} -> {_shown(after, key)}')
  if not changes:
    return
  raise SweepError(
    f'{directory} was run with other settings than the experiment now gives '
    f'({", ".join(changes)}); use a new --workdir or delete that directory'
  )
