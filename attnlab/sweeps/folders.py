"""Which folders a sweep may write into (`python -m attnlab.sweep --workdir=DIR --archive=DIR`).

A sweep writes sweep.json, results.md, results.csv, report.html and plots/ into its folders, and
replaces a trial's folder wholesale when it restores or archives it. So a --workdir or --archive
must be new, empty, or this experiment's own sweep (its sweep.json names this experiment);
anything else (a file, a user's folder, another experiment's sweep) is refused in one line
before anything is written.
"""

from __future__ import annotations

import json
import os
import re

from attnlab.rundir import layout
from attnlab.sweeps.trials import MANIFEST, Experiment, SweepError

_MANIFEST_TMP = re.compile(re.escape(MANIFEST) + r'\.\d+\.tmp')


def _free_folder(folder: str, experiment: Experiment) -> str:
  """A folder beside `folder` named after the experiment that it may use: new, empty, or its
  own sweep already."""

  def usable(candidate: str) -> bool:
    if not os.path.lexists(candidate):
      return True
    if candidate == os.path.normpath(folder) or not os.path.isdir(candidate):
      return False
    owner, _ = _read_owner(os.path.join(candidate, MANIFEST))
    try:
      return (owner or {}).get('name') == experiment.name or not os.listdir(candidate)
    except OSError:
      return False

  parent = os.path.dirname(os.path.normpath(folder))
  candidate, n = os.path.join(parent, experiment.name), 1
  while not usable(candidate):
    n += 1
    candidate = os.path.join(parent, f'{experiment.name}-{n}')
  return candidate


def _read_owner(path: str) -> tuple[dict | None, str]:
  """(the sweep.json at `path`, '') when it names an experiment, else (None, why not)."""
  try:
    with open(path, encoding='utf-8') as f:
      manifest = json.load(f)
  except (OSError, ValueError) as e:
    return None, f'{type(e).__name__}: {e}'
  if not isinstance(manifest, dict) or not isinstance(manifest.get('name'), str):
    return None, 'it names no experiment'
  return manifest, ''


def check_folder_owner(folder: str | None, experiment: Experiment, flag: str) -> None:
  """A SweepError unless `folder` (a --workdir or --archive) is new, empty, or this
  experiment's own sweep (its sweep.json names this experiment); called before anything is
  written."""
  if not folder:
    return
  way_out = f'give a new or empty folder (e.g. {flag}={_free_folder(folder, experiment)})'
  if os.path.lexists(folder) and not os.path.isdir(folder):
    raise SweepError(f'{flag}={folder} is a file, not a folder; {way_out}')
  above = layout.file_on_the_way(folder)
  if above:
    raise SweepError(f'{flag}={folder} is under {above}, which is a file, not a folder; give a '
                     'folder path that is not under a file')
  if not os.path.isdir(folder):
    return  # new: the sweep creates it
  try:
    # A manifest's temporary file alone: another process of this sweep is creating the folder
    # (write_manifest); the check it repeats under the sweep's lock (command.prepare_workdir)
    # refuses a second experiment there.
    if all(_MANIFEST_TMP.fullmatch(name) for name in os.listdir(folder)):
      return
  except OSError as e:
    raise SweepError(f'{flag}={folder} cannot be read ({e.strerror}); {way_out}') from None
  path = os.path.join(folder, MANIFEST)
  if not os.path.isfile(path):
    raise SweepError(
      f'{flag}={folder} already holds files and no {MANIFEST}, so it is not a sweep of '
      f'{experiment.path}: the sweep would write its results.md, results.csv, report.html and '
      f'trial folders over what is there; {way_out}'
    )
  owner, why = _read_owner(path)
  if owner is None:
    raise SweepError(f'{flag}={folder}: {path} is not a readable sweep manifest ({why}), so '
                     f'the folder is not a sweep of {experiment.path}; {way_out}')
  recorded = owner.get('experiment')
  # The same name from another file (experiments/learning_speed/local_global.py beside
  # experiments/local_global.py) is another experiment; a recorded path that does not resolve
  # here (another working directory, a moved checkout) leaves the name to decide.
  elsewhere = (isinstance(recorded, str) and os.path.isfile(recorded)
               and not os.path.samefile(recorded, experiment.path))
  if owner['name'] != experiment.name or elsewhere:
    raise SweepError(
      f'{flag}={folder} holds the sweep of {owner.get("experiment", owner["name"])}, not of '
      f'{experiment.path}: give each experiment its own folder (e.g. '
      f'{flag}={_free_folder(folder, experiment)})'
    )
