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
STEP_CAP = 'train.num_steps'  # a cap for runs that stop on their own: may be raised on resume


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


def identity(trial: Trial) -> dict:
  # JSON round trip: tuples read back as lists, so compare the stored form.
  return json.loads(json.dumps({'config': trial.config, 'overrides': trial.all_overrides()}))


_UNSET = object()


def _shown(overrides: dict, key: str) -> str:
  return repr(overrides[key]) if key in overrides else '(unset)'


def saved_settings(directory: str) -> dict:
  """Dotted key -> value of the trial run's config.json ({} when it has none or it is broken:
  then nothing counts as unchanged)."""
  try:
    with open(os.path.join(directory, workdir_lib.CONFIG_FILE), encoding='utf-8') as f:
      return workdir_lib.flatten(json.load(f))
  except (OSError, ValueError):
    return {}


def check_same_trial(directory: str, trial: Trial) -> int | None:
  """Refuses to reuse a directory that a trial with another config (BASE, FIXED) wrote.

  An override that is new or changed but equal to what the trial's run already had (its
  config.json) changes nothing, so it is accepted: an experiment may pin a value of its base
  config before that config's default moves on. A raised step cap (`train.num_steps`, a cap for
  runs that stop on their own) is accepted too: the old cap is returned, and
  `raise_step_cap` brings the directory to the new one. Otherwise returns None."""
  status = read_status(directory)
  now = identity(trial)
  if not status or {k: status.get(k) for k in now} == now:
    return None
  saved = saved_settings(directory)
  changes, described = {}, []
  config_changed = status.get('config') != now['config']
  if config_changed:
    described.append(f'config {status.get("config")} -> {now["config"]}')
  before, after = status.get('overrides') or {}, now['overrides']
  for key in sorted(set(before) | set(after)):
    new = after.get(key, _UNSET)
    if before.get(key, _UNSET) == new or (key in saved and saved[key] == new):
      continue
    changes[key] = (before.get(key, saved.get(key, _UNSET)), new)
    described.append(f'{key} {_shown(before, key)} -> {_shown(after, key)}')
  if not described:
    return None
  if not config_changed and set(changes) == {STEP_CAP}:
    old, new = changes[STEP_CAP]
    if isinstance(old, int) and isinstance(new, int) and new > old:
      return old
  raise SweepError(
    f'{directory} was run with other settings than the experiment now gives '
    f'({", ".join(described)}); use a new --workdir or delete that directory'
  )


def read_final(directory: str) -> dict:
  with open(os.path.join(directory, FINAL_FILE)) as f:
    return json.load(f)


def stopped_early(directory: str) -> bool:
  """Whether the finished run in `directory` ended on its own, before its step cap."""
  return bool((read_final(directory).get('selection') or {}).get('stopped_early'))


def check_step_cap_raisable(directory: str, trial: Trial, old_cap: int) -> None:
  """Refuses a finished trial that ran to its old cap and has no checkpoint to train on from
  (call it for every trial before `raise_step_cap` changes any)."""
  finished = trial_state(directory) == 'finished'
  if finished and not stopped_early(directory) and not workdir_lib.saved_steps(directory):
    raise SweepError(
      f'{directory} ran to its old cap of {old_cap} steps and has no checkpoint to train on '
      f'from under the new {STEP_CAP}={trial.all_overrides()[STEP_CAP]}; delete it (and its '
      f'archived copy) to train it again'
    )


def raise_step_cap(directory: str, trial: Trial, old_cap: int) -> str:
  """Brings a trial run under a lower `train.num_steps` to the experiment's cap; returns
  'kept' or 'extended'.

  A finished trial that stopped early never reached the old cap, so a higher one changes
  nothing: it is kept as it is ('kept'). Any other trial resumes from its latest checkpoint
  and trains on under the new cap ('extended'; the runner passes
  --allow_config_change=train.num_steps): the plateau schedule and the selection state live
  in the checkpoint and metrics.jsonl, so the result equals a run with the new cap from the
  start. A finished trial that ran to the old cap keeps its first final_metrics.json as
  final_metrics.cap<OLD>.json. One without checkpoints to resume from is refused."""
  check_step_cap_raisable(directory, trial, old_cap)
  finished = trial_state(directory) == 'finished'
  status = {**read_status(directory), **identity(trial), 'step_cap_raised_from': old_cap}
  if finished and stopped_early(directory):
    write_status(directory, status)
    return 'kept'
  if finished:
    first = os.path.join(directory, f'final_metrics.cap{old_cap}.json')
    os.replace(os.path.join(directory, FINAL_FILE), first)
    status['status'] = 'interrupted'
  write_status(directory, status)
  return 'extended'


def resume_args(directory: str, trial: Trial) -> list[str]:
  """The flags `attnlab.main` needs to resume the run in `directory` as `trial`: accepting a
  raised step cap against the run's config.json."""
  saved = saved_settings(directory).get(STEP_CAP)
  wanted = trial.all_overrides().get(STEP_CAP)
  if isinstance(saved, int) and isinstance(wanted, int) and wanted > saved:
    return [f'--allow_config_change={STEP_CAP}']
  return []
