"""Data: deterministic task sources, vocabularies and grain input pipelines.

Where data sits in a run: docs/design.md, Data flow.

task = load_task(config)                       # vocabularies + split sources
train = train_batches(task, config)            # endless, sharded, resumable: get_state()
for batch in eval_batches(task, config, 'eval'):   # this process's share, padded, bucketed
  ...

Names are resolved on first use (PEP 562), so importing a light submodule (`tasks`, read by
config validation; `parallel_text`) does not import grain and JAX with the pipeline.
"""

import importlib

_EXPORTS = {
  'TrainBatches': 'pipeline',
  'eval_batches': 'eval_pipeline',
  'eval_batches_from_source': 'eval_pipeline',
  'train_batches': 'pipeline',
  'SyntheticTask': 'synthetic',
  'BUILDERS': 'tasks',
  'DataError': 'tasks',
  'Task': 'tasks',
  'load_task': 'tasks',
  'Vocab': 'vocab',
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
  if name in _EXPORTS:
    return getattr(importlib.import_module(f'attnlab.data.{_EXPORTS[name]}'), name)
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
