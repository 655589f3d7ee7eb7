"""Training and eval pipelines: shapes, filtering, epochs, resume, process shards, eval cover."""

import collections
import itertools
import json

import numpy as np
import pytest

from attnlab.config import run as config_lib
from attnlab.data import (
  TrainBatches,
  Vocab,
  eval_batches,
  eval_batches_from_source,
  load_task,
  train_batches,
)
from attnlab.tokens import EOS_ID, PAD_ID
from configs.base import get_config

LETTERS = 'abcdefghijklmnopqrstuvwxyz'
VOCAB = Vocab.from_symbols(LETTERS)
MAX_LEN, BUCKET = 12, 4  # tokens incl. EOS


def list_source(num=32, seed=3):
  """Examples with known lengths: every 4th pair is too long (source or target alternately)."""
  rng = np.random.default_rng(seed)
  examples = []
  for i in range(num):
    src_len, tgt_len = 1 + i % 11, 1 + (i * 5) % 11  # <= 11 chars: kept (+ EOS = 12)
    if i % 8 == 3:
      src_len = 14
    if i % 8 == 7:
      tgt_len = 13
    text = lambda n: ''.join(rng.choice(list(LETTERS), n))
    examples.append({'source': text(src_len), 'target': text(tgt_len), 'index': i})
  pairs = [(e['source'], e['target']) for e in examples]
  assert len(set(pairs)) == num
  return examples


def pipeline(source, **kwargs):
  args = dict(
    global_batch_size=8,
    max_source_length=MAX_LEN,
    max_target_length=MAX_LEN,
    bucket_size=BUCKET,
    seed=0,
    prefetch=0,
  )
  args.update(kwargs)
  return TrainBatches(source, VOCAB, VOCAB, **args)


def decoded_pairs(batch):
  return [
    (VOCAB.decode(s), VOCAB.decode(t))
    for s, t in zip(batch['source'], batch['target'], strict=True)
  ]


def kept_pairs(source):
  return {
    (e['source'], e['target'])
    for e in source
    if len(e['source']) + 1 <= MAX_LEN and len(e['target']) + 1 <= MAX_LEN
  }


def test_filtering_is_counted_and_batches_have_bucketed_shapes():
  source = list_source()
  batches = pipeline(source)
  assert batches.num_examples == 32 and batches.num_filtered == 8
  assert len(kept_pairs(source)) == 24
  for _ in range(6):
    batch = next(batches)
    assert set(batch) == {'source', 'target'}
    for key in ('source', 'target'):
      ids = batch[key]
      assert ids.dtype == np.int32 and ids.shape[0] == 8
      real = (ids != PAD_ID).sum(axis=1)
      # Padded length: the batch's longest row rounded up to the bucket, capped at the max.
      assert ids.shape[1] == min(-(-real.max() // BUCKET) * BUCKET, MAX_LEN)
      for row, n in zip(ids, real, strict=True):
        assert row[n - 1] == EOS_ID and (row[: n - 1] != EOS_ID).all()
        assert (row[n:] == PAD_ID).all()
    assert set(decoded_pairs(batch)) <= kept_pairs(source)


@pytest.mark.parametrize('reshuffle', [True, False])
def test_each_epoch_is_a_permutation_of_the_kept_pairs(reshuffle):
  source = list_source()
  batches = pipeline(source, reshuffle_each_epoch=reshuffle)
  epochs = [[p for _ in range(3) for p in decoded_pairs(next(batches))] for _ in range(2)]
  for epoch in epochs:
    assert collections.Counter(epoch) == collections.Counter(kept_pairs(source))
  assert (epochs[0] == epochs[1]) == (not reshuffle)
  other_seed = pipeline(source, seed=1)
  assert [p for _ in range(3) for p in decoded_pairs(next(other_seed))] != epochs[0]


@pytest.mark.parametrize('prefetch', [0, 2])
def test_resume_from_state_equals_uninterrupted(prefetch):
  source = list_source()
  reference = list(enumerate(itertools.islice(pipeline(source, prefetch=prefetch), 8)))

  def same(got, want_step):
    want = reference[want_step][1]
    assert all(np.array_equal(got[k], want[k]) for k in want)

  resumed = pipeline(source, prefetch=prefetch, start_step=3)
  for step in range(3, 8):
    assert resumed.get_state() == {'step': step}
    same(next(resumed), step)

  batches = pipeline(source, prefetch=prefetch)
  for _ in range(6):
    next(batches)
  state = json.loads(json.dumps(batches.get_state()))
  assert state == {'step': 6}
  batches.set_state({'step': 2})
  for step in range(2, 5):
    same(next(batches), step)
  batches.set_state(state)
  same(next(batches), 6)
  batches.close()


@pytest.mark.parametrize('process_count', [2, 4])
def test_process_shares_concatenate_to_the_global_batch(process_count):
  source = list_source()
  single = pipeline(source)
  shards = [
    pipeline(source, process_index=p, process_count=process_count) for p in range(process_count)
  ]
  assert {s.local_batch_size for s in shards} == {8 // process_count}
  for _ in range(5):
    want = next(single)
    parts = [next(s) for s in shards]
    for key in want:
      assert np.array_equal(np.concatenate([p[key] for p in parts]), want[key])


def test_bad_batch_and_process_settings():
  source = list_source()
  with pytest.raises(ValueError, match='multiple of the process count 3'):
    pipeline(source, process_count=3)
  with pytest.raises(ValueError, match='process_index=2'):
    pipeline(source, process_index=2, process_count=2)
  with pytest.raises(ValueError, match='raise the max lengths'):
    pipeline(source, max_source_length=1)


@pytest.mark.parametrize('process_count', [1, 2])
def test_eval_batches_cover_every_example_once(process_count):
  source = list_source(num=10)  # includes a 14-char source: longer than the train max
  local = 4 // process_count
  shares = [
    list(
      eval_batches_from_source(
        source, VOCAB, VOCAB, 4, bucket_size=BUCKET, process_index=p, process_count=process_count
      )
    )
    for p in range(process_count)
  ]
  assert [len(s) for s in shares] == [3] * process_count
  seen = []
  for g in range(3):
    parts = [s[g] for s in shares]
    batch = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    assert parts[0]['index'].shape == (local,)
    lengths = {}
    for row in range(4):
      index, weight = int(batch['index'][row]), float(batch['weight'][row])
      if index < 0:
        assert weight == 0.0
        assert (batch['source'][row] == PAD_ID).all() and (batch['target'][row] == PAD_ID).all()
        continue
      assert weight == 1.0
      seen.append(index)
      example = source[index]
      assert VOCAB.decode(batch['source'][row]) == example['source']
      assert VOCAB.decode(batch['target'][row]) == example['target']
      lengths.setdefault('source', []).append(len(example['source']) + 1)
      lengths.setdefault('target', []).append(len(example['target']) + 1)
    for key in ('source', 'target'):  # rounded up to the bucket, never capped
      assert batch[key].shape[1] == -(-max(lengths[key]) // BUCKET) * BUCKET
  assert sorted(seen) == list(range(10))
  assert batch['weight'].tolist() == [1.0, 1.0, 0.0, 0.0]
  assert max(b['source'].shape[1] for s in shares for b in s) == 16  # the 14-char source


def test_eval_batches_max_examples():
  batches = list(
    eval_batches_from_source(
      list_source(num=10), VOCAB, VOCAB, 4, bucket_size=BUCKET, max_examples=5
    )
  )
  indices = np.concatenate([b['index'] for b in batches]).tolist()
  assert sorted(indices[:5]) == [0, 1, 2, 3, 4] and indices[5:] == [-1, -1, -1]


def test_eval_batches_group_similar_lengths():
  """Rows come in order of source length, then target length, then index, so each batch is
  padded (and decoded) to lengths near its own rows'; the order is the data's, not random."""
  source = list_source(num=10)
  batches = list(eval_batches_from_source(source, VOCAB, VOCAB, 4, bucket_size=BUCKET))
  indices = [int(i) for b in batches for i in b['index'] if i >= 0]
  key = lambda i: (len(source[i]['source']), len(source[i]['target']), i)
  assert indices == sorted(range(10), key=key)
  assert len({len(source[i]['source']) for i in range(10)}) > 1  # the order is not trivial
  assert indices != list(range(10))
  widths = [b['source'].shape[1] for b in batches]
  assert widths == sorted(widths)


def test_train_batches_from_config_on_a_synthetic_task():
  config = get_config()
  config.task.name = 'reverse'
  config.task.vocab_size = 6
  config.task.train_lengths = (2, 14)
  config.task.num_train_examples = 48
  config.data.global_batch_size = 8
  config.data.max_source_length = MAX_LEN
  config.data.max_target_length = MAX_LEN
  config.data.bucket_size = BUCKET
  task = load_task(config)
  train = task.split('train')
  expected_dropped = sum(len(train[i]['source']) + 1 > MAX_LEN for i in range(len(train)))
  assert 0 < expected_dropped < 48
  batches = train_batches(task, config, process_index=0, process_count=1)
  assert batches.num_filtered == expected_dropped
  vocab = task.source_vocab
  for _ in range(3):
    batch = next(batches)
    assert batch['source'].shape[0] == 8 and batch['source'].shape[1] <= MAX_LEN
    for s, t in zip(batch['source'], batch['target'], strict=True):
      assert vocab.decode(t) == vocab.decode(s)[::-1] != ''
  batches.close()


def test_config_entry_points_accept_the_parsed_config():
  config = get_config()
  config.task.name = 'copy'
  config.task.num_train_examples = 16
  config.task.num_eval_examples = 10
  config.task.eval_lengths = (25, 30)  # longer than the train max lengths: still kept
  config.data.global_batch_size = 4
  config.eval.max_examples = 6
  cfg = config_lib.parse(config)
  task = load_task(cfg)
  batches = train_batches(task, cfg, start_step=5, process_index=1, process_count=2)
  assert batches.get_state() == {'step': 5} and batches.local_batch_size == 2
  want = pipeline_from(task, start_step=5)
  got = next(batches)
  assert np.array_equal(got['source'], want['source'][2:])
  batches.close()
  shares = [list(eval_batches(task, cfg, 'eval', process_index=p, process_count=2)) for p in (0, 1)]
  indices = sorted(int(i) for s in shares for b in s for i in b['index'] if i >= 0)
  assert indices == list(range(6))
  assert all(b['source'].shape[1] == 32 for s in shares for b in s)  # 25..30 + EOS -> 32


def pipeline_from(task, start_step):
  """The single-process batch at `start_step`, built directly from the dataset."""
  source = task.split('train')
  batches = TrainBatches(
    source,
    task.source_vocab,
    task.target_vocab,
    global_batch_size=4,
    max_source_length=32,
    max_target_length=32,
    bucket_size=8,
    seed=0,
    prefetch=0,
  )
  return batches.dataset[start_step]


@pytest.mark.parametrize('batching', ['examples', 'tokens'])
def test_layout_describes_the_batch_it_builds(batching):
  source = list_source()
  batches = pipeline(source, batching=batching, tokens_per_batch=48, num_buckets=3)
  for step in range(6):
    indices, src_pad, tgt_pad = batches.layout(step)
    batch = batches.dataset[step]
    assert batch['source'].shape == (len(indices), src_pad)
    assert batch['target'].shape == (len(indices), tgt_pad)
    assert decoded_pairs(batch) == [(source[i]['source'], source[i]['target']) for i in indices]
  if batching == 'examples':
    assert batches.steps_per_epoch == 24 / 8  # kept pairs / global batch
  else:  # each bucket's pairs / its rows
    rows = collections.Counter()
    src, tgt = batches.kept_lengths()
    for s, t in zip(src, tgt, strict=True):
      fitting = [shape for shape in batches.shapes if s <= shape[1] and t <= shape[2]]
      rows[min(fitting, key=lambda shape: shape[1] + shape[2])] += 1  # the least padding
    assert batches.steps_per_epoch == pytest.approx(sum(n / r for (r, _, _), n in rows.items()))
