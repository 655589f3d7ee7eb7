"""What the terminal shows during a run; the libraries' own logs go to the run's log file.

By default the console gets attnlab's lines (a summary of the run, progress, evaluations and a
final summary with the test metrics and the run directory's files) and every WARNING and
ERROR. The INFO logs of absl, orbax and JAX (about 45 lines per checkpoint save) go only to
`<workdir>/train.log` (`train.process<p>.log` for process p > 0). absl's `--verbosity` (`-v`)
on the command line brings them back to the console.

    route_library_logs(verbose=False)   # at start-up, before JAX logs anything
    with log_file(workdir, process_index):  # once the workdir may be written
      ...
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import traceback
from logging.handlers import MemoryHandler

from absl import logging as absl_logging

from attnlab import workdir as workdir_lib
from attnlab.selection import SELECT_SPLIT

LOG_FILE = 'train.log'
_buffer: MemoryHandler | None = None  # records logged before the log file exists
_verbose = False  # --verbosity given: library logs on the console too


class _LibraryNoise(logging.Filter):
  """Drops asyncio's 'Task exception was never retrieved' reports from the console: orbax's
  abandoned reads of an unreadable checkpoint, thousands of lines each, printed long after the
  fallback to an older step has succeeded. They stay in the log file."""

  def filter(self, record: logging.LogRecord) -> bool:
    return not (record.name == 'asyncio' and 'never retrieved' in str(record.msg))


class _OnlyAttnlab(logging.Filter):
  def filter(self, record: logging.LogRecord) -> bool:
    return record.pathname.startswith(_PACKAGE_DIR)


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


@contextlib.contextmanager
def library_detail_to_log_file():
  """Within: the libraries' records (e.g. orbax's errors while a damaged checkpoint is tried)
  reach the log file only; attnlab's own warnings still reach the console."""
  if _verbose:
    yield
    return
  console, quiet = absl_logging.get_absl_handler(), _OnlyAttnlab()
  console.addFilter(quiet)
  try:
    yield
  finally:
    console.removeFilter(quiet)


def _unraisable_to_log_file(unraisable) -> None:
  """Python prints exceptions it cannot raise (abandoned coroutines, __del__) straight to
  stderr. orbax leaves thousands of lines of them behind after a failed checkpoint read (the
  fallback has already succeeded): those from library code go to the log file."""
  frames = traceback.extract_tb(unraisable.exc_traceback) if unraisable.exc_traceback else []
  if any(frame.filename.startswith(_PACKAGE_DIR) for frame in frames):
    sys.__unraisablehook__(unraisable)  # attnlab's own: a bug to see
    return
  logging.getLogger('attnlab.console').info(
    '%s %r', unraisable.err_msg or 'Exception ignored in', unraisable.object,
    exc_info=(unraisable.exc_type, unraisable.exc_value, unraisable.exc_traceback))


def route_library_logs(verbose: bool) -> None:
  """Console: WARNING and above unless `verbose`; every record is kept for the log file."""
  global _buffer, _verbose
  _verbose = verbose
  console = absl_logging.get_absl_handler()
  if not verbose:
    console.setLevel(logging.WARNING)
    console.addFilter(_LibraryNoise())
    sys.unraisablehook = _unraisable_to_log_file
  if _buffer is None:
    _buffer = MemoryHandler(capacity=1 << 20, flushLevel=logging.CRITICAL + 1)
    logging.root.addHandler(_buffer)


def log_path(workdir: str, process_index: int) -> str:
  name = LOG_FILE if process_index == 0 else f'train.process{process_index}.log'
  return os.path.join(workdir, name)


@contextlib.contextmanager
def log_file(workdir: str, process_index: int = 0):
  """Appends every log record (at the root logger's level) to the run's log file."""
  global _buffer
  path = log_path(workdir, process_index)
  os.makedirs(workdir, exist_ok=True)  # process p > 0 may get here before process 0 made it
  handler = logging.FileHandler(path, encoding='utf-8')
  handler.setFormatter(absl_logging.PythonFormatter())
  if _buffer is not None:  # what was logged before the workdir was known comes first
    _buffer.setTarget(handler)
    _buffer.flush()
    logging.root.removeHandler(_buffer)
    _buffer.close()
    _buffer = None
  logging.root.addHandler(handler)
  try:
    yield path
  finally:
    logging.root.removeHandler(handler)
    handler.close()


def _number(value) -> str:
  return f'{value:.4g}' if isinstance(value, float) else str(value)


def start_summary(cfg, *, num_params: int, num_devices: int, workdir: str, log: str,
                  selection, start_step: int, filtered: int) -> list[str]:
  """Three or four lines: the task and model, the training plan, the run directory."""
  m = cfg.model
  if m.kind == 'rnn':
    attention = (m.attention.describe_no_attention() if not m.attention.attends else
                 f'{m.attention.timing} attention, {m.attention.score} score, '
                 f'{m.attention.window} window')
    model = f'rnn {m.cell} {m.encoder_layers}+{m.decoder_layers} layers, {attention}'
  else:
    model = (f'transformer {m.encoder_layers}+{m.decoder_layers} layers, '
             f'{m.transformer.num_heads} heads')
  o, t = cfg.optim, cfg.train
  if selection is None:
    select = 'no model selection (eval.splits has no eval split): the last step is tested'
  else:
    patience = f'stop after {t.patience} without improvement' if t.patience else 'no early stop'
    select = f'select on {selection.describe()}, {patience}'
  if cfg.data.batching == 'tokens':
    batch = f'~{cfg.data.tokens_per_batch} tokens ({cfg.data.num_buckets} padded shapes)'
  else:
    batch = f'{cfg.data.global_batch_size} examples'
  regularise = f'dropout {m.dropout:g}' if m.dropout else 'no dropout'
  if t.label_smoothing:
    regularise += f', label smoothing {t.label_smoothing:g}'
  schedule = o.schedule
  if o.schedule == 'plateau':
    schedule = f'x{o.plateau_factor:g} after {o.plateau_patience} evaluations without improvement'
    if o.plateau_min_scale:
      schedule += f', stop below x{o.plateau_min_scale:g}'
  lines = [
    f'{cfg.task.name}: {model}, H={m.hidden_size}, {regularise}; {num_params:,} parameters on '
    f'{num_devices} device(s)',
    f'{t.num_steps} steps of {batch}, {o.name} lr {o.learning_rate:g}'
    f' ({schedule}, warmup {o.warmup_steps}); eval every {t.eval_every} steps; {select}',
    f'run directory {workdir} (library logs: {log})',
  ]
  if filtered:
    lines.append(f'{filtered} training pairs longer than data.max_*_length are left out')
  if start_step:
    lines.append(f'resumed from step {start_step}')
  return lines


def result_line(split: str, step: int, metrics: dict, selection, stopped_at: int | None) -> str:
  """`test @ step 300 (selected: best eval wer 0.21 of 6 evaluations) | wer 0.22 | ...`."""
  if selection is not None and selection.best_step is not None:
    how = (f'selected on {SELECT_SPLIT} {selection.metric}: best {_number(selection.best_value)}'
           f' at step {selection.best_step}')
  else:
    how = 'the last step'
  if stopped_at is not None:
    how += f'; stopped early at step {stopped_at}'
  first = [selection.metric] if selection is not None else []
  keys = first + [k for k in ('sequence_accuracy', 'wer', 'per', 'bleu', 'chrf', 'loss',
                              'perplexity') if k not in first]
  parts = [f'{split} @ step {step} ({how})']
  parts += [f'{k} {_number(metrics[k])}' for k in keys if isinstance(metrics.get(k), int | float)]
  return ' | '.join(parts)


def files_line(workdir: str, *, log: str) -> str:
  """Where the run's files are, as they exist on disk."""
  names = sorted(os.listdir(workdir))
  files = (workdir_lib.FINAL_METRICS_FILE, workdir_lib.METRICS_FILE, workdir_lib.CONFIG_FILE)
  parts = [n for n in files if n in names]
  latest = workdir_lib.saved_steps(workdir)
  best = workdir_lib.saved_steps(workdir, best=True)
  checkpoints = f'checkpoints/ (latest: {", ".join(map(str, latest)) or "none"}'
  parts.append(checkpoints + (f'; best/: {best[-1]})' if best else ')'))
  parts += [f'{n}/' for n in ('samples', 'attention') if n in names]
  parts += [n for n in names if n.startswith('predictions_')]
  if 'tensorboard' in names:
    parts.append(f'tensorboard/ (tensorboard --logdir {os.path.join(workdir, "tensorboard")})')
  parts.append(os.path.basename(log))
  return f'files in {workdir}: ' + ', '.join(parts)
