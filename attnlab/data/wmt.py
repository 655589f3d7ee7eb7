"""WMT'14 translation (`task.name = 'wmt14_translate'`): TFDS's `wmt14_translate/<xx>-en`.

`task.source_language` -> `task.target_language`, either direction of a TFDS pair (de-en,
fr-en, ...). Needs internet for TFDS to download and prepare it (as array_record) and an
accelerator to train; tests use `tfds.testing.mock_data`. SentencePiece models (one per side,
byte fallback, `task.text_vocab_size` pieces) are trained on an evenly spaced sample of at most
1M training sentences and cached in `<data_dir>/attnlab_sentencepiece/` (translation.py).
newstest2013 is the eval split, newstest2014 the test split.
"""

from __future__ import annotations

from typing import Any

import tensorflow_datasets as tfds
from absl import logging

from attnlab.data import sentencepiece_vocab, tfds_tasks, translation
from attnlab.data.tasks import DataError, Task, data_dir


def pairs() -> tuple[str, ...]:
  """TFDS's WMT'14 pairs, e.g. ('cs-en', 'de-en', ...)."""
  from tensorflow_datasets.translate import wmt14  # Registers wmt14_translate with TFDS.

  return tuple(c.name for c in wmt14.Wmt14Translate.BUILDER_CONFIGS)


def build_task(config: Any) -> Task:
  """`wmt14_translate/<xx>-en` from `task.source_language` -> `task.target_language`."""
  t = config.task
  available = pairs()
  languages = sorted({lang for p in available for lang in p.split('-')})
  for key in ('source_language', 'target_language'):
    if getattr(t, key) not in languages:
      raise DataError(
        f'task.{key}={getattr(t, key)!r} is not in WMT14; choose from {", ".join(languages)}'
      )
  src, tgt = t.source_language, t.target_language
  pair = f'{src}-{tgt}' if tgt == 'en' else f'{tgt}-{src}'
  if pair not in available:
    raise DataError(
      f'WMT14 has no pair {src}->{tgt}; choose a direction of {", ".join(sorted(available))}'
    )
  root = data_dir(config)
  builder = tfds_tasks.prepared(lambda: tfds.builder(f'wmt14_translate/{pair}', data_dir=root))
  splits, train = tfds_tasks.read_splits_and_train(builder, {src: 'source', tgt: 'target'})
  cache = sentencepiece_vocab.cache_dir(root)
  source_vocab, target_vocab = (
    translation.make_vocab(train.column(side), 'sentencepiece', t.text_vocab_size, cache)
    for side in ('source', 'target')
  )
  logging.info(
    '%s: %d train pairs; vocab %d -> %d', pair, len(train), source_vocab.size, target_vocab.size
  )
  return translation.translation_task(
    f'wmt14_translate/{src}-{tgt}', source_vocab, target_vocab, splits
  )
