"""The training input pipeline: source -> tokenize -> length filter -> global batch -> process
share -> pad (evaluation batches: attnlab/data/eval_pipeline.py).

Training (`TrainBatches`) is a grain `MapDataset` indexed by the global step k, so batch k is a
pure function of (source, seed, k). `data.batching` says how examples become global batches:
'examples' (below) or 'tokens' (attnlab/data/batching.py: a few padded shapes fit to the train
length histogram, each batch about `tokens_per_batch` tokens; steps 1 and 3 are the same):

  1. A pre-pass tokenizes every training example once and records its source/target lengths
     (EOS included). Pairs longer than `max_source_length` / `max_target_length` are dropped
     here, counted in `num_filtered` and logged; dropping them before shuffling keeps the
     order deterministic.
  2. The kept indices are shuffled by grain (a fresh permutation per epoch, seeded by `seed`)
     and repeated forever; consecutive runs of `global_batch_size` form global batch k, so
     batches run across epoch boundaries without a remainder. Both lengths are padded to the
     longest pair of the global batch (read from the length table), rounded up to a multiple
     of `bucket_size` and capped at the max lengths.
  3. Process p of P tokenizes only rows [p*b, (p+1)*b) of global batch k (b = rows / P): every
     process emits the same shapes, there are only a few shapes to compile, and the P shares
     of step k concatenate to exactly the batch a single process builds.

The checkpointable position is `{'step': k}`; `set_state` (or `start_step`) resumes so that the
next batches equal those of an uninterrupted iterator. Batches are numpy int32:
`{'source': [b, S], 'target': [b, T]}` with target = tokens + EOS and PAD_ID padding; the
decoder input [BOS] + target[:-1] is built in the train step.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import grain
import numpy as np
from absl import logging

from attnlab.config.fields import ConfigError
from attnlab.data import batching as batching_lib
from attnlab.data.tasks import Source, Task
from attnlab.data.vocab import Vocab
from attnlab.tokens import PAD_ID

# A ConfigDict or its parsed, validated view `attnlab.config.run.RunConfig`: read by attribute.
Config = Any


def padded_length(length: int, bucket_size: int, cap: int = 0) -> int:
  """`length` rounded up to a multiple of `bucket_size`, at most `cap` (0 = no cap)."""
  rounded = -(-int(length) // bucket_size) * bucket_size
  return min(rounded, cap) if cap else rounded


def pad_rows(seqs: Sequence[Sequence[int]], num_rows: int, length: int) -> np.ndarray:
  """int32 [num_rows, length] holding `seqs` left-aligned, PAD_ID elsewhere."""
  out = np.full((num_rows, length), PAD_ID, np.int32)
  for row, ids in enumerate(seqs):
    out[row, : len(ids)] = ids
  return out


def token_lengths(
  source: Source, source_vocab: Vocab, target_vocab: Vocab
) -> tuple[np.ndarray, np.ndarray]:
  """Source and target token counts (EOS included) of every example: int32 [n] each."""
  n = len(source)
  src_len, tgt_len = np.empty(n, np.int32), np.empty(n, np.int32)
  for i in range(n):
    example = source[i]
    src_len[i] = len(source_vocab.encode(example['source']))
    tgt_len[i] = len(target_vocab.encode(example['target']))
  return src_len, tgt_len


def process_share(global_batch_size: int, process_index: int, process_count: int) -> int:
  """Rows of a global batch that each process builds; ValueError unless they divide evenly."""
  if process_count < 1 or not 0 <= process_index < process_count:
    raise ValueError(f'process_index={process_index} must be in [0, process_count={process_count})')
  if global_batch_size < 1 or global_batch_size % process_count:
    raise ValueError(
      f'global batch size {global_batch_size} must be a positive multiple of the process '
      f'count {process_count}'
    )
  return global_batch_size // process_count


def _check_options(batching: str, max_source_length: int, max_target_length: int,
                   bucket_size: int, seed: int) -> None:
  if batching not in batching_lib.BATCHINGS:
    raise ConfigError(f'data.batching={batching!r} is not valid; choose from '
                      f'{", ".join(batching_lib.BATCHINGS)}')
  if min(max_source_length, max_target_length, bucket_size) < 1:
    raise ValueError(
      f'max_source_length={max_source_length}, max_target_length={max_target_length} and '
      f'bucket_size={bucket_size} must be positive'
    )
  if not 0 <= seed < 2**32:
    raise ValueError(f'seed={seed} must be in [0, 2**32) to shuffle the training data')


def _example_steps(kept: np.ndarray, global_batch_size: int, seed: int,
                   reshuffle_each_epoch: bool) -> grain.MapDataset:
  """'examples' batching: global step k -> the example indices of its global batch."""
  # Stream position j -> example index, shuffled per epoch and repeated forever.
  order = grain.MapDataset.source(kept)
  order = order.shuffle(seed=seed).repeat(reseed_each_epoch=reshuffle_each_epoch)
  return order.batch(global_batch_size, drop_remainder=True, batch_fn=np.asarray)


def _token_schedule(source_lengths: np.ndarray, target_lengths: np.ndarray,
                    **kwargs) -> batching_lib.TokenSchedule:
  """'tokens' batching: the schedule of padded shapes (batching.token_schedule), logged."""
  schedule = batching_lib.token_schedule(source_lengths, target_lengths, **kwargs)
  logging.info(
    'Token batching: %d padded shapes (rows x source x target) %s; padding %.1f%% of the '
    'real tokens.', len(schedule.shapes), ', '.join('x'.join(map(str, s)) for s in schedule.shapes),
    100 * schedule.padding,
  )
  return schedule


class TrainBatches:
  """Endless iterator over this process's share of each global training batch.

  Args:
    source: the training split (random access, deterministic).
    source_vocab, target_vocab: tokenizers of sources and targets.
    global_batch_size: examples per step summed over all processes ('examples' batching).
    max_source_length, max_target_length: longest kept pair, in tokens incl. EOS.
    bucket_size: lengths are padded to multiples of this, capped at the max ('examples').
    seed: shuffle seed (0 <= seed < 2**32).
    reshuffle_each_epoch: a new permutation every epoch (False: the first one repeats).
    process_index, process_count: which share of each global batch this process builds.
    prefetch: batches prepared ahead by a background thread (0 = synchronous).
    start_step: global step of the first batch (resume without `set_state`).
    batching: 'examples' or 'tokens' (module docstring).
    tokens_per_batch: 'tokens': rows x max(S, T) of a global batch is at most this.
    num_buckets: 'tokens': at most this many padded shapes.
    row_multiple: 'tokens': global rows are a multiple of this (the data-parallel devices).
  """

  def __init__(
    self,
    source: Source,
    source_vocab: Vocab,
    target_vocab: Vocab,
    *,
    global_batch_size: int,
    max_source_length: int,
    max_target_length: int,
    bucket_size: int,
    seed: int,
    reshuffle_each_epoch: bool = True,
    process_index: int = 0,
    process_count: int = 1,
    prefetch: int = 2,
    start_step: int = 0,
    batching: str = 'examples',
    tokens_per_batch: int = 0,
    num_buckets: int = 0,
    row_multiple: int = 1,
  ):
    self.local_batch_size = process_share(global_batch_size, process_index, process_count)
    _check_options(batching, max_source_length, max_target_length, bucket_size, seed)
    self._source = source
    self._source_vocab, self._target_vocab = source_vocab, target_vocab
    self._max_lengths = (max_source_length, max_target_length)
    self._bucket_size, self._global_batch_size = bucket_size, global_batch_size
    self._process_index, self._process_count = process_index, process_count
    self._kept = np.flatnonzero(self._length_filter())
    self.shapes = None  # 'tokens': [(global rows, S, T)] of the padded shapes
    if batching == 'examples':
      self._steps = _example_steps(self._kept, global_batch_size, seed, reshuffle_each_epoch)
    else:
      self.local_batch_size = None  # rows differ from shape to shape
      self._schedule = _token_schedule(
        *self.kept_lengths(), tokens_per_batch=tokens_per_batch, num_buckets=num_buckets,
        row_multiple=batching_lib.device_row_multiple(row_multiple, process_count), seed=seed,
        reshuffle_each_epoch=reshuffle_each_epoch,
      )
      self.shapes = self._schedule.shapes
    # Random access: dataset[k] is this process's share of global batch k.
    self.dataset = grain.MapDataset.range(0, sys.maxsize).map(self._local_batch)
    read = grain.ReadOptions(num_threads=1 if prefetch else 0, prefetch_buffer_size=prefetch)
    self._iterator = self.dataset.to_iter_dataset(read).__iter__()
    if start_step:
      self.set_state({'step': start_step})

  def _length_filter(self) -> np.ndarray:
    """Tokenizes every training example once; which pairs fit the max lengths (bool [n])."""
    max_source_length, max_target_length = self._max_lengths
    # Token counts (EOS included) of every training example, kept or not.
    self.source_lengths, self.target_lengths = token_lengths(
      self._source, self._source_vocab, self._target_vocab
    )
    keep = (self.source_lengths <= max_source_length) & (self.target_lengths <= max_target_length)
    self.num_examples = len(self._source)
    self.num_filtered = int(self.num_examples - keep.sum())
    logging.info(
      'Training data: kept %d of %d pairs; dropped %d longer than max_source_length=%d or '
      'max_target_length=%d tokens (EOS included).',
      self.num_examples - self.num_filtered,
      self.num_examples,
      self.num_filtered,
      max_source_length,
      max_target_length,
    )
    if self.num_filtered == self.num_examples:
      raise ValueError(
        f'all {self.num_examples} training pairs exceed max_source_length={max_source_length} '
        f'or max_target_length={max_target_length}; raise the max lengths'
      )
    return keep

  def kept_lengths(self) -> tuple[np.ndarray, np.ndarray]:
    """Source and target lengths (EOS included) of the pairs the length filter kept."""
    return self.source_lengths[self._kept], self.target_lengths[self._kept]

  @property
  def steps_per_epoch(self) -> float:
    """Global batches per pass over the kept pairs (batches run across epochs)."""
    if self.shapes is None:
      return len(self._kept) / self._global_batch_size
    return self._schedule.batches_per_epoch

  def layout(self, step: int) -> tuple[np.ndarray, int, int]:
    """Global batch `step` without tokenizing: its example indices and padded (S, T)."""
    if self.shapes is None:
      indices = self._steps[step]
      max_src, max_tgt = self._max_lengths
      src_pad = padded_length(self.source_lengths[indices].max(), self._bucket_size, max_src)
      tgt_pad = padded_length(self.target_lengths[indices].max(), self._bucket_size, max_tgt)
      return indices, src_pad, tgt_pad
    bucket, positions = self._schedule[step]
    _, src_pad, tgt_pad = self.shapes[bucket]
    return self._kept[positions], src_pad, tgt_pad

  def _local_batch(self, step: int) -> dict[str, np.ndarray]:
    indices, src_pad, tgt_pad = self.layout(step)
    local = len(indices) // self._process_count
    rows = indices[self._process_index * local : (self._process_index + 1) * local]
    examples = [self._source[int(i)] for i in rows]
    return {
      'source': pad_rows(
        [self._source_vocab.encode(e['source']) for e in examples], len(rows), src_pad
      ),
      'target': pad_rows(
        [self._target_vocab.encode(e['target']) for e in examples], len(rows), tgt_pad
      ),
    }

  def __iter__(self) -> TrainBatches:
    return self

  def __next__(self) -> dict[str, np.ndarray]:
    return next(self._iterator)

  @property
  def step(self) -> int:
    """Global step of the next batch."""
    return self._iterator.get_state()['next_index']

  def get_state(self) -> dict[str, int]:
    """JSON-able position: the global step of the next batch."""
    return {'step': int(self.step)}

  def set_state(self, state: dict[str, int]) -> None:
    step = int(state['step'])
    if step < 0:
      raise ValueError(f'data state step={step} must be non-negative')
    self._iterator.set_state({'next_index': step})

  def close(self) -> None:
    """Stops the prefetch thread."""
    self._iterator.close()


def resolve_processes(process_index: int | None, process_count: int | None) -> tuple[int, int]:
  """(process index, process count) as given, else JAX's (after distributed init)."""
  if process_index is None or process_count is None:
    import jax  # Deferred: only the config-level entry points ask JAX about the processes.

    return jax.process_index(), jax.process_count()
  return process_index, process_count


def train_batches(
  task: Task,
  config: Config,
  *,
  start_step: int = 0,
  process_index: int | None = None,
  process_count: int | None = None,
  num_devices: int | None = None,
) -> TrainBatches:
  """`TrainBatches` over `task`'s train split, set up from `config.data` and `config.seed`.

  `config` is the ConfigDict or its parsed `attnlab.config.run` view (same attribute names). The
  process index and count default to JAX's (multi-host runs after distributed init);
  `num_devices`, the data-parallel devices of all processes that token batches' rows must
  divide over, to `parallel.num_devices` or else every device (as attnlab.train.loop picks them).
  """
  process_index, process_count = resolve_processes(process_index, process_count)
  d = config.data
  if d.batching == 'tokens' and num_devices is None:
    import jax  # Deferred, as in `resolve_processes`.

    num_devices = config.parallel.num_devices or jax.device_count()
  return TrainBatches(
    task.split('train'),
    task.source_vocab,
    task.target_vocab,
    global_batch_size=d.global_batch_size,
    max_source_length=d.max_source_length,
    max_target_length=d.max_target_length,
    bucket_size=d.bucket_size,
    seed=config.seed,
    reshuffle_each_epoch=d.shuffle_buffer_epochs,
    process_index=process_index,
    process_count=process_count,
    prefetch=d.prefetch,
    start_step=start_step,
    batching=d.batching,
    tokens_per_batch=d.tokens_per_batch,
    num_buckets=d.num_buckets,
    row_multiple=num_devices or 1,
  )
