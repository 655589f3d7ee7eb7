"""Parallel text: file formats, bad input, tokenizers (SentencePiece included), BLEU/chrF."""

import math
import os
import subprocess
import sys

import pytest
import sacrebleu

from attnlab import bleu_scores, errors
from attnlab.config import run as config_lib
from attnlab.data import load_task, parallel_text, translation
from attnlab.data.sentencepiece_vocab import (
  SentencePieceVocab,
  load_vocab,
  train_sentencepiece,
)
from attnlab.data.tasks import DataError
from attnlab.data.vocab import Vocab
from attnlab.tokens import BOS_ID, EOS_ID, NUM_SPECIAL_TOKENS, PAD_ID, UNK_ID
from configs import parallel_text as parallel_text_config

PAIRS = [
  ('das haus ist klein', 'the house is small'),
  ('das haus ist gross', 'the house is big'),
  ('die katze schläft', 'the cat sleeps'),
  ('der hund bellt laut', 'the dog barks loudly'),
  ('die katze ist klein', 'the cat is small'),
  ('der baum ist gross', 'the tree is big'),
]


def write(path, text: str | bytes) -> str:
  mode = 'wb' if isinstance(text, bytes) else 'w'
  with open(path, mode, **({} if mode == 'wb' else {'encoding': 'utf-8'})) as f:
    f.write(text)
  return str(path)


def tsv(path, pairs) -> str:
  return write(path, ''.join(f'{s}\t{t}\n' for s, t in pairs))


def aligned(tmp_path, name, pairs) -> tuple[str, str]:
  return (
    write(tmp_path / f'{name}.de', ''.join(f'{s}\n' for s, _ in pairs)),
    write(tmp_path / f'{name}.en', ''.join(f'{t}\n' for _, t in pairs)),
  )


def test_tsv_and_aligned_files_give_the_same_pairs(tmp_path):
  a = parallel_text.ParallelText((tsv(tmp_path / 'x.tsv', PAIRS),), max_chars=100)
  b = parallel_text.ParallelText(aligned(tmp_path, 'x', PAIRS), max_chars=100)
  assert len(a) == len(b) == len(PAIRS)
  for i, (s, t) in enumerate(PAIRS):
    assert a[i] == b[i] == {'source': s, 'target': t, 'index': i, 'line': i + 1}


def test_empty_and_too_long_pairs_are_dropped_and_counted(tmp_path):
  lines = ['a b\tc d', '', '  \tx', 'y\t ', 'x' * 11 + '\tshort', 'ok\t' + 'y' * 10, 'e\tf\r']
  path = write(tmp_path / 'x.tsv', '\n'.join(lines) + '\n')
  split = parallel_text.ParallelText((path,), max_chars=10)
  assert split.dropped == {'empty': 3, 'too_long': 1}
  kept = [(split[i]['source'], split[i]['target'], split[i]['line']) for i in range(len(split))]
  assert kept == [('a b', 'c d', 1), ('ok', 'y' * 10, 6), ('e', 'f', 7)]


def test_bad_input_is_a_user_error_naming_file_and_line(tmp_path):
  """Each mistake a user can fix is a DataError (a UserError: the CLI prints one line)."""
  assert issubclass(DataError, errors.UserError)
  missing = str(tmp_path / 'nope.tsv')
  with pytest.raises(DataError, match='task.train_files: file .*nope.tsv'):
    parallel_text.ParallelText((missing,), max_chars=10, key='task.train_files')
  bad = write(tmp_path / 'bad.de', 'gut\nnicht \xff gut\n'.encode('latin-1'))
  with pytest.raises(DataError, match=r'bad.de:2: .*not valid UTF-8'):
    parallel_text.ParallelText((bad, write(tmp_path / 'ok.en', 'good\nnot good\n')), max_chars=99)
  src, tgt = write(tmp_path / 'a.de', 'a\nb\nc\n'), write(tmp_path / 'a.en', 'a\nb\n')
  with pytest.raises(DataError, match=r'a.de has 3 lines but .*a.en has 2; .*a.de:3 is the first'):
    parallel_text.ParallelText((src, tgt), max_chars=99)
  tabs = write(tmp_path / 't.tsv', 'a\tb\nc\td\te\n')
  with pytest.raises(DataError, match=r't.tsv:2: expected source<TAB>target, found 2 tabs'):
    parallel_text.ParallelText((tabs,), max_chars=99)
  with pytest.raises(DataError, match=r'missing.tsv'):
    parallel_text.read_pairs((str(tmp_path / 'missing.tsv'),), 'task.eval_files')


def test_word_and_char_vocabularies_come_from_training_text():
  texts = ['b a a', 'c a b']
  word = translation.make_vocab(texts, 'word', 2)
  assert word.symbols == ('a', 'b')  # the 2 most frequent; 'c' becomes UNK
  assert word.encode('a c') == [word.symbols.index('a') + NUM_SPECIAL_TOKENS, UNK_ID, EOS_ID]
  char = translation.make_vocab(texts, 'char', 100)
  assert set(char.symbols) == set('abc ')
  with pytest.raises(ValueError, match='choose from char, word, sentencepiece'):
    translation.make_vocab(texts, 'bpe', 10)


def corpus(n=300):
  words = ['haus', 'katze', 'hund', 'baum', 'klein', 'gross', 'ist', 'der', 'die', 'schläft']
  return [' '.join(words[(i * 7 + j * 3) % len(words)] for j in range(3 + i % 5)) for i in range(n)]


def test_sentencepiece_is_deterministic_round_trips_and_saves(tmp_path):
  texts = corpus()
  vocab = train_sentencepiece(texts, 300)
  assert vocab == train_sentencepiece(texts, 300)  # same input -> the same model
  assert vocab.size <= 300
  assert vocab.tokens([BOS_ID, PAD_ID])[0] == '<bos>'
  for text in texts[:20]:
    ids = vocab.encode(text)
    assert ids[-1] == EOS_ID and UNK_ID not in ids and PAD_ID not in ids
    assert vocab.decode(ids + [PAD_ID, 17]) == text  # stops at EOS, detokenizes
  labels = vocab.tokens(vocab.encode(texts[0]) + [PAD_ID])
  assert labels[-1] == '<eos>' and ''.join(labels[:-1]).replace('\u2581', ' ').strip() == texts[0]
  vocab.save(tmp_path / 'v.json')
  assert load_vocab(tmp_path / 'v.json') == vocab
  Vocab.from_symbols('ab').save(tmp_path / 'c.json')
  assert load_vocab(tmp_path / 'c.json') == Vocab.from_symbols('ab')
  cached = train_sentencepiece(texts, 300, cache_dir=tmp_path / 'cache')
  (model,) = os.listdir(tmp_path / 'cache')
  assert cached == vocab and model.endswith('.model')
  assert train_sentencepiece(texts, 300, cache_dir=tmp_path / 'cache') == vocab


@pytest.mark.parametrize('unseen', ['%(name)s', 'ü → 日本', 'Ωmega!'])
def test_sentencepiece_byte_fallback_round_trips_unseen_characters(unseen):
  """Characters never seen in training become byte pieces, never the unknown piece, and decode
  back exactly (real UI strings with '%(' came back as '⁇' without byte fallback)."""
  vocab = train_sentencepiece(corpus(), 300)
  assert not set('%()ü→日本Ω!') & set(''.join(corpus()))
  text = f'das haus {unseen} ist klein'
  ids = vocab.encode(text)
  assert UNK_ID not in ids
  assert vocab.decode(ids) == text
  assert '<0x25>' in vocab.tokens(vocab.encode('%'))  # '%' is byte 0x25
  # Only NFKC compatibility characters change (SentencePiece's nmt_nfkc normalisation).
  assert vocab.decode(vocab.encode('ﬁne ⁇')) == 'fine ??'


def test_sentencepiece_too_small_for_byte_fallback_names_the_key():
  with pytest.raises(DataError, match=r'vocab_size=64 must exceed the 256 byte pieces.*'
                     'task.text_vocab_size'):
    train_sentencepiece(corpus(), 64)
  with pytest.raises(DataError, match=r'smaller than the 2\d\d pieces it needs.*text_vocab_size'):
    train_sentencepiece(corpus(), 265)


def test_plain_text_corpora_and_the_task_registry_do_not_import_tfds_or_jax():
  """A fresh process: plain text and the registry (read by config validation) stay light."""
  code = ('import sys, attnlab.data.parallel_text, attnlab.data.tasks; '
          'print(sorted(m for m in ("tensorflow_datasets", "jax", "grain") if m in sys.modules))')
  out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True)
  assert out.stdout.strip() == '[]'


def make_config(tmp_path, tokenizer='word', **files):
  c = parallel_text_config.get_config('smoke')
  with c.unlocked():
    c.task.tokenizer = tokenizer
    c.task.data_dir = str(tmp_path / 'data')
    c.task.train_files = files.get('train', (tsv(tmp_path / 'train.tsv', PAIRS),))
    c.task.eval_files = files.get('eval', aligned(tmp_path, 'eval', PAIRS[:3]))
    c.task.test_files = files.get('test', (tsv(tmp_path / 'test.tsv', PAIRS[3:]),))
  return c


def test_task_scores_detokenized_output_with_sacrebleu(tmp_path):
  task = load_task(config_lib.parse(make_config(tmp_path, 'sentencepiece')))
  assert isinstance(task.target_vocab, SentencePieceVocab)
  assert os.listdir(tmp_path / 'data' / 'attnlab_sentencepiece')
  test = task.split('test')
  perfect = [
    {'index': i, 'hypothesis': task.target_vocab.encode(test[i]['target'])[:-1]}
    for i in range(len(test))
  ]
  out = task.decoded_metrics('test', perfect)
  assert out['bleu'] == pytest.approx(100.0) and out['chrf'] == pytest.approx(100.0)
  hyps = ['the dog barks', 'the cat is big', 'the tree is big']
  rows = [{'index': i, 'hypothesis': task.target_vocab.encode(h)[:-1]} for i, h in enumerate(hyps)]
  out = task.decoded_metrics('test', rows)
  refs = [test[i]['target'] for i in range(3)]
  assert out['bleu'] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
  assert out['chrf'] == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score)
  # BLEU by source length in words (Bahdanau et al. 2015, Fig. 2): the 3 sources have 4
  # words each, so all sit in the first bucket, whose BLEU is the corpus BLEU.
  assert [len(test[i]['source'].split()) for i in range(3)] == [4, 4, 4]
  first, *empty = out['bleu_by_length']
  assert (first['bucket'], first['count']) == ('0-9', 3)
  assert first['bleu'] == pytest.approx(out['bleu'])
  assert first['chrf'] == pytest.approx(out['chrf'])
  assert [(b['bucket'], b['count'], b['bleu']) for b in empty] == [
    (name, 0, None) for name in ('10-19', '20-29', '30-39', '40-49', '50+')]


def test_task_requires_every_split_and_valid_fields(tmp_path):
  c = make_config(tmp_path, test=())
  with pytest.raises(DataError, match=r'task.test_files is empty'):
    load_task(c)
  c = make_config(tmp_path)
  with c.unlocked():
    c.task.train_files = ('a', 'b', 'c')
  with pytest.raises(config_lib.ConfigError, match='task.train_files'):
    config_lib.parse(c)
  with c.unlocked():
    c.task.train_files = ('a.tsv',)
    c.task.tokenizer = 'bpe'
  with pytest.raises(config_lib.ConfigError, match='task.tokenizer.*choose from'):
    config_lib.parse(c)


def test_bleu_by_length_gives_each_buckets_brevity_penalty_length_ratio_and_chrf():
  """BLEU's brevity penalty (Papineni et al. 2002): 1 when the bucket's output is at least as
  long as its references (c >= r), else exp(1 - r/c); chrF has none. Hand-counted in 13a
  tokens: bucket 0-9 has c = 2 + 3 = 5 against r = 4 + 4 = 8, bucket 10-19 c = 5, r = 4."""
  hyps = ['the cat', 'a b c', 'one two three four five']
  refs = ['the cat sat on', 'a b c d', 'one two three four']
  buckets = bleu_scores.bleu_by_length(hyps, refs, [4, 9, 12], bleu_scores.BLEU_LENGTH_EDGES)
  short, long_ = buckets[0], buckets[1]
  assert short['length_ratio'] == pytest.approx(5 / 8)
  assert short['brevity_penalty'] == pytest.approx(math.exp(1 - 8 / 5))
  assert long_['length_ratio'] == pytest.approx(5 / 4)
  assert long_['brevity_penalty'] == 1.0
  assert short['chrf'] == pytest.approx(sacrebleu.corpus_chrf(hyps[:2], [refs[:2]]).score)
  # Several references per source (G2P-style lists): r is the closest reference length.
  multi = bleu_scores.bleu_by_length(['the cat'], [['the cat sat on', 'the cat sat']], [3],
                                 bleu_scores.BLEU_LENGTH_EDGES)[0]
  assert multi['length_ratio'] == pytest.approx(2 / 3)
  assert multi['brevity_penalty'] == pytest.approx(math.exp(1 - 3 / 2))


def test_word_task_vocab_ignores_eval_only_words(tmp_path):
  eval_pairs = [('unbekannt wort', 'unknown word')]
  task = load_task(make_config(tmp_path, eval=(tsv(tmp_path / 'e.tsv', eval_pairs),)))
  assert 'unbekannt' not in task.source_vocab.symbols
  assert task.source_vocab.encode('unbekannt haus')[0] == UNK_ID
  assert task.split('eval')[0]['target'] == 'unknown word'


def test_bleu_by_length_scores_each_word_bucket_as_its_own_corpus():
  """Bahdanau et al. 2015, Fig. 2: corpus BLEU of the sentences whose source has 0-9, 10-19,
  ..., 50+ words; each bucket equals sacrebleu on that subset alone."""
  hyps = ['the cat sat', 'a dog barks here', 'the house is big now', 'x']
  refs = ['the cat sat', 'the dog barks here', 'the house is small now', 'y']
  words = [3, 12, 55, 19]
  buckets = bleu_scores.bleu_by_length(hyps, refs, words, bleu_scores.BLEU_LENGTH_EDGES)
  assert [b['bucket'] for b in buckets] == ['0-9', '10-19', '20-29', '30-39', '40-49', '50+']
  assert [b['count'] for b in buckets] == [1, 2, 0, 0, 0, 1]
  assert buckets[1]['bleu'] == pytest.approx(
    sacrebleu.corpus_bleu([hyps[1], hyps[3]], [[refs[1], refs[3]]]).score)
  assert buckets[5]['bleu'] == pytest.approx(sacrebleu.corpus_bleu([hyps[2]], [[refs[2]]]).score)
  assert buckets[0]['bleu'] == pytest.approx(sacrebleu.corpus_bleu([hyps[0]], [[refs[0]]]).score)
  assert buckets[2]['bleu'] is None
  assert buckets[2] == {'bucket': '20-29', 'count': 0, 'bleu': None, 'chrf': None,
                        'brevity_penalty': None, 'length_ratio': None}
  with pytest.raises(ValueError, match='3 lengths for 4 hypotheses'):
    bleu_scores.bleu_by_length(hyps, refs, words[:3], bleu_scores.BLEU_LENGTH_EDGES)
  with pytest.raises(ValueError, match='length -1 is outside'):
    bleu_scores.bleu_by_length(hyps, refs, [-1, 1, 2, 3], bleu_scores.BLEU_LENGTH_EDGES)
