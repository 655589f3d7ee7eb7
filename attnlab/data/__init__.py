"""Data: deterministic task sources, vocabularies and grain input pipelines (DESIGN.md section 3).

task = load_task(config)                       # vocabularies + split sources
train = train_batches(config, task)            # endless, sharded, resumable: get_state()
for batch in eval_batches(task.split('eval'), task.source_vocab, task.target_vocab,
                          config.data.global_batch_size, bucket_size=config.data.bucket_size):
  ...
"""

from attnlab.data.pipeline import (
  TrainBatches,
  eval_batches,
  eval_batches_from_source,
  train_batches,
)
from attnlab.data.synthetic import SyntheticTask
from attnlab.data.tasks import BUILDERS, Task, load_task
from attnlab.data.vocab import Vocab

__all__ = [
  'BUILDERS',
  'SyntheticTask',
  'Task',
  'TrainBatches',
  'Vocab',
  'eval_batches',
  'eval_batches_from_source',
  'load_task',
  'train_batches',
]
