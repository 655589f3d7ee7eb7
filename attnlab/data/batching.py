"""Token batching: a few padded shapes fit to the training lengths, ~`tokens_per_batch` each.

As with fairseq's `--max-tokens` and Joey NMT's `batch_type: token`, a batch holds about a fixed
number of tokens (rows x its longer padded side), so batches of short pairs have more rows and
a step costs about the same whatever its lengths. Unlike them, shapes come from a small fixed
set, because XLA compiles each shape once:

  1. `choose_shapes` picks at most `num_buckets` padded shapes (S, T) from the joint histogram
     of (source, target) lengths, minimising the padded tokens (its docstring says how).
  2. `assign_shapes` puts each pair in the shape that pads it least among those it fits.
  3. `rows_per_shape`: tokens_per_batch // max(S, T) rows, a multiple of the row multiple (the
     data-parallel devices and the processes), so every device gets the same rows.
  4. `TokenSchedule` walks an endless stream of the pairs (a fresh permutation per epoch);
     each pair joins its bucket and a bucket that fills up is the next batch, as tf.data's
     `bucket_by_sequence_length` does over a repeated dataset. No batch has an empty row and
     no pair is dropped; buckets run on across epoch boundaries. Batch k is a pure function of
     (lengths, seed, k), computed without replaying the stream: before epoch e a bucket of c
     pairs and r rows has filled floor(e * c / r) batches.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from attnlab.config.fields import ConfigError

BATCHINGS = ('examples', 'tokens')  # data.batching: global_batch_size pairs | token buckets
# Candidate shapes for the greedy step: the most frequent length pairs, at most this many
# (every real task here has fewer; it bounds the O(candidates x pairs) cost of very long data).
MAX_CANDIDATES = 4096
_BLOCK = 256  # candidates scored at once: bounds the [candidates, cells] padding matrix


def _cells(src_len: np.ndarray, tgt_len: np.ndarray):
  """The joint length histogram: distinct (s, t) sorted, and their counts."""
  pairs = np.stack([np.asarray(src_len, np.int64), np.asarray(tgt_len, np.int64)], axis=1)
  cells, counts = np.unique(pairs, axis=0, return_counts=True)
  return cells[:, 0], cells[:, 1], counts.astype(np.float64)


def padding_matrix(shapes: np.ndarray, src_len: np.ndarray, tgt_len: np.ndarray) -> np.ndarray:
  """[K, N] padded tokens (S - s) + (T - t) of pair n in shape k; inf where it does not fit."""
  S, T = shapes[:, :1], shapes[:, 1:]
  fits = (src_len[None, :] <= S) & (tgt_len[None, :] <= T)
  return np.where(fits, (S - src_len[None, :]) + (T - tgt_len[None, :]), np.inf)


def choose_shapes(src_len: np.ndarray, tgt_len: np.ndarray, num_buckets: int) -> np.ndarray:
  """At most `num_buckets` shapes [K, 2] of (S, T), sorted, every pair fitting one of them.

  The padding of pair (s, t) in shape (S, T) is (S - s) + (T - t) tokens; the total over the
  pairs, each in its cheapest fitting shape, is what is minimised (a facility-location
  problem, solved approximately):
    greedy: start from (max s, max t), which fits every pair, then add num_buckets - 1 times
      the candidate, a (s, t) of the histogram, that removes the most padding;
    refine (k-means style): assign each pair to its cheapest fitting shape, shrink each shape
      to the longest s and t among its pairs; neither step adds padding, so this stops.
  Deterministic: ties go to the first candidate in (s, t) order.
  """
  if num_buckets < 1:
    raise ValueError(f'num_buckets={num_buckets} must be positive')
  s_C, t_C, count_C = _cells(src_len, tgt_len)
  if not len(s_C):
    raise ValueError('no pairs to choose padded shapes from')
  top = np.sort(np.argsort(-count_C, kind='stable')[:MAX_CANDIDATES])
  candidates = np.stack([s_C[top], t_C[top]], axis=1)
  chosen = [np.array([s_C.max(), t_C.max()])]
  best_C = padding_matrix(chosen[0][None], s_C, t_C)[0]
  for _ in range(num_buckets - 1):
    gains = np.concatenate([
        np.maximum(best_C[None] - padding_matrix(candidates[i:i + _BLOCK], s_C, t_C), 0.0)
        @ count_C for i in range(0, len(candidates), _BLOCK)])
    pick = int(np.argmax(gains))
    if gains[pick] <= 0:
      break  # every pair already fits a shape exactly
    chosen.append(candidates[pick])
    best_C = np.minimum(best_C, padding_matrix(candidates[pick][None], s_C, t_C)[0])
  shapes = np.unique(np.stack(chosen), axis=0)
  while True:
    owner_C = np.argmin(padding_matrix(shapes, s_C, t_C), axis=0)
    shrunk = np.unique(np.stack([[s_C[owner_C == k].max(), t_C[owner_C == k].max()]
                                 for k in np.unique(owner_C)]), axis=0)
    if np.array_equal(shrunk, shapes):
      return shapes
    shapes = shrunk


def assign_shapes(src_len: np.ndarray, tgt_len: np.ndarray, shapes: np.ndarray) -> np.ndarray:
  """Index of the shape that pads each pair least (first on ties): int64 [N]."""
  src_len, tgt_len = np.asarray(src_len, np.int64), np.asarray(tgt_len, np.int64)
  out = np.empty(len(src_len), np.int64)
  step = max(1, (1 << 22) // max(len(shapes), 1))  # bounds the [K, N] matrix
  for i in range(0, len(src_len), step):
    pad = padding_matrix(shapes, src_len[i:i + step], tgt_len[i:i + step])
    if np.isinf(pad.min(axis=0)).any():
      raise ValueError('a pair is longer than every padded shape')
    out[i:i + step] = np.argmin(pad, axis=0)
  return out


def device_row_multiple(num_devices: int, process_count: int) -> int:
  """Rows of every global batch divide evenly over the devices and over the processes."""
  return math.lcm(int(num_devices), int(process_count))


def rows_per_shape(shapes: np.ndarray, tokens_per_batch: int, row_multiple: int,
                   counts=None) -> list[int]:
  """Rows of each shape: tokens_per_batch // max(S, T), rounded down to a multiple of
  `row_multiple`; at most the shape's pair count (`counts`) rounded down the same way (a rare
  shape gets a smaller batch rather than one pair twice), never below `row_multiple`."""
  rows = []
  for k, (S, T) in enumerate(np.asarray(shapes).tolist()):
    fit = tokens_per_batch // max(S, T) // row_multiple * row_multiple
    if fit < row_multiple:
      raise ConfigError(
          f'data.tokens_per_batch={tokens_per_batch} cannot hold {row_multiple} rows (the '
          f'multiple that the devices and processes need) of the padded shape {S}x{T}; raise '
          f'it to at least {row_multiple * max(S, T)}')
    if counts is not None:
      fit = min(fit, max(row_multiple, int(counts[k]) // row_multiple * row_multiple))
    rows.append(int(fit))
  return rows


def token_schedule(src_len: np.ndarray, tgt_len: np.ndarray, *, tokens_per_batch: int,
                   num_buckets: int, row_multiple: int, seed: int,
                   reshuffle_each_epoch: bool = True) -> TokenSchedule:
  """Steps 1-4 of the module docstring over the kept pairs' lengths."""
  if min(tokens_per_batch, num_buckets, row_multiple) < 1:
    raise ConfigError(f'data.tokens_per_batch={tokens_per_batch} and data.num_buckets='
                      f'{num_buckets} must be positive with data.batching=tokens')
  shapes = choose_shapes(src_len, tgt_len, num_buckets)
  bucket = assign_shapes(src_len, tgt_len, shapes)
  counts = np.bincount(bucket, minlength=len(shapes))
  rows = rows_per_shape(shapes, tokens_per_batch, row_multiple, counts)
  schedule = TokenSchedule(bucket, rows, seed, reshuffle_each_epoch)
  schedule.shapes = [(r, S, T) for r, (S, T) in zip(rows, shapes.tolist(), strict=True)]
  real = float(np.sum(src_len) + np.sum(tgt_len))
  schedule.padding = float(np.sum(counts * shapes.sum(axis=1))) / real - 1
  return schedule


class TokenSchedule:
  """Batch k of the endless bucketed stream: (bucket, positions into the pairs).

  Args:
    bucket: bucket of each pair, int [P] in [0, K); every bucket needs at least one pair.
    rows: rows per batch of each bucket (K positive ints).
    seed: permutation seed; epoch e's stream is permutation (seed, e) of the P pairs.
    reshuffle_each_epoch: False: epoch 0's permutation repeats.
  """

  def __init__(self, bucket: np.ndarray, rows: list[int], seed: int,
               reshuffle_each_epoch: bool = True):
    self._bucket = np.asarray(bucket, np.int64)
    self.rows = [int(r) for r in rows]
    self.counts = np.bincount(self._bucket, minlength=len(rows)).tolist()
    if len(self.counts) != len(rows) or min(self.counts) < 1 or min(self.rows) < 1:
      raise ValueError(f'buckets need pairs and rows: counts {self.counts}, rows {self.rows}')
    self._seed, self._reshuffle = int(seed), bool(reshuffle_each_epoch)
    self.batches_per_epoch = sum(c / r for c, r in zip(self.counts, self.rows, strict=True))
    self._epoch_plan = functools.lru_cache(maxsize=4)(self._plan)
    self.shapes: list[tuple[int, int, int]] = []  # (rows, S, T) per bucket: `token_schedule`
    self.padding = math.nan  # padded / real tokens over one epoch: `token_schedule`

  def batches_before(self, epoch: int) -> int:
    """Batches completed by the stream before epoch `epoch` starts."""
    return sum(epoch * c // r for c, r in zip(self.counts, self.rows, strict=True))

  def epoch_of(self, k: int) -> int:
    """The epoch in which batch k fills up."""
    epoch = int(k // self.batches_per_epoch)
    while self.batches_before(epoch + 1) <= k:
      epoch += 1
    while epoch > 0 and self.batches_before(epoch) > k:
      epoch -= 1
    return epoch

  def _plan(self, epoch: int):
    """Epoch `epoch`: each bucket's pairs in stream order, and the batches that fill up in it
    (their bucket and their number within the bucket), in stream order."""
    rng = np.random.default_rng([self._seed, epoch if self._reshuffle else 0])
    perm = rng.permutation(len(self._bucket))
    bucket_in_order = self._bucket[perm]
    members, where, which, number = [], [], [], []
    for b, (c, r) in enumerate(zip(self.counts, self.rows, strict=True)):
      pos = np.flatnonzero(bucket_in_order == b)
      members.append(perm[pos])
      carry = epoch * c % r  # pairs of this bucket waiting from earlier epochs
      fills = np.arange(r - carry, c + 1, r)  # 1-based member numbers completing a batch
      where.append(pos[fills - 1])
      which.append(np.full(len(fills), b))
      number.append(epoch * c // r + np.arange(len(fills)))
    order = np.argsort(np.concatenate(where), kind='stable')
    return members, np.concatenate(which)[order], np.concatenate(number)[order]

  def __getitem__(self, k: int) -> tuple[int, np.ndarray]:
    if k < 0:
      raise IndexError(f'batch {k} must be non-negative')
    epoch = self.epoch_of(k)
    _, which, number = self._epoch_plan(epoch)
    j = k - self.batches_before(epoch)
    b, n = int(which[j]), int(number[j])
    c, r = self.counts[b], self.rows[b]
    stream_epoch, index = np.divmod(np.arange(n * r, (n + 1) * r), c)  # bucket b's stream
    positions = np.empty(r, np.int64)
    for e in np.unique(stream_epoch).tolist():
      at = stream_epoch == e
      positions[at] = self._epoch_plan(e)[0][b][index[at]]
    return b, positions
