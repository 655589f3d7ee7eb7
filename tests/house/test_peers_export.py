"""benchmarks/peers/export.py: the files OpenNMT-py and Joey NMT read. The G2P files line up
with attnlab's task records (its own split of hand-made dictionary entries), one letter a token;
the Bible's are SentencePiece pieces that a peer's output detokenizes back to the text."""

import dataclasses

import pytest
from support.peer_tasks import ENGLISH, SPANISH, WORDS, bible_task, g2p_task

from attnlab.data import cmudict_g2p
from benchmarks.peers import __main__ as peers_main
from benchmarks.peers import export


def test_exported_files_are_the_task_records_line_by_line(tmp_path):
  task = g2p_task()
  counts = export.export(task, str(tmp_path))
  assert counts == {
    'train': len(task.data.split('train')),
    'dev': len(task.data.split('eval')),
    'test': len(task.data.split('test')),
  }
  # Train has a line per pronunciation (tomato and read have two), dev and test one per word.
  two = sum(cmudict_g2p.split_of(w) == 'train' for w in ('tomato', 'read'))
  assert min(counts.values()) > 0 and sum(counts.values()) == len(WORDS) + two
  for split, name in export.SPLIT_FILES.items():
    records = task.data.split(split)
    src = export.read_lines(tmp_path / f'{name}.src')
    trg = export.read_lines(tmp_path / f'{name}.trg')
    words = export.read_lines(tmp_path / f'{name}.input')
    refs = [line.split('\t') for line in export.read_lines(tmp_path / f'{name}.refs')]
    assert len(src) == len(trg) == len(words) == len(refs) == len(records)
    for i, record in enumerate(records):
      assert src[i].split(' ') == list(record['source'])  # one letter a token
      assert ''.join(src[i].split()) == words[i] == record['source']
      assert trg[i] == record['target'] and refs[i] == record['references']
  lines = {}
  for name in export.SPLIT_FILES.values():
    for word, src, refs in zip(
      export.read_lines(tmp_path / f'{name}.input'),
      export.read_lines(tmp_path / f'{name}.src'),
      export.read_lines(tmp_path / f'{name}.refs'),
      strict=True,
    ):
      lines.setdefault(word, (src, refs.split('\t')))
  assert lines["o'brien"][0] == "o ' b r i e n"  # the apostrophe is a token of its own
  assert lines['tomato'] == ('t o m a t o', ['T AH M EY T OW', 'T AH M AA T OW'])  # no stress


def test_the_timed_decode_reads_the_test_split_repeated_and_the_start_up_one_source(tmp_path):
  task = dataclasses.replace(g2p_task(), decode_repeats=3)
  task.__dict__['data'] = g2p_task().data
  counts = peers_main._export(task, str(tmp_path), None)
  for kind in (export.SOURCE, export.INPUT, export.REFERENCES):
    test = export.read_lines(export.path(str(tmp_path), 'test', kind))
    assert len(test) == counts['test']
    assert export.read_lines(export.path(str(tmp_path), peers_main.ONE, kind)) == test[:1]
    assert export.read_lines(export.path(str(tmp_path), peers_main.TIMED, kind)) == test * 3


def test_export_limits_each_split(tmp_path):
  task = g2p_task()
  counts = export.export(task, str(tmp_path), {'train': 5, 'eval': 1})
  assert counts == {'train': 5, 'dev': 1, 'test': len(task.data.split('test'))}
  assert len(export.read_lines(tmp_path / 'train.refs')) == 5


def test_bible_files_are_pieces_that_detokenize_to_the_verses(tmp_path):
  task = bible_task()
  assert export.export(task, str(tmp_path)) == {'train': 2, 'dev': 1, 'test': 1}
  src = export.read_lines(tmp_path / 'train.src')
  trg = export.read_lines(tmp_path / 'train.trg')
  assert export.read_lines(tmp_path / 'train.input') == SPANISH[:2]
  assert export.read_lines(tmp_path / 'test.refs') == ENGLISH[3:]
  # A piece a token, as attnlab's vocabularies cut the verse; '▁' marks a word's start.
  assert src[0].split(' ') == task.data.source_vocab.pieces(SPANISH[0])
  assert src[0].startswith('▁') and ' ' not in ''.join(src[0].split(' '))
  # A peer that writes the target pieces back is scored on the text they spell.
  assert task.text(trg, pieces=True) == ENGLISH[:2]
  assert task.text(ENGLISH[:2], pieces=False) == ENGLISH[:2]  # attnlab writes text
  assert task.score(ENGLISH[:2], ENGLISH[:2]) == pytest.approx(100.0)
  assert task.score(['The earth was empty.'], ENGLISH[1:2]) < 50
