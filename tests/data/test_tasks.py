"""Synthetic sources, vocabularies and the task registry."""

import collections
import importlib
import os
import string

import numpy as np
import pytest

from attnlab.config import run as config_lib
from attnlab.data import DataError, SyntheticTask, Vocab, load_task, synthetic, tasks
from attnlab.data.synthetic import TASKS
from attnlab.tokens import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from configs.base import get_config


def make(name='copy', vocab_size=20, lengths=(3, 9), num_examples=50, seed=0, split='train'):
  return SyntheticTask(name, vocab_size, lengths, num_examples, seed, split)


def schoolbook_sum(a: str, b: str) -> str:
  """Column addition with carries, independent of Python's int parsing."""
  a, b = a[::-1], b[::-1]
  out, carry = [], 0
  for i in range(max(len(a), len(b))):
    d = carry + (ord(a[i]) - 48 if i < len(a) else 0) + (ord(b[i]) - 48 if i < len(b) else 0)
    out.append(chr(48 + d % 10))
    carry = d // 10
  if carry:
    out.append(chr(48 + carry))
  return ''.join(out[::-1])


@pytest.mark.parametrize('name', sorted(TASKS))
def test_examples_are_pure_functions_of_seed_split_index(name):
  a, b = make(name), make(name)
  forward = [a[i] for i in range(len(a))]
  backward = [b[i] for i in reversed(range(len(b)))][::-1]
  assert forward == backward
  assert [e['index'] for e in forward] == list(range(50))
  other_seed = [make(name, seed=1)[i] for i in range(50)]
  assert forward != other_seed


@pytest.mark.parametrize('name', sorted(TASKS))
def test_splits_hold_different_examples(name):
  splits = {
    s: [make(name, split=s)[i]['source'] for i in range(50)] for s in ('train', 'eval', 'test')
  }
  assert splits['train'] != splits['eval']
  assert splits['eval'] != splits['test']
  assert splits['train'] != splits['test']


@pytest.mark.parametrize('name', ['copy', 'reverse', 'sort'])
def test_letter_tasks_respect_lengths_and_alphabet(name):
  task = make(name, vocab_size=5, lengths=(4, 6), num_examples=200)
  sources = [task[i]['source'] for i in range(len(task))]
  assert {len(s) for s in sources} == {4, 5, 6}
  assert set(''.join(sources)) == set('abcde')


def test_targets_of_each_task():
  for i in range(40):
    source = make('copy')[i]['source']
    assert make('copy')[i]['target'] == source
    source = make('reverse')[i]['source']
    assert make('reverse')[i]['target'] == ''.join(
      source[j] for j in range(len(source) - 1, -1, -1)
    )
    source = make('sort')[i]['source']
    # Lowercase-only alphabet: alphabet order equals Python's string order.
    assert make('sort')[i]['target'] == ''.join(sorted(source))


def test_sort_orders_lowercase_before_uppercase():
  task = make('sort', vocab_size=52, lengths=(10, 20))
  rank = {c: r for r, c in enumerate(string.ascii_lowercase + string.ascii_uppercase)}
  for i in range(20):
    ex = task[i]
    ranks = [rank[c] for c in ex['target']]
    assert ranks == sorted(ranks)
    assert collections.Counter(ex['target']) == collections.Counter(ex['source'])


def test_addition_sums_and_digit_counts():
  task = make('addition', lengths=(1, 4), num_examples=300)
  counts = set()
  for i in range(len(task)):
    ex = task[i]
    a, b = ex['source'].split('+')
    for operand in (a, b):
      assert operand.isdigit() and 1 <= len(operand) <= 4
      assert len(operand) == 1 or operand[0] != '0'
      counts.add(len(operand))
    assert ex['target'] == schoolbook_sum(a, b)
  assert counts == {1, 2, 3, 4}


def test_addition_golden():
  assert schoolbook_sum('123', '45') == '168'
  assert schoolbook_sum('999', '1') == '1000'
  # Long operands: no int64 overflow in generation or sums.
  ex = make('addition', lengths=(30, 30))[0]
  a, b = ex['source'].split('+')
  assert len(a) == len(b) == 30 and ex['target'] == schoolbook_sum(a, b)


@pytest.mark.parametrize('name', ['copy', 'reverse', 'sort'])
def test_alignment_points_at_the_copied_source_symbol(name):
  task = make(name, vocab_size=4, lengths=(5, 12))  # small alphabet: many ties for sort
  for i in range(30):
    ex = task[i]
    align = task.alignment(ex)
    source, target = ex['source'], ex['target']
    assert sorted(align) == list(range(len(source)))  # a permutation
    assert [source[j] for j in align] == list(target)
    if name == 'copy':
      assert align == list(range(len(source)))
    if name == 'reverse':
      assert align == [len(source) - 1 - t for t in range(len(target))]
    if name == 'sort':  # stable: equal symbols keep their source order
      for t in range(1, len(target)):
        if target[t] == target[t - 1]:
          assert align[t] > align[t - 1]


def test_addition_has_no_alignment():
  task = make('addition')
  assert task.alignment(task[0]) is None


def test_bad_arguments_name_the_problem():
  with pytest.raises(ValueError, match='addition, copy, reverse, sort'):
    make('revers')
  with pytest.raises(ValueError, match='52'):
    make(vocab_size=53)
  with pytest.raises(ValueError, match='train, eval, test'):
    make(split='valid')
  with pytest.raises(ValueError, match='min'):
    make(lengths=(5, 3))
  with pytest.raises(IndexError):
    make(num_examples=3)[3]


def test_vocab_ids_and_char_round_trip():
  vocab = Vocab.from_symbols('abc')
  assert vocab.size == 7
  assert vocab.encode('') == [EOS_ID]
  ids = vocab.encode('cab')
  assert ids == [6, 4, 5, EOS_ID]
  assert vocab.decode(ids) == 'cab'
  assert vocab.encode('axb') == [4, UNK_ID, 5, EOS_ID]
  assert vocab.decode([BOS_ID, 4, UNK_ID, 5, EOS_ID, 6, PAD_ID]) == 'a<unk>b'
  assert vocab.decode([4, PAD_ID, 5]) == 'ab'  # no EOS: read to the end, skipping PAD
  assert vocab.tokens([BOS_ID, 4, 6, EOS_ID, PAD_ID, PAD_ID]) == ['<bos>', 'a', 'c', '<eos>']
  assert vocab.tokens([4, 5, PAD_ID]) == ['a', 'b']
  with pytest.raises(ValueError, match='outside'):
    vocab.decode([7])
  # A search's rows arrive as NumPy ints; what follows EOS (or PAD, for labels) is not read.
  row = np.array([6, 4, EOS_ID, 99, -1], np.int32)
  assert vocab.decode(row) == 'ca' and vocab.tokens(row) == ['c', 'a', '<eos>']
  assert vocab.tokens([4, PAD_ID, 99]) == ['a']
  for bad in ([4, -1, EOS_ID], [4, 7]):
    with pytest.raises(ValueError, match=f'id {bad[1]} is outside this vocabulary'):
      vocab.tokens(bad)


def test_vocab_word_mode():
  vocab = Vocab.from_symbols(['HH', 'AH', 'L', 'OW'], mode='word')
  ids = vocab.encode('HH  AH L OW ')
  assert ids == [4, 5, 6, 7, EOS_ID]
  assert vocab.decode(ids) == 'HH AH L OW'
  assert vocab.encode('HH XX') == [4, UNK_ID, EOS_ID]
  assert vocab.tokens(ids) == ['HH', 'AH', 'L', 'OW', '<eos>']


def test_vocab_build_orders_by_count_and_drops_rare():
  vocab = Vocab.build(['b a b', 'c b a', 'd'], mode='word', min_count=2)
  assert vocab.symbols == ('b', 'a')
  vocab = Vocab.build(['ba', 'ab', 'c'], mode='char')
  assert vocab.symbols == ('a', 'b', 'c')  # tie broken alphabetically


def test_vocab_save_load(tmp_path):
  vocab = Vocab.from_symbols(['ʃ', 'a', 'Q'], mode='word')
  path = tmp_path / 'vocab.json'
  vocab.save(path)
  loaded = Vocab.load(path)
  assert loaded == vocab and loaded.mode == 'word'
  assert loaded.encode('Q ʃ a') == vocab.encode('Q ʃ a')


def test_vocab_rejects_bad_symbols():
  with pytest.raises(ValueError, match='char, word'):
    Vocab.from_symbols('ab', mode='bpe')
  with pytest.raises(ValueError, match='duplicate'):
    Vocab.from_symbols('aba')
  with pytest.raises(ValueError, match='special'):
    Vocab.from_symbols(['<eos>'], mode='word')
  with pytest.raises(ValueError, match='single-character'):
    Vocab.from_symbols(['ab'])


@pytest.mark.parametrize('name', sorted(TASKS))
def test_load_task_builds_vocab_and_splits(name):
  config = get_config()
  config.task.name = name
  config.task.vocab_size = 7
  config.task.train_lengths = (2, 4)
  config.task.eval_lengths = (6, 8)
  config.task.num_train_examples = 30
  config.task.num_eval_examples = 10
  task = load_task(config)
  assert task.name == name and task.source_vocab == task.target_vocab
  expected = '0123456789+' if name == 'addition' else 'abcdefg'
  assert ''.join(task.source_vocab.symbols) == expected
  assert [len(task.split(s)) for s in ('train', 'eval', 'test')] == [30, 10, 10]
  for split, (lo, hi) in (('train', (2, 4)), ('eval', (6, 8))):
    source = task.split(split)
    for i in range(len(source)):
      ex = source[i]
      ids = task.source_vocab.encode(ex['source']) + task.target_vocab.encode(ex['target'])
      assert UNK_ID not in ids
      if name != 'addition':
        assert lo <= len(ex['source']) <= hi
  ex = task.split('eval')[0]
  assert task.alignment(ex) == task.split('eval').alignment(ex)
  assert task.split('train') is task.split('train')


def test_load_task_errors_list_choices():
  config = get_config()
  config.task.name = 'copyy'
  with pytest.raises(
      DataError,
      match='addition, bible, cmudict_g2p, copy, dates, parallel_text, reverse, sort, wmt14'
  ):
    load_task(config)
  config.task.name = 'copy'
  with pytest.raises(ValueError, match='train, eval, test'):
    load_task(config).split('dev')


def test_config_validation_reads_the_task_registry(monkeypatch):
  """task.name is checked against tasks.BUILDERS before anything is built or compiled."""
  config = get_config()
  config.task.name = 'copyy'
  with pytest.raises(config_lib.ConfigError, match=r"task.name='copyy' is not valid; choose "
                     'from addition, bible, cmudict_g2p, copy, dates, parallel_text, reverse'):
    config_lib.parse(config)
  monkeypatch.setitem(tasks.BUILDERS, 'copyy', tasks.BUILDERS['copy'])
  assert config_lib.parse(config).task.name == 'copyy'  # one registry: adding a task is enough
  assert set(tasks.REAL_TASKS) <= set(tasks.BUILDERS)
  assert set(synthetic.TASKS) <= set(tasks.BUILDERS)


@pytest.mark.parametrize('name', sorted(tasks.REAL_TASKS))
def test_every_real_task_module_has_a_builder(name):
  module = importlib.import_module(f'attnlab.data.{tasks.REAL_TASKS[name]}')
  assert callable(module.build_task)


def test_default_data_dir_is_tfds_default(monkeypatch):
  import tensorflow_datasets as tfds

  monkeypatch.delenv('TFDS_DATA_DIR', raising=False)
  config = get_config()
  assert tasks.data_dir(config) == os.path.expanduser(tfds.core.constants.DATA_DIR)
  monkeypatch.setenv('TFDS_DATA_DIR', '/elsewhere')
  assert tasks.data_dir(config) == '/elsewhere'
  config.task.data_dir = '~/mine'
  assert tasks.data_dir(config) == os.path.expanduser('~/mine')
