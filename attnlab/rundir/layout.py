"""The run directory's files and folders: their names, and the readers every command shares.

A run directory (`--workdir`) holds config.json, the vocabularies, metrics.jsonl, checkpoints/
(the latest few and best/), samples/, attention/, predictions_<split>.jsonl, final_metrics.json,
run_times.jsonl, train.log and tensorboard/ (docs/running.md lists them). A sweep archive keeps
a trial's large text files xz-compressed (attnlab/sweeps/archive.py). The folder may be a
bucket's (gs://bucket/run): the readers here go through etils.epath (attnlab/storage.py).
"""

from __future__ import annotations

import datetime
import gzip
import io
import lzma
import os

from etils import epath

from attnlab import storage

CONFIG_FILE = 'config.json'
CONFIG_CHANGES = 'config_changes.jsonl'
METRICS_FILE = 'metrics.jsonl'  # one JSON event per line: {step, split, metric: value, ...}
FINAL_METRICS_FILE = 'final_metrics.json'  # written when the run ends: the test of the best step
VOCAB_FILES = {'source': 'source_vocab.json', 'target': 'target_vocab.json'}
CHECKPOINTS = 'checkpoints'  # RUN/checkpoints/<step>/ (the latest ones) and best/<step>/
BEST_CHECKPOINTS = 'best'  # the parameters of each improvement of the selection metric
# One line per process run, finished or not: {first_step, last_step, wall_s, outcome,
# finished_at}; a resumed run adds a line (attnlab.run_report sums wall_s).
RUN_TIMES = 'run_times.jsonl'
# The running process's line, rewritten at every log step: a process killed without a chance
# to append its line (SIGKILL, a machine or session that ends) leaves it, and the next start
# (or sweep launch) appends it as outcome 'killed', so no wall time is lost.
RUN_IN_PROGRESS = 'run_time_current.json'
# A sweep archive (attnlab/sweeps/archive.py) keeps its large text files xz-compressed, as
# NAME.xz; older archives hold NAME.gz. `open_text` reads every form.
COMPRESSED = '.xz'
# The forms a text file of a run may take, in the order they are looked for (the plain file
# wins), each with the function that opens it: open(path, mode, encoding=, errors=).
TEXT_FORMS = {'': open, COMPRESSED: lzma.open, '.gz': gzip.open}
LOCK_FILE = '.lock'  # held (flock) by the process that trains in the workdir; {pid, host}
# On an object store, where a step folder cannot be renamed into place, orbax marks a finished
# save with this file in it.
ORBAX_COMMIT_FILE = 'commit_success.txt'
SAMPLES = 'samples'  # decoded examples of each eval: samples/<split>_step<N>.txt
ATTENTION = 'attention'  # heatmaps of each eval: attention/<split>_step<N>_ex<I>.png and .npz
EVALUATIONS = 'evaluations'  # attnlab.evaluate's results: evaluations/<settings>/
TENSORBOARD = 'tensorboard'
PROVENANCE = 'provenance.jsonl'  # one record per process run: commit, versions, devices
LOG_FILE = 'train.log'  # the libraries' logs of process 0 (attnlab/runtime/logs.py)


def predictions_file(split: str) -> str:
  """predictions_<split>.jsonl: one decoded example per line (train/evaluation.py)."""
  return f'predictions_{split}.jsonl'


TEST_PREDICTIONS = predictions_file('test')  # what the reports read of a finished trial


def log_path(workdir: str, process_index: int) -> str:
  """train.log, or train.process<p>.log for process p > 0 of a multi-process job."""
  name = LOG_FILE if process_index == 0 else f'train.process{process_index}.log'
  return os.path.join(workdir, name)


def file_on_the_way(path: str) -> str | None:
  """The existing file that `path` would pass through (FILE in FILE/run), if any: no run
  directory, report or sweep folder can be made there. None for a URL: a bucket has no files
  on the way, only names with slashes."""
  if storage.is_remote(path):
    return None
  head = os.path.dirname(os.path.abspath(path))
  while head != os.path.dirname(head):
    if os.path.lexists(head) and not os.path.isdir(head):
      return head
    head = os.path.dirname(head)
  return None


def now() -> str:
  """The local time with its offset, as run records store it."""
  return datetime.datetime.now().astimezone().isoformat()


def text_form(path: str) -> str | None:
  """The suffix (a key of TEXT_FORMS) of the file that holds the text file `path`: '' for
  `path` itself, else its compressed copy's; None when there is none."""
  return next((suffix for suffix in TEXT_FORMS if epath.Path(path + suffix).is_file()), None)


def open_text(path: str):
  """Opens the UTF-8 text file `path` for reading, or its compressed copy where a sweep archive
  keeps it (`text_form`; a trial restored from one keeps it so too). Bad bytes read as U+FFFD,
  as from a line cut by an interruption. FileNotFoundError when there is none. Every reader of
  a run's metrics.jsonl, predictions and sweep log goes through here."""
  suffix = text_form(path)
  if suffix is None:
    raise FileNotFoundError(f'no {path} (nor {path}{COMPRESSED})')
  if suffix == '':
    return storage.open_text(path, errors='replace')
  if storage.is_remote(path):  # a bucket's object is read whole
    with TEXT_FORMS[suffix](io.BytesIO(epath.Path(path + suffix).read_bytes())) as f:
      return io.StringIO(f.read().decode('utf-8', errors='replace'), newline=None)
  return TEXT_FORMS[suffix](path + suffix, 'rt', encoding='utf-8', errors='replace')


def checkpoint_dir(workdir: str) -> str:
  return os.path.join(workdir, CHECKPOINTS)


def best_checkpoint_dir(workdir: str) -> str:
  return os.path.join(checkpoint_dir(workdir), BEST_CHECKPOINTS)


def saved_steps(workdir: str, *, best: bool = False) -> list[int]:
  """Checkpoint steps on disk, ascending: the numeric folders of RUN/checkpoints (finished
  saves: orbax writes into a temporary name first, or, on an object store, into the step's own
  folder, marked finished by ORBAX_COMMIT_FILE), or of RUN/checkpoints/best."""
  folder = epath.Path(best_checkpoint_dir(workdir) if best else checkpoint_dir(workdir))
  if not folder.is_dir():
    return []
  steps = [p for p in folder.iterdir() if p.name.isdigit()]
  if storage.is_remote(folder):
    steps = [p for p in steps if (p / ORBAX_COMMIT_FILE).exists()]
  return sorted(int(p.name) for p in steps)
