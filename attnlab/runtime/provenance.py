"""Where a run's numbers come from: the attnlab commit (and whether its checkout's code had
changes), the versions of the libraries that compute them, the Python and the devices.

Each process run of a training appends one record to WORKDIR/provenance.jsonl (a resumed run
adds one, so a run continued on another machine or commit says so); evaluation adds sacrebleu's
signature to the BLEU and chrF it reports (attnlab/metrics.py). Reports show the last record
as one line (`one_line`).
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
from collections.abc import Sequence

# The distributions whose versions can change a number attnlab reports.
LIBRARIES = ('jax', 'jaxlib', 'flax', 'optax', 'orbax-checkpoint', 'numpy', 'grain',
             'tensorflow-datasets', 'sacrebleu')
_CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Tracked folders that runs write, not code: a sweep run with --archive=results/NAME rewrites its
# tracked sweep.json and report, which must not mark the next trial's commit as changed.
OUTPUT_FOLDERS = ('results',)


def git_state(folder: str = _CHECKOUT) -> dict:
  """{'commit': sha, 'dirty': changes to tracked files outside OUTPUT_FOLDERS} of the checkout
  attnlab runs from; {} where it is not one (an installed wheel) or git is missing."""
  def git(*args: str) -> str:
    return subprocess.run(['git', '-C', folder, *args], capture_output=True, text=True,
                          check=True, timeout=10).stdout.strip()
  try:
    commit = git('rev-parse', 'HEAD')
    outputs = [f':(exclude){name}' for name in OUTPUT_FOLDERS]
    dirty = bool(git('status', '--porcelain', '--untracked-files=no', '--', '.', *outputs))
  except (OSError, subprocess.SubprocessError):
    return {}
  return {'commit': commit, 'dirty': dirty}


def library_versions() -> dict[str, str]:
  """Distribution name -> installed version, for those of LIBRARIES that are installed."""
  versions = {}
  for name in LIBRARIES:
    try:
      versions[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      continue
  return versions


def record(devices: Sequence, processes: int) -> dict:
  """The provenance of a process run computing on `devices` (jax.devices(): every process's)
  in a job of `processes` processes."""
  return {'attnlab': git_state(), 'python': platform.python_version(),
          'libraries': library_versions(),
          'devices': {'platform': devices[0].platform, 'kind': devices[0].device_kind,
                      'count': len(devices), 'processes': processes}}


def one_line(entry: dict) -> str:
  """`attnlab 1a2b3c4d (with local changes) · Python 3.11.7 · jax 0.10.2 · ... · 8 x cpu`."""
  state = entry.get('attnlab') or {}
  code = (f"attnlab {state['commit'][:8]}" + (' (with local changes)' if state.get('dirty') else '')
          if state.get('commit') else 'attnlab (not a git checkout)')
  parts = [code, f"Python {entry.get('python', '?')}"]
  parts += [f'{name} {version}' for name, version in (entry.get('libraries') or {}).items()]
  found = entry.get('devices') or {}
  if found:
    parts.append(f"{found.get('count')} x {found.get('kind') or found.get('platform')}")
  return ' · '.join(parts)
