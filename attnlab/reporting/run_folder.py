"""The folder a run report is written to (`attnlab.run_report RUN --out=OUT`): what it may
overwrite (`check_out`), and what it holds besides the report: the run's archive (`archive_run`)
and, with --model, its trained model (`model_lines` says how to decode with it)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import tempfile

from etils import epath

from attnlab import storage
from attnlab.errors import UserError
from attnlab.reporting import sweep_results
from attnlab.rundir import layout
from attnlab.sweeps import archive


class RunReportError(UserError):
  """A run directory that cannot be reported."""


# How README.md names its run (`summary`): an earlier report of the same run may be rewritten.
_REPORTED_RUN = re.compile(
  r'^Run directory (`+) ?(.*?) ?\1, reported by `python -m attnlab\.run_report`', re.MULTILINE
)


def reported_run(out: str) -> str | None:
  """The run directory that OUT/README.md says it reports, if run_report wrote it."""
  try:
    with open(os.path.join(out, 'README.md'), encoding='utf-8') as f:
      match = _REPORTED_RUN.search(f.read(4096))
  except (OSError, ValueError):
    return None
  return match.group(2) if match else None


def _same_folder(a: str, b: str) -> bool:
  if storage.is_remote(a) or storage.is_remote(b):
    return a.rstrip('/') == b.rstrip('/')
  try:
    return os.path.samefile(a, b)
  except OSError:
    return False


def check_out(run_dir: str, out: str) -> None:
  """Refuses, before anything is written, an OUT whose files the report would overwrite: the
  run directory itself (its config.json would be copied onto itself, and README.md and plots
  land among the run's files), a file, or a folder that holds anything but run_report's
  earlier report of this same run (recognised by its README.md naming this run directory), and a
  bucket's folder (the report is written locally, then copied where it is published)."""
  if storage.is_remote(out):
    raise RunReportError(f'--out={out}: the report is written to a local folder; give one, and '
                         'copy it to the bucket afterwards if it belongs there')
  free, n = f'{os.path.normpath(out)}-2', 2
  while os.path.lexists(free):
    n += 1
    free = f'{os.path.normpath(out)}-{n}'
  if os.path.lexists(out) and not os.path.isdir(out):
    raise RunReportError(f'--out={out} is a file, not a folder; give a new folder '
                         f'(e.g. --out={free})')
  above = layout.file_on_the_way(out)
  if above:
    raise RunReportError(f'--out={out} is under {above}, which is a file, not a folder; give a '
                         'folder path that is not under a file')
  if not os.path.isdir(out):
    return  # new
  if _same_folder(out, run_dir):
    name = os.path.basename(os.path.abspath(run_dir))
    raise RunReportError(f'--out={out} is the run directory {run_dir} itself: the report '
                         "would write over the run's config.json and among its files; give a "
                         f'folder of its own (e.g. --out=results/{name})')
  try:
    empty = not os.listdir(out)
  except OSError as e:
    raise RunReportError(f'--out={out} cannot be read ({e.strerror}); give another folder '
                         f'(e.g. --out={free})') from None
  if empty:
    return
  recorded = reported_run(out)
  if recorded is not None and _same_folder(recorded, run_dir):
    return  # this run's report: written again
  whose = f'the report of {recorded}' if recorded is not None else 'files'
  raise RunReportError(
    f'--out={out} already holds {whose}, not a report of {run_dir} by attnlab.run_report: '
    'the report would overwrite its README.md, config.json, final_metrics.json and plots; '
    f'give a new or empty folder (e.g. --out={free})'
  )


def archive_run(run_dir: str, out: str) -> None:
  """Copies into OUT what a sweep archive keeps of a trial (sweeps/archive.py: config.json,
  final_metrics.json, run_times.jsonl, provenance.jsonl, the compressed metrics.jsonl and test
  predictions, the tested step's attention weights), so that every number of the report can be
  recomputed from OUT alone."""
  tmp = os.path.join(out, f'.archive.{os.getpid()}.tmp')
  shutil.rmtree(tmp, ignore_errors=True)
  with tempfile.TemporaryDirectory() as staged:
    if storage.is_remote(run_dir):  # a bucket's run: its files and heatmaps, read through epath
      storage.copy_tree(run_dir, staged, top_only=True)
      if epath.Path(run_dir, layout.ATTENTION).is_dir():
        storage.copy_tree(epath.Path(run_dir, layout.ATTENTION),
                          os.path.join(staged, layout.ATTENTION))
    archive.compact_copy(staged if storage.is_remote(run_dir) else run_dir, tmp)
  for folder, _, names in os.walk(tmp):
    target = os.path.join(out, os.path.relpath(folder, tmp))
    os.makedirs(target, exist_ok=True)
    for name in names:
      os.replace(os.path.join(folder, name), os.path.join(target, name))
  shutil.rmtree(tmp)


def model_lines(run_dir: str, out: str, step: int) -> list[str]:
  """The README's lines on the copied model, with a decode command for the first test input."""
  predictions = sweep_results.read_jsonl(os.path.join(run_dir, layout.TEST_PREDICTIONS))
  example = predictions[0].get('source', 'INPUT') if predictions else 'INPUT'
  return [
    f'- Model: the parameters of step {step:,} (checkpoints/best/) and the vocabularies, so this '
    'folder opens as a run directory:',
    '',
    f'      echo {shlex.quote(example)} | python -m attnlab.decode --workdir={out}',
  ]
