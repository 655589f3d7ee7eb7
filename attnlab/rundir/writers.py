"""Where training and evaluation numbers go: metrics.jsonl, TensorBoard, and the console.

`MetricWriter` appends one JSON object per event to `<workdir>/metrics.jsonl`

    {"step": 500, "split": "eval", "loss": 0.41, "sequence_accuracy": 0.87, ...}

and writes the numeric metrics as TensorBoard scalars under `<workdir>/tensorboard/<split>/`
(tag = metric name), so that train and eval curves of one metric share a chart. The event
files come from the tensorboard package's own writer (`EventFileWriter` and its `Event`
protos; no TensorFlow). Only process 0 should write: construct with
`enabled=jax.process_index() == 0`; a disabled writer creates no files. In a bucket's workdir
(gs://bucket/run) both are written to local copies and uploaded whole (attnlab/storage.py).

A resumed run appends to the same files, so steps between the last checkpoint and the
interruption appear twice; readers keep the last entry per (step, split).

`ProgressLine` prints one console line per logging event (step, steps/s, ETA, loss), one per
evaluation (`report`), free lines (`note`) and a closing one (`finish`).
"""

from __future__ import annotations

import contextlib
import json
import math
import numbers
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from attnlab import storage
from attnlab.rundir import layout

_RESERVED = ('step', 'split')


def to_json(value: Any) -> Any:
  """NumPy / JAX scalars and arrays become Python numbers and lists; containers recurse."""
  if isinstance(value, Mapping):
    return {str(k): to_json(v) for k, v in value.items()}
  if isinstance(value, list | tuple):
    return [to_json(v) for v in value]
  if isinstance(value, str | bool | int | float) or value is None:
    return value
  if hasattr(value, '__array__') or isinstance(value, np.generic):
    array = np.asarray(value)
    return array.item() if array.ndim == 0 else array.tolist()
  raise TypeError(f'metric value {value!r} of type {type(value).__name__} is not JSON-writable')


def _scalar(value: Any) -> float | None:
  """The value as a float if it is one number (bools excluded), else None."""
  if isinstance(value, bool | np.bool_):
    return None
  if isinstance(value, numbers.Real):
    return float(value)
  if hasattr(value, '__array__'):
    array = np.asarray(value)
    if array.size == 1 and np.issubdtype(array.dtype, np.number):
      return float(array.reshape(()))
  return None


class MetricWriter:
  """Appends metrics to metrics.jsonl and TensorBoard; a no-op unless `enabled`."""

  def __init__(self, workdir: str | os.PathLike, *, enabled: bool):
    self.enabled = bool(enabled)
    self.workdir = os.fspath(workdir)
    self._tb: dict[str, EventFileWriter] = {}
    self._jsonl = self._copies = None
    if self.enabled:
      self._copies = storage.LocalCopies(self.workdir)
      # Kept open for the whole run (closed in close()): one append per logging event.
      local = self._copies.path(layout.METRICS_FILE, continued=True)
      self._jsonl = open(local, 'a', encoding='utf-8')

  def write(self, step: int, split: str, metrics: Mapping[str, Any]) -> None:
    """Records `metrics` of `split` ('train', 'eval', 'test', ...) at `step`.

    Any JSON-writable value goes to metrics.jsonl (NumPy/JAX values are converted; NaN and
    inf are written as Python's json writes them); single numbers also go to TensorBoard.
    Both files are flushed, so `tail -f metrics.jsonl` follows a run.
    """
    clash = [k for k in _RESERVED if k in metrics]
    if clash:
      raise ValueError(
        f'metric name {clash[0]!r} is reserved; metrics.jsonl uses '
        f'{", ".join(_RESERVED)} for the event itself'
      )
    if not self.enabled:
      return
    step = int(step)
    record = {'step': step, 'split': str(split)}
    record.update({str(k): to_json(v) for k, v in metrics.items()})
    self._jsonl.write(json.dumps(record) + '\n')
    self._jsonl.flush()
    scalars = {k: _scalar(v) for k, v in metrics.items()}
    scalars = {k: v for k, v in scalars.items() if v is not None}
    if scalars:
      tb = self._tb.get(split)
      if tb is None:
        folder = os.path.join(self._copies.root, layout.TENSORBOARD, split)
        tb = self._tb[split] = EventFileWriter(folder)
      values = [summary_pb2.Summary.Value(tag=str(k), simple_value=v) for k, v in scalars.items()]
      tb.add_event(event_pb2.Event(wall_time=time.time(), step=step,
                                   summary=summary_pb2.Summary(value=values)))
      tb.flush()
    self._copies.upload()

  def close(self) -> None:
    """Flushes and closes every file; later writes fail."""
    for tb in self._tb.values():
      tb.close()
    self._tb.clear()
    if self._jsonl is not None:
      self._jsonl.close()
      self._copies.close()

  def __enter__(self) -> MetricWriter:
    return self

  def __exit__(self, *exc) -> None:
    self.close()


def _duration(seconds: float) -> str:
  if not math.isfinite(seconds):
    return '?'
  seconds = int(round(seconds))
  hours, rest = divmod(seconds, 3600)
  minutes, secs = divmod(rest, 60)
  return f'{hours}h{minutes:02d}m{secs:02d}s' if hours else f'{minutes}m{secs:02d}s'


class ProgressLine:
  """Console progress: `step 150/2000 (7.5%) | 12.3 steps/s | ETA 2m30s | loss 1.234`.

  steps/s is measured between consecutive `update` calls (the first from construction, at
  `start_step`, e.g. the restored step), so it reflects the current speed, compilation of the
  first step included in the first line. Time spent inside `evaluating()` is left out of the
  rate; with `eval_every` the ETA adds the evaluations still due (every `eval_every` steps,
  the last step, and the final test evaluation) at the mean duration of those so far.
  """

  def __init__(
    self,
    total_steps: int,
    *,
    start_step: int = 0,
    keys: Sequence[str] = ('loss',),
    enabled: bool = True,
    clock: Callable[[], float] = time.monotonic,
    eval_every: int = 0,
  ):
    self.total_steps = int(total_steps)
    self.keys = tuple(keys)
    self.enabled = enabled
    self.eval_every = int(eval_every)
    self._clock = clock
    self._start = (int(start_step), clock())
    self._last = self._start
    self._eval_since_update = 0.0  # seconds of evaluation since the last `update`
    self._eval_seconds, self._eval_count = 0.0, 0

  @contextlib.contextmanager
  def evaluating(self):
    """Wraps one evaluation (all its splits): its time counts for the ETA, not the rate."""
    started = self._clock()
    try:
      yield
    finally:
      seconds = self._clock() - started
      self._eval_since_update += seconds
      self._eval_seconds += seconds
      self._eval_count += 1

  def evaluations_due(self, step: int) -> int:
    """Evaluations after `step`: multiples of eval_every, the last step, the final test."""
    if not self.eval_every or step >= self.total_steps:
      return 0
    every, total = self.eval_every, self.total_steps
    return total // every - step // every + (1 if total % every else 0) + 1

  def update(self, step: int, metrics: Mapping[str, Any] | None = None) -> str:
    """Prints (if enabled) and returns the line for `step` with `keys` taken from `metrics`."""
    now = self._clock()
    last_step, last_time = self._last
    self._last = (int(step), now)
    elapsed = now - last_time - self._eval_since_update
    self._eval_since_update = 0.0
    rate = (step - last_step) / elapsed if elapsed > 0 and step > last_step else math.nan
    remaining = max(self.total_steps - step, 0)
    eta = remaining / rate if math.isfinite(rate) and rate > 0 else math.inf
    if self._eval_count:
      eta += self.evaluations_due(step) * self._eval_seconds / self._eval_count
    percent = 100.0 * step / self.total_steps if self.total_steps else 100.0
    parts = [
      f'step {step}/{self.total_steps} ({percent:.1f}%)',
      f'{rate:.2f} steps/s' if math.isfinite(rate) else '? steps/s',
      f'ETA {_duration(eta) if remaining else "0m00s"}',
    ]
    for key in self.keys:
      value = _scalar((metrics or {}).get(key))
      if value is not None:
        parts.append(f'{key} {value:.4g}')
    return self._emit(' | '.join(parts))

  def report(self, step: int, split: str, metrics: Mapping[str, Any], suffix: str = '') -> str:
    """Prints an evaluation line: `eval @ step 500 | loss 0.41 | sequence_accuracy 0.87`.

    Every single-number metric is shown, in the order given; lists and strings are left to
    metrics.jsonl. `suffix` is appended as a last part (e.g. `best so far`).
    """
    parts = [f'{split} @ step {step}']
    for key, value in metrics.items():
      number = _scalar(value)
      if number is not None:
        parts.append(f'{key} {number:.4g}')
    if suffix:
      parts.append(suffix)
    return self._emit(' | '.join(parts))

  def note(self, line: str) -> str:
    """Prints a free line (summaries, notices)."""
    return self._emit(line)

  def finish(self, workdir: str | os.PathLike | None = None) -> str:
    """Prints the closing line: steps run in this process, wall time, where results are."""
    start_step, start_time = self._start
    last_step = self._last[0]
    line = (
      f'done: steps {start_step}-{last_step} of {self.total_steps} in '
      f'{_duration(self._clock() - start_time)}'
    )
    if workdir is not None:
      line += f'; results in {os.fspath(workdir)}'
    return self._emit(line)

  def _emit(self, line: str) -> str:
    if self.enabled:
      print(line, flush=True)
    return line
