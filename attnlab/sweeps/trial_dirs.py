"""A sweep's trial directories DIR/NAME: the runner's status file, whether a trial is running
or finished, and whether a directory may be reused for a trial (attnlab/sweeps/runner.py)."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
from collections.abc import Callable

from attnlab.config.run import SELECT_SPLIT
from attnlab.rundir import layout
from attnlab.sweeps.trials import SweepError, Trial
from attnlab.train import resume
from attnlab.train import selection as selection_lib

STATUS_FILE = 'sweep_status.json'
LOG_FILE = 'sweep_log.txt'
FINAL_FILE = layout.FINAL_METRICS_FILE


@dataclasses.dataclass(frozen=True)
class Limit:
  """A setting that ends runs which otherwise stop on their own; relaxing it on resume leaves
  what a run trained so far as a run under the relaxed value would have trained it."""

  key: str
  ending: str  # how a run that reached it ended (`ending`): also the console tag
  relaxes: Callable[[float, float], bool]  # (old, new) -> whether new is the relaxed one


# A higher step cap; a lower learning-rate floor (the plateau schedule's cut that the floor
# refused is made when the run resumes: attnlab/train/loop.py).
LIMITS = {
  limit.key: limit for limit in (
    Limit('train.num_steps', 'cap', lambda old, new: new > old),
    Limit('optim.plateau_min_scale', 'floor', lambda old, new: new < old),
  )
}
# How a finished run ended, as `ending` names it.
ENDINGS = {'cap': 'at its step cap', 'floor': 'at the learning-rate floor',
           'patience': 'by train.patience'}


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
  """finished | failed | running | interrupted | new. A trial recorded as running on this host
  whose process is gone was killed with its sweep (a session or machine that ended):
  interrupted, as the next sweep finds it."""
  if os.path.isfile(os.path.join(directory, FINAL_FILE)):
    return 'finished'
  status = read_status(directory)
  if _on_this_host(status) and _live_pid(status) is None:
    return 'interrupted'
  return status.get('status', 'new')


def running_elsewhere(directory: str) -> int | None:
  """The pid of a live process of this host that an earlier sweep started on the trial."""
  status = read_status(directory)
  return _live_pid(status) if _on_this_host(status) else None


def _on_this_host(status: dict) -> bool:
  """A trial process this host started and records as running (another host's cannot be
  checked from here)."""
  return (status.get('status') == 'running' and bool(status.get('pid'))
          and status.get('host') == socket.gethostname())


def _live_pid(status: dict) -> int | None:
  pid = status['pid']
  try:
    os.kill(pid, 0)  # signal 0: only checks that the process exists
  except ProcessLookupError:
    return None
  except PermissionError:  # alive, another user's
    return pid
  return pid


def identity(trial: Trial) -> dict:
  # JSON round trip: tuples read back as lists, so compare the stored form.
  return json.loads(json.dumps({'config': trial.config, 'overrides': trial.all_overrides()}))


_UNSET = object()


def _shown(overrides: dict, key: str) -> str:
  return repr(overrides[key]) if key in overrides else '(unset)'


def _is_numeric(value) -> bool:
  return isinstance(value, int | float) and not isinstance(value, bool)


def saved_settings(directory: str) -> dict:
  """Dotted key -> value of the trial run's config.json ({} when it has none or it is broken:
  then nothing counts as unchanged)."""
  try:
    with open(os.path.join(directory, layout.CONFIG_FILE), encoding='utf-8') as f:
      return resume.flatten(json.load(f))
  except (OSError, ValueError):
    return {}


def check_same_trial(directory: str, trial: Trial) -> dict | None:
  """Refuses to reuse a directory that a trial with another config (BASE, FIXED) wrote.

  An override that is new or changed but equal to what the trial's run already had (its
  config.json) changes nothing, so it is accepted: an experiment may pin a value of its base
  config before that config's default moves on. Relaxed `LIMITS` (a raised step cap, a lowered
  learning-rate floor) are accepted too: returns {key: old value} of those, and `relax_trial`
  brings the directory to the new values. Otherwise returns None."""
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
  relaxed = {key: changes[key][0] for key, limit in LIMITS.items()
             if key in changes and all(_is_numeric(v) for v in changes[key])
             and limit.relaxes(*changes[key])}
  if not config_changed and relaxed and set(relaxed) == set(changes):
    return relaxed
  raise SweepError(
    f'{directory} was run with other settings than the experiment now gives '
    f'({", ".join(described)}); use a new --workdir or delete that directory'
  )


def read_final(directory: str) -> dict:
  with open(os.path.join(directory, FINAL_FILE)) as f:
    return json.load(f)


def tested_line(directory: str, metric: str) -> str:
  """What the trial in `directory` has reached, for the console. Finished: its test result on
  the selection metric and the step tested (`test wer 0.2487 (step 18000 of 19000, stopped
  early)`). Before that: the best eval value of `metric` so far (`best eval wer 0.3026 at step
  18000`), or '' before the first evaluation."""
  if trial_state(directory) == 'finished':
    final = read_final(directory)
    selection = final.get('selection') or {}
    metric = selection.get('metric', 'sequence_accuracy')  # a run without selection
    value = final.get('test', {}).get(metric)
    if not isinstance(value, int | float):
      return ''
    text = f'test {metric} {value:.4f}'
    if 'trained_steps' in final:
      text += f" (step {final['step']} of {final['trained_steps']}"
      text += ', stopped early)' if selection.get('stopped_early') else ')'
    return text
  best = None
  for event in metric_events(directory):
    value = event.get(metric)
    if (event.get('split') == SELECT_SPLIT and isinstance(value, int | float)
        and selection_lib.is_better(metric, value, best and best[1])):
      best = (int(event['step']), value)
  return f'best eval {metric} {best[1]:.4f} at step {best[0]}' if best else ''


def metric_events(directory: str):
  """metrics.jsonl's lines as dicts (metrics.jsonl.xz in an archived trial: open_text),
  skipping one being written right now."""
  try:
    f = layout.open_text(os.path.join(directory, layout.METRICS_FILE))
  except FileNotFoundError:
    return
  with f:
    for line in f:
      try:
        event = json.loads(line)
      except ValueError:
        continue
      if isinstance(event, dict):
        yield event


def _eval_steps(directory: str) -> set[int]:
  return {int(e['step']) for e in metric_events(directory) if e.get('split') == SELECT_SPLIT}


def ending(directory: str) -> str:
  """How the finished run in `directory` ended (`ENDINGS`): 'cap' (it trained to
  train.num_steps), 'patience' (train.patience evaluations without improvement) or 'floor' (a
  plateau cut due that would have gone below optim.plateau_min_scale), as final_metrics.json
  records it; in runs from before it did, the two early stops are told apart by the
  evaluations after the best one (metrics.jsonl; a resumed run may repeat some)."""
  selection = read_final(directory).get('selection') or {}
  if selection.get('ended_by') in ENDINGS:
    return selection['ended_by']
  if not selection.get('stopped_early'):
    return 'cap'
  patience, best = selection.get('patience') or 0, selection.get('best_step')
  if best is None:
    return 'patience'
  after_best = sum(step > best for step in _eval_steps(directory))
  return 'patience' if patience and after_best >= patience else 'floor'


def reached_limit(directory: str, relaxed: dict) -> bool:
  """Whether the finished run in `directory` ended at one of the `relaxed` limits (so the
  relaxed trial trains on), not in a way they leave as it was."""
  return ending(directory) in {LIMITS[key].ending for key in relaxed}


def describe_change(trial: Trial, relaxed: dict) -> str:
  new = trial.all_overrides()
  return ', '.join(f'{key} {old!r} -> {new[key]!r}' for key, old in relaxed.items())


def check_relaxable(directory: str, trial: Trial, relaxed: dict) -> None:
  """Refuses a finished trial that ended at a relaxed limit and has no checkpoint to train on
  from (call it for every trial before `relax_trial` changes any)."""
  if (trial_state(directory) == 'finished' and reached_limit(directory, relaxed)
      and not layout.saved_steps(directory)):
    raise SweepError(
      f'{directory} ended {ENDINGS[ending(directory)]} and has no checkpoint to train on from '
      f'under {describe_change(trial, relaxed)}; delete it (and its archived copy) to train it '
      'again'
    )


def relax_trial(directory: str, trial: Trial, relaxed: dict) -> str:
  """Brings a trial run under stricter `LIMITS` ({key: old value}) to the experiment's values;
  returns 'kept' or 'extended'.

  A finished trial that ended otherwise (a raised cap it never reached, a floor it never met)
  is kept as it is ('kept'). Any other trial resumes from its latest checkpoint and trains on
  ('extended'; the runner passes --allow_config_change with the keys): the plateau schedule and
  the selection state live in the checkpoint and metrics.jsonl, so the result equals a run with
  the new values from the start. A finished trial that ended at an old limit keeps its first
  final_metrics.json beside, as final_metrics.cap<OLD>.json or final_metrics.floor<OLD>.json.
  One without checkpoints to resume from is refused."""
  check_relaxable(directory, trial, relaxed)
  finished = trial_state(directory) == 'finished'
  status = {**read_status(directory), **identity(trial),
            'relaxed_from': {**read_status(directory).get('relaxed_from', {}), **relaxed}}
  if finished and not reached_limit(directory, relaxed):
    write_status(directory, status)
    return 'kept'
  if finished:
    limit = next(LIMITS[key] for key in relaxed if LIMITS[key].ending == ending(directory))
    first = os.path.join(directory, f'final_metrics.{limit.ending}{relaxed[limit.key]:g}.json')
    os.replace(os.path.join(directory, FINAL_FILE), first)
    status['status'] = 'interrupted'
  write_status(directory, status)
  return 'extended'


def resume_args(directory: str, trial: Trial) -> list[str]:
  """The flags `attnlab.main` needs to resume the run in `directory` as `trial`: accepting
  relaxed `LIMITS` against the run's config.json."""
  saved, wanted = saved_settings(directory), trial.all_overrides()
  keys = [key for key, limit in LIMITS.items()
          if _is_numeric(saved.get(key)) and _is_numeric(wanted.get(key))
          and limit.relaxes(saved[key], wanted[key])]
  return [f'--allow_config_change={",".join(keys)}'] if keys else []
