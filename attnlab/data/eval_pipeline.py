"""Evaluation batches: a split walked in order of length in fixed-size batches, never dropping
an example (the training pipeline: attnlab/data/pipeline.py).

Lengths are padded to the batch's real longest pair rounded up to the bucket, with no cap,
because eval lengths may exceed train lengths in length-generalisation tests. Rows carry their
example's index; results are put back in index order by whoever reads them.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from attnlab.data.pipeline import (
  Config,
  pad_rows,
  padded_length,
  process_share,
  resolve_processes,
)
from attnlab.data.tasks import Source, Task
from attnlab.data.vocab import Vocab


def eval_batches(
  task: Task,
  config: Config,
  split: str,
  *,
  process_index: int | None = None,
  process_count: int | None = None,
) -> Iterator[dict[str, np.ndarray]]:
  """`eval_batches_from_source` over `task.split(split)`: this process's share of global
  batches of `config.data.global_batch_size`, padded to `config.data.bucket_size` multiples,
  the first `config.eval.max_examples` examples (0 = all). The process index and count
  default to JAX's.
  """
  process_index, process_count = resolve_processes(process_index, process_count)
  return eval_batches_from_source(
    task.split(split),
    task.source_vocab,
    task.target_vocab,
    config.data.global_batch_size,
    bucket_size=config.data.bucket_size,
    process_index=process_index,
    process_count=process_count,
    max_examples=config.eval.max_examples,
  )


def eval_batches_from_source(
  source: Source,
  source_vocab: Vocab,
  target_vocab: Vocab,
  batch_size: int,
  *,
  bucket_size: int,
  process_index: int = 0,
  process_count: int = 1,
  max_examples: int = 0,
) -> Iterator[dict[str, np.ndarray]]:
  """Fixed-size batches over the split (the first `max_examples` if > 0) in order of length:
  source, then target, then index.

  A batch's padded shape and its search loop (which runs until its last row has ended) follow
  its longest row, so batches of similar lengths decode faster than batches in index order:
  on the Bible eval split (1,745 verses of 2-108 pieces) beam search ran 2x faster. The order
  is a function of the data alone, the same on every process. `batch_size` is global: process p
  gets rows [p*b, (p+1)*b) of each global batch. Every example appears exactly once over all
  processes; the last global batch is filled with
  empty rows (all PAD_ID, 'weight' 0, 'index' -1). Each batch holds 'source' [b, S] and
  'target' [b, T] int32, 'weight' [b] float32 and 'index' [b] int32. S and T are the global
  batch's longest pair rounded up to `bucket_size`, never capped: long eval examples are kept.
  """
  local = process_share(batch_size, process_index, process_count)
  if bucket_size < 1:
    raise ValueError(f'bucket_size={bucket_size} must be positive')
  n = len(source) if max_examples <= 0 else min(max_examples, len(source))

  def generate():
    encoded = []
    for i in range(n):
      example = source[i]
      encoded.append(
        (source_vocab.encode(example['source']), target_vocab.encode(example['target']))
      )
    order = sorted(range(n), key=lambda i: (len(encoded[i][0]), len(encoded[i][1]), i))
    for start in range(0, n, batch_size):
      members = order[start : start + batch_size]
      src_pad = padded_length(max(len(encoded[i][0]) for i in members), bucket_size)
      tgt_pad = padded_length(max(len(encoded[i][1]) for i in members), bucket_size)
      rows = members[process_index * local : (process_index + 1) * local]
      index = np.full(local, -1, np.int32)
      index[: len(rows)] = rows
      yield {
        'source': pad_rows([encoded[i][0] for i in rows], local, src_pad),
        'target': pad_rows([encoded[i][1] for i in rows], local, tgt_pad),
        'weight': (index >= 0).astype(np.float32),
        'index': index,
      }

  return generate()
