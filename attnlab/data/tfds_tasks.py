"""TFDS plumbing shared by the TFDS-backed tasks (cmudict_g2p, dates, bible, wmt14_translate).

Real datasets are TFDS builders prepared as array_record into `config.task.data_dir` ('' = TFDS's
default, `$TFDS_DATA_DIR` or ~/tensorflow_datasets) and read with `as_data_source`: TensorFlow is
never imported. Preparing is a no-op once the files exist. Processes that need the same
unprepared dataset at once (a sweep's parallel trials on a fresh machine) take turns through a
lock file beside it: the first prepares, the others find it prepared (two concurrent TFDS
preparations fail, the second rename of its temporary directory onto the finished one).

A prepared split is read once into memory (`TfdsSplit`): array_record random access costs ~1 ms
per record here while bulk reads cost ~30 us, and the pipeline's length pre-pass touches every
example anyway. Records are read as raw bytes and parsed with TFDS's own copy of the
tf.train.Example proto, 5x faster than TFDS's generic numpy decoding (50k dates: 3 s, not
14 s). Attnlab's split names map onto TFDS's: train -> train, eval -> validation, test -> test.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import io
import logging
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow_datasets as tfds
from tensorflow_datasets.proto import tf_example_pb2

from attnlab.data.tasks import SPLITS
from attnlab.runtime import logs

TFDS_SPLITS = {'train': 'train', 'eval': 'validation', 'test': 'test'}
READ_CHUNK = 4096  # records per bulk read


def _python(value: Any) -> Any:
  """TFDS numpy values -> str / list[str] / int (Text features come back as bytes)."""
  if isinstance(value, bytes):
    return value.decode('utf-8')
  if isinstance(value, list | tuple) or (isinstance(value, np.ndarray) and value.ndim == 1):
    return [_python(v) for v in list(value)]
  if isinstance(value, np.generic):
    return value.item()
  return value


def _parse(serialized: bytes, keys: Sequence[str], list_keys: Sequence[str]) -> list[Any]:
  """Values of `keys` in a serialized tf.train.Example (as TFDS writes Text/int features)."""
  feature = tf_example_pb2.Example.FromString(serialized).features.feature
  out = []
  for key in keys:
    kind = feature[key].WhichOneof('kind')
    values = [_python(v) for v in getattr(feature[key], kind).value] if kind else []
    out.append(values if key in list_keys else values[0])
  return out


def _read(data_source: Sequence[Mapping[str, Any]], keys: list[int]) -> Sequence[Mapping]:
  if hasattr(data_source, '__getitems__'):
    try:
      return data_source.__getitems__(keys)
    except TypeError:
      pass  # tfds.testing.mock_data (TFDS 4.9.10) installs an unbound `__getitems__`
  return [data_source[k] for k in keys]


class TfdsSplit:
  """One prepared split held in memory: `split[i] -> {renamed fields..., 'index': i}`.

  Args:
    data_source: a TFDS data source (`builder.as_data_source(split=...)`), giving serialized
      records (`DeserializeMethod.RAW_BYTES`, parsed here) or decoded dicts.
    fields: record key -> output key, e.g. {'de': 'source', 'en': 'target'}; other keys are
      not kept.
    list_keys: record keys holding sequences (e.g. `tfds.features.Sequence(Text())`).
  """

  def __init__(
    self,
    data_source: Sequence[Any],
    fields: Mapping[str, str],
    list_keys: Sequence[str] = (),
  ):
    keys, outs = list(fields), list(fields.values())
    self._columns: dict[str, list] = {out: [] for out in outs}
    n = len(data_source)
    for start in range(0, n, READ_CHUNK):
      for record in _read(data_source, list(range(start, min(start + READ_CHUNK, n)))):
        if isinstance(record, bytes):
          values = _parse(record, keys, list_keys)
        else:  # decoded (e.g. by tfds.testing.mock_data)
          values = [_python(record[key]) for key in keys]
        for out, value in zip(outs, values, strict=True):
          self._columns[out].append(value)
    self._size = n

  def __len__(self) -> int:
    return self._size

  def __getitem__(self, index: int) -> dict[str, Any]:
    index = int(index)
    if not 0 <= index < self._size:
      raise IndexError(f'index {index} out of range for {self._size} examples')
    example = {key: column[index] for key, column in self._columns.items()}
    example['index'] = index
    return example

  def column(self, key: str) -> list:
    """All values of one field, in index order."""
    return self._columns[key]


@contextlib.contextmanager
def _preparation_lock(data_dir: str):
  """Holds an exclusive lock beside `data_dir` (the builder's versioned directory) while one
  process prepares it; a no-op for remote paths (gs://...), where files cannot be locked."""
  if '://' in data_dir:
    yield
    return
  parent, version = os.path.split(os.path.normpath(data_dir))
  os.makedirs(parent, exist_ok=True)
  # A dotted name that is no version string: TFDS's version listing ignores it.
  with open(os.path.join(parent, f'.{version}.prepare.lock'), 'a') as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(lock, fcntl.LOCK_UN)


def prepared(make_builder: Callable[[], tfds.core.DatasetBuilder]) -> tfds.core.DatasetBuilder:
  """`make_builder()`, prepared as array_record if its files are not there yet.

  TFDS's notes (custom configurations, progress bars, "Downloading and preparing") go to the
  run's log file; a first preparation says so in two lines on stderr instead.
  """
  with logs.library_detail_to_log_file(), contextlib.redirect_stdout(_TfdsPrints()):
    builder = make_builder()
    if builder.is_prepared():
      return builder
    with _preparation_lock(os.fspath(builder.data_dir)):
      builder = make_builder()  # another process may have prepared it while this one waited
      if builder.is_prepared():
        return builder
      print(f'preparing {builder.info.full_name} (first use) in {builder.data_dir}',
            file=sys.stderr, flush=True)
      started = time.time()
      tfds.disable_progress_bar()
      builder.download_and_prepare(file_format='array_record')
  splits = ', '.join(f'{name} {info.num_examples:,}' for name, info in builder.info.splits.items())
  print(f'prepared {builder.name} in {time.time() - started:.0f} s: {splits}', file=sys.stderr,
        flush=True)
  return builder


class _TfdsPrints(io.StringIO):
  """What TFDS prints to stdout while preparing, as log records instead."""

  def write(self, text: str) -> int:
    if text.strip():
      logging.getLogger('tensorflow_datasets').info(text.strip())
    return len(text)


def read_splits(
  builder: tfds.core.DatasetBuilder, fields: Mapping[str, str]
) -> dict[str, functools.partial]:
  """attnlab split name -> zero-argument function reading that split into a `TfdsSplit`."""

  features = builder.info.features
  list_keys = [k for k in fields if isinstance(features[k], tfds.features.Sequence)]
  raw = tfds.decode.DeserializeMethod.RAW_BYTES

  def read(split: str) -> TfdsSplit:
    source = builder.as_data_source(split=TFDS_SPLITS[split], deserialize_method=raw)
    return TfdsSplit(source, fields, list_keys)

  return {s: functools.partial(read, s) for s in SPLITS}


def read_splits_and_train(
  builder: tfds.core.DatasetBuilder, fields: Mapping[str, str]
) -> tuple[dict[str, Callable[[], TfdsSplit]], TfdsSplit]:
  """`read_splits`, with the train split read now (the vocabularies are built from it) and
  kept: the returned splits hand back that same `TfdsSplit` rather than reading it again."""
  splits = read_splits(builder, fields)
  train = splits['train']()
  splits['train'] = lambda: train
  return splits, train
