"""Multilingual date normalisation (`task.name = 'dates'`): a date as written in a locale -> ISO.

Sources are dates written by the CLDR data that Babel ships, in 26 locales and 12 scripts
(Latin, Cyrillic, Greek, Arabic, Hebrew, Devanagari, Bengali, Thai, Georgian, Armenian, Han
with Kana, Hangul), in 8 formats: CLDR's full / long / medium / short patterns and the locale's
patterns for the skeletons yMd (numeric, 4-digit year), yMEd (numeric with weekday), yMMMd
(abbreviated month) and yMMMEd (abbreviated month and weekday). Locales whose CLDR default
numbering system is not Latin (ar_EG, fa_IR, bn_BD) write their own digits, as ICU does;
Babel's date formatting always writes Latin digits.

  source: '<locale> <text>', e.g. 'de_DE Montag, 9. März 1987' (the locale tag disambiguates
          '3/9/87': March 9 in en_US, 3 September in es_ES)
  target: ISO 'YYYY-MM-DD', e.g. '1987-03-09'

Dates run from 1900-01-01 to 2099-12-31. A format with a two-digit year is only used for dates
in 1950-2049 (the common pivot), so every source names exactly one date. Splits are disjoint
by date: md5 of the ISO date mod 100, < 90 train, < 95 validation, else test. Example k of a
split draws locale, format and date from a generator seeded by (DATA_SEED, split, k), so a
split of N examples is the first N of a fixed stream, on every machine (for a fixed Babel
version: CLDR data change between Babel releases).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import hashlib
from collections import defaultdict
from typing import Any

import babel
import numpy as np
import tensorflow_datasets as tfds
from babel import Locale
from babel.dates import format_date, format_skeleton

from attnlab.data import tfds_tasks
from attnlab.data.tasks import Task, data_dir
from attnlab.data.vocab import Vocab

LOCALES = (
  'en_US', 'en_GB', 'de_DE', 'fr_FR', 'es_ES', 'it_IT', 'pt_BR', 'nl_NL', 'pl_PL', 'tr_TR',
  'hu_HU', 'vi_VN', 'ru_RU', 'uk_UA', 'el_GR', 'ar_EG', 'fa_IR', 'he_IL', 'hi_IN', 'bn_BD',
  'th_TH', 'ka_GE', 'hy_AM', 'zh_CN', 'ja_JP', 'ko_KR',
)  # fmt: skip
CLDR_LENGTHS = ('full', 'long', 'medium', 'short')
SKELETONS = ('yMd', 'yMEd', 'yMMMd', 'yMMMEd')
FORMATS = CLDR_LENGTHS + SKELETONS
FIRST_DAY, LAST_DAY = datetime.date(1900, 1, 1), datetime.date(2099, 12, 31)
PIVOT_YEARS = (1950, 2049)  # the dates a two-digit year may stand for
DATA_SEED = 20240101
SPLIT_IDS = {'train': 0, 'validation': 1, 'test': 2}
SPLIT_PERCENT = (('train', 90), ('validation', 95), ('test', 100))  # cumulative
# First digit of each numbering system used by LOCALES (CLDR default numbering systems).
DIGIT_ZERO = {'latn': '0', 'arab': '\u0660', 'arabext': '\u06f0', 'beng': '\u09e6'}


def split_of(date: datetime.date) -> str:
  percent = int.from_bytes(hashlib.md5(date.isoformat().encode()).digest()[:4], 'big') % 100
  return next(name for name, top in SPLIT_PERCENT if percent < top)


@functools.cache
def _digits(locale: str) -> dict[int, str]:
  system = Locale.parse(locale).default_numbering_system
  if system not in DIGIT_ZERO:
    raise ValueError(
      f'locale {locale!r} uses numbering system {system!r}; supported: '
      f'{", ".join(sorted(DIGIT_ZERO))}'
    )
  zero = ord(DIGIT_ZERO[system])
  return {ord('0') + k: chr(zero + k) for k in range(10)}


def format_in(date: datetime.date, locale: str, fmt: str) -> str:
  """`date` written in `locale` with one of FORMATS, in the locale's own digits."""
  if fmt in CLDR_LENGTHS:
    text = format_date(date, fmt, locale=locale)
  elif fmt in SKELETONS:
    text = format_skeleton(fmt, date, locale=locale)
  else:
    raise ValueError(f'unknown date format {fmt!r}; choose from {", ".join(FORMATS)}')
  return text.translate(_digits(locale))


@functools.cache
def two_digit_year(locale: str, fmt: str) -> bool:
  """Whether the pattern writes the year with two digits (probed with 1987)."""
  probe = datetime.date(1987, 11, 28)
  return '1987'.translate(_digits(locale)) not in format_in(probe, locale, fmt)


@functools.cache
def _date_pools() -> dict[tuple[str, bool], np.ndarray]:
  """(split, two-digit year) -> ordinals of the dates that split may use."""
  pools = {}
  days = range(FIRST_DAY.toordinal(), LAST_DAY.toordinal() + 1)
  by_split = defaultdict(list)
  for day in days:
    by_split[split_of(datetime.date.fromordinal(day))].append(day)
  lo, hi = (
    datetime.date(y, m, d).toordinal()
    for y, m, d in ((PIVOT_YEARS[0], 1, 1), (PIVOT_YEARS[1], 12, 31))
  )
  for split, ordinals in by_split.items():
    ordinals = np.asarray(ordinals, np.int64)
    pools[split, False] = ordinals
    pools[split, True] = ordinals[(ordinals >= lo) & (ordinals <= hi)]
  return pools


def example(split: str, index: int) -> dict[str, str]:
  """Example `index` of a TFDS split: {'source', 'target', 'locale', 'format'}."""
  if split not in SPLIT_IDS:
    raise ValueError(f'unknown split {split!r}; choose from {", ".join(SPLIT_IDS)}')
  rng = np.random.default_rng([DATA_SEED, SPLIT_IDS[split], int(index)])
  locale = LOCALES[int(rng.integers(len(LOCALES)))]
  fmt = FORMATS[int(rng.integers(len(FORMATS)))]
  pool = _date_pools()[split, two_digit_year(locale, fmt)]
  date = datetime.date.fromordinal(int(pool[int(rng.integers(len(pool)))]))
  return {
    'source': f'{locale} {format_in(date, locale, fmt)}',
    'target': date.isoformat(),
    'locale': locale,
    'format': fmt,
  }


@dataclasses.dataclass
class DatesConfig(tfds.core.BuilderConfig):
  num_train: int = 200_000
  num_eval: int = 5_000  # each of validation and test


def builder_config(num_train: int, num_eval: int) -> DatesConfig:
  return DatesConfig(
    name=f'train{num_train}_eval{num_eval}', num_train=num_train, num_eval=num_eval
  )


class Dates(tfds.core.GeneratorBasedBuilder):
  """Dates in 26 CLDR locales -> ISO 8601 (see the module docstring)."""

  VERSION = tfds.core.Version('1.0.0')
  RELEASE_NOTES = {'1.0.0': f'CLDR data of Babel {babel.__version__}.'}
  BUILDER_CONFIGS = [builder_config(200_000, 5_000)]

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
      builder=self,
      description=__doc__,
      features=tfds.features.FeaturesDict(
        {k: tfds.features.Text() for k in ('source', 'target', 'locale', 'format')}
      ),
      disable_shuffling=True,  # example k of a split is the k-th of its stream
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # generated from Babel's CLDR data
    sizes = {
      'train': self.builder_config.num_train,
      'validation': self.builder_config.num_eval,
      'test': self.builder_config.num_eval,
    }
    return {split: self._generate_examples(split, n) for split, n in sizes.items()}

  def _generate_examples(self, split: str, num_examples: int):
    for k in range(num_examples):
      yield k, example(split, k)


def accuracy_by(task: Task, split: str, rows: list[dict]) -> dict:
  """Exact-match accuracy per locale and per format."""
  if not rows:
    return {}
  source = task.split(split)
  out = {}
  for key in ('locale', 'format'):
    groups = defaultdict(list)
    for r in rows:
      groups[source[r['index']][key]].append(float(r['correct']))
    out[f'accuracy_by_{key}'] = {k: float(np.mean(v)) for k, v in sorted(groups.items())}
  return out


def build_task(config: Any) -> Task:
  """Prepares (once) and loads the dates task; sizes from task.num_train/eval_examples."""
  t = config.task
  wanted = builder_config(t.num_train_examples, t.num_eval_examples)
  # TFDS takes a listed config by name, and an instance only for other sizes.
  listed = wanted.name in {c.name for c in Dates.BUILDER_CONFIGS}
  builder = tfds_tasks.prepared(
    lambda: Dates(config=wanted.name if listed else wanted, data_dir=data_dir(config))
  )
  fields = {k: k for k in ('source', 'target', 'locale', 'format')}
  splits, train = tfds_tasks.read_splits_and_train(builder, fields)
  source_vocab = Vocab.build(train.column('source'), 'char')
  target_vocab = Vocab.build(train.column('target'), 'char')
  task = Task(
    'dates',
    source_vocab,
    target_vocab,
    splits,
    decoded_metrics=lambda split, rows: accuracy_by(task, split, rows),
  )
  return task
