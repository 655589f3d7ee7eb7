"""Dates: every target is the ISO form of the date its source writes; splits; builder; metrics."""

import datetime
import json
import os
import re
import subprocess
import sys
import time
import unicodedata

import pytest

from attnlab.data import dates
from attnlab.data.tasks import Task
from attnlab.data.vocab import Vocab
from configs import base

SPLITS = ('train', 'validation', 'test')
N = 300  # examples per split checked


@pytest.fixture(scope='module')
def examples():
  return {s: [dates.example(s, k) for k in range(N)] for s in SPLITS}


def numbers_in(text: str) -> list[int]:
  """The numbers written in `text`, whatever the script of its digits (via Unicode)."""
  ascii_digits = ''.join(str(unicodedata.decimal(c)) if c.isdecimal() else c for c in text)
  return [int(n) for n in re.findall(r'\d+', ascii_digits)]


def test_targets_are_iso_dates_of_the_formatted_date(examples):
  for split in SPLITS:
    for ex in examples[split]:
      date = datetime.date.fromisoformat(ex['target'])
      assert ex['target'] == f'{date.year:04d}-{date.month:02d}-{date.day:02d}'
      assert dates.FIRST_DAY <= date <= dates.LAST_DAY
      locale, text = ex['source'].split(' ', 1)
      assert locale == ex['locale'] and ex['format'] in dates.FORMATS
      assert text == dates.format_in(date, locale, ex['format'])
      # Independent of Babel: the day and the year (or its last two digits, only inside the
      # pivot window) are numbers of the text; numeric formats also write the month.
      numbers = numbers_in(text)
      assert date.day in numbers
      if date.year in numbers:
        assert not dates.two_digit_year(locale, ex['format'])
      else:
        assert date.year % 100 in numbers and 1950 <= date.year <= 2049
      if ex['format'] in ('yMd', 'yMEd'):
        assert date.month in numbers


def test_split_is_disjoint_by_date_and_deterministic(examples):
  seen = {s: {ex['target'] for ex in examples[s]} for s in SPLITS}
  assert not seen['train'] & seen['validation']
  assert not seen['train'] & seen['test']
  assert not seen['validation'] & seen['test']
  for split in SPLITS:
    assert all(
      dates.split_of(datetime.date.fromisoformat(ex['target'])) == split for ex in examples[split]
    )
  assert dates.example('train', 7) == examples['train'][7]
  # Golden (Babel 2.19 CLDR data): if these change, the dataset's version must change too.
  assert examples['train'][0] == {
    'source': 'bn_BD ২৮/১২/২০২০', 'target': '2020-12-28', 'locale': 'bn_BD', 'format': 'yMd',
  }  # fmt: skip
  assert examples['train'][1]['source'] == 'pl_PL 19 mar 1908'
  assert dates.format_in(datetime.date(1987, 3, 9), 'de_DE', 'full') == 'Montag, 9. März 1987'
  assert dates.format_in(datetime.date(1987, 3, 9), 'en_US', 'short') == '3/9/87'
  assert dates.format_in(datetime.date(1987, 3, 9), 'ar_EG', 'long') == '٩ مارس ١٩٨٧'


def test_many_locales_scripts_and_formats(examples):
  assert len(dates.LOCALES) >= 20
  sample = [ex for split in SPLITS for ex in examples[split]]
  assert {ex['locale'] for ex in sample} == set(dates.LOCALES)
  assert {ex['format'] for ex in sample} == set(dates.FORMATS)
  day = datetime.date(2001, 5, 17)
  scripts = set()
  for locale in dates.LOCALES:
    for ch in dates.format_in(day, locale, 'full'):
      if ch.isalpha():
        scripts.add(unicodedata.name(ch).split()[0])
  assert {
    'LATIN',
    'CYRILLIC',
    'GREEK',
    'ARABIC',
    'HEBREW',
    'DEVANAGARI',
    'BENGALI',
    'THAI',
    'GEORGIAN',
    'ARMENIAN',
    'CJK',
    'HANGUL',
  } <= scripts
  assert dates.two_digit_year('en_US', 'short') and not dates.two_digit_year('en_US', 'yMd')


@pytest.fixture(scope='module')
def task(tmp_path_factory):
  config = base.get_config()
  config.task.name = 'dates'
  config.task.data_dir = str(tmp_path_factory.mktemp('tfds'))
  config.task.num_train_examples = 400
  config.task.num_eval_examples = 60
  return dates.build_task(config)


def test_builder_prepares_the_documented_features(task):
  for split, tfds_split, n in (
    ('train', 'train', 400),
    ('eval', 'validation', 60),
    ('test', 'test', 60),
  ):
    source = task.split(split)
    assert len(source) == n
    for k in (0, n - 1):
      assert source[k] == {**dates.example(tfds_split, k), 'index': k}
  train = task.split('train')
  assert set(task.target_vocab.symbols) == set('0123456789-')
  assert set(task.source_vocab.symbols) == {c for k in range(400) for c in train[k]['source']}


def test_accuracy_by_locale_and_format():
  records = [
    {'source': 'x', 'target': '2001-01-01', 'locale': 'de_DE', 'format': 'short'},
    {'source': 'x', 'target': '2001-01-01', 'locale': 'de_DE', 'format': 'full'},
    {'source': 'x', 'target': '2001-01-01', 'locale': 'ja_JP', 'format': 'short'},
    {'source': 'x', 'target': '2001-01-01', 'locale': 'de_DE', 'format': 'short'},
  ]
  vocab = Vocab.from_symbols('x', 'char')
  fake = Task('dates', vocab, vocab, {'test': lambda: records})
  rows = [{'index': i, 'correct': c} for i, c in enumerate([True, False, True, True])]
  out = dates.accuracy_by(fake, 'test', rows)
  assert out['accuracy_by_locale'] == {'de_DE': pytest.approx(2 / 3), 'ja_JP': 1.0}
  assert out['accuracy_by_format'] == {'full': 0.0, 'short': 1.0}


def test_config_variants_parse():
  from attnlab.config import run as config_lib
  from configs import dates as dates_config

  assert config_lib.parse(dates_config.get_config()).task.name == 'dates'
  assert config_lib.parse(dates_config.get_config('smoke')).train.num_steps <= 4
  with pytest.raises(ValueError, match='choose from'):
    dates_config.get_config('nope')


@pytest.mark.slow
def test_smoke_config_trains_and_reports_per_locale_accuracy(tmp_path):
  from attnlab.train import loop as train
  from configs import dates as dates_config

  c = dates_config.get_config('smoke')
  with c.unlocked():
    c.task.data_dir = str(tmp_path / 'tfds')
    c.eval.num_heatmaps = 0  # an untrained model may emit PAD, which heatmaps.py rejects
  workdir = tmp_path / 'run'
  train.train_and_evaluate(c, str(workdir))
  final = json.loads((workdir / 'final_metrics.json').read_text())
  # Recomputed from the run's predictions: exact match of hypothesis and reference, grouped
  # by the locale and format the generator gives each test index.
  lines = (workdir / 'predictions_test.jsonl').read_text(encoding='utf-8').splitlines()
  predictions = [json.loads(line) for line in lines]
  assert [p['index'] for p in predictions] == list(range(c.eval.max_examples))
  groups = {'locale': {}, 'format': {}}
  for p in predictions:
    ex = dates.example('test', p['index'])
    assert (p['source'], p['reference']) == (ex['source'], ex['target'])
    assert p['correct'] == (p['hypothesis'] == ex['target'])
    for key, by_value in groups.items():
      by_value.setdefault(ex[key], []).append(p['correct'])
  for key, by_value in groups.items():
    expected = {v: sum(hits) / len(hits) for v, hits in by_value.items()}
    assert final['test'][f'accuracy_by_{key}'] == pytest.approx(expected, abs=1e-12)
  assert final['test']['sequence_accuracy'] == pytest.approx(
    sum(p['correct'] for p in predictions) / len(predictions), abs=1e-12)


PREPARE_AT_ONCE = """
import os, sys, time
from attnlab.data import dates
from configs import base
config = base.get_config()
config.task.name = 'dates'
config.task.data_dir = sys.argv[1]
config.task.num_train_examples = 3000
config.task.num_eval_examples = 300
open(os.path.join(sys.argv[1], '..', f'ready{os.getpid()}'), 'w').close()
deadline = time.monotonic() + 300  # the test gives up on the other process before this
while not os.path.exists(os.path.join(sys.argv[1], '..', 'go')):  # both start at once
  if time.monotonic() > deadline:
    sys.exit('never told to go')
  time.sleep(0.005)
print(len(dates.build_task(config).split('train')))
"""


def test_two_processes_preparing_one_dataset_take_turns(tmp_path):
  # A sweep's parallel trials on a fresh machine: both find the dataset unprepared.
  data_dir = tmp_path / 'tfds'
  data_dir.mkdir()
  env = {**os.environ, 'PYTHONPATH': os.getcwd()}
  procs = [
    subprocess.Popen(
      [sys.executable, '-c', PREPARE_AT_ONCE, str(data_dir)],
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    for _ in range(2)
  ]
  try:
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob('ready*'))) < 2:  # both past their imports and waiting
      if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
        ended = [p.communicate()[1][-1000:] for p in procs if p.poll() is not None]
        pytest.fail(f'the two processes were not both ready within 120 s; ended: {ended}')
      time.sleep(0.05)
    (tmp_path / 'go').touch()
    results = [p.communicate(timeout=300) for p in procs]
  finally:
    for p in procs:
      p.kill()
      p.wait()
  for p, (out, err) in zip(procs, results, strict=True):
    assert p.returncode == 0, err[-2000:]
    assert out.split() == ['3000']
  assert sum('preparing dates' in err for _, err in results) == 1
