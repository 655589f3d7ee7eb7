"""Token batching: shapes from the length histogram, token budget, the bucketed stream, resume,
process shares, and the loss staying a global token mean when rows vary from batch to batch."""

import itertools
import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from attnlab.config import run as config_lib
from attnlab.data import TrainBatches, Vocab, load_task, train_batches
from attnlab.data.batching import (
  TokenSchedule,
  assign_shapes,
  choose_shapes,
  rows_per_shape,
  token_schedule,
)
from attnlab.runtime.parallel import DataParallel
from attnlab.tokens import BOS_ID, PAD_ID
from attnlab.train import start as train_start
from attnlab.train import steps
from configs.base import get_config

LETTERS = 'abcdefghijklmnopqrstuvwxyz'
VOCAB = Vocab.from_symbols(LETTERS)


def repeat_pairs(*cells):
  """Lengths (s, t) repeated: repeat_pairs(((2, 2), 100), ...) -> src [N], tgt [N]."""
  src = np.concatenate([np.full(n, s) for (s, _), n in cells])
  tgt = np.concatenate([np.full(n, t) for (_, t), n in cells])
  return src, tgt


def test_golden_shapes_greedy_step():
  # 100 x (2, 2), 100 x (4, 4), 1 x (8, 8). The start shape (8, 8) pads them 12, 8 and 0 tokens
  # (2000 in all). Adding (2, 2) saves 100 * 12 = 1200; adding (4, 4) saves 100 * (12 - 4) +
  # 100 * 8 = 1600, so two buckets are (4, 4) and (8, 8), leaving 100 * 4 = 400 padded tokens.
  src, tgt = repeat_pairs(((2, 2), 100), ((4, 4), 100), ((8, 8), 1))
  assert choose_shapes(src, tgt, 1).tolist() == [[8, 8]]
  assert choose_shapes(src, tgt, 2).tolist() == [[4, 4], [8, 8]]
  assert choose_shapes(src, tgt, 3).tolist() == [[2, 2], [4, 4], [8, 8]]
  assert choose_shapes(src, tgt, 9).tolist() == [[2, 2], [4, 4], [8, 8]]  # no empty shapes
  assert assign_shapes(src, tgt, choose_shapes(src, tgt, 2)).tolist() == [0] * 200 + [1]


def test_golden_shapes_refinement_shrinks_a_shape_to_its_pairs():
  # 10 x (3, 5) and 10 x (5, 3): (5, 5) pads each by 2. Greedy adds (3, 5) (a tie with (5, 3),
  # broken by (s, t) order); then only (5, 3) pairs are left in (5, 5), which shrinks to (5, 3):
  # no padding at all, which greedy alone (with (5, 5) kept) would not find.
  src, tgt = repeat_pairs(((3, 5), 10), ((5, 3), 10))
  assert choose_shapes(src, tgt, 2).tolist() == [[3, 5], [5, 3]]
  # One side constant (the dates task): buckets split the source lengths only.
  src, tgt = repeat_pairs(((13, 11), 30), ((17, 11), 50), ((21, 11), 20))
  assert choose_shapes(src, tgt, 2).tolist() == [[17, 11], [21, 11]]  # pads 30 * 4 tokens


def test_rows_fill_the_token_budget_in_multiples_of_the_devices():
  shapes = np.array([[5, 4], [10, 12], [23, 21]])
  # 1000 // 5 = 200; 1000 // 12 = 83 -> 80; 1000 // 23 = 43 -> 40 (multiples of 8).
  assert rows_per_shape(shapes, 1000, 8) == [200, 80, 40]
  # A shape with fewer pairs than rows gets a smaller batch (at least the multiple).
  assert rows_per_shape(shapes, 1000, 8, counts=[1000, 50, 3]) == [200, 48, 8]
  with pytest.raises(config_lib.ConfigError, match=r'tokens_per_batch=100 .* at least 184'):
    rows_per_shape(shapes, 100, 8)


def synthetic_lengths(n=20_000, seed=0):
  """Correlated source/target lengths, as in translation: s ~ N(30, 10), t ~ 0.9 s + N(0, 3)."""
  rng = np.random.default_rng(seed)
  src = np.clip(np.rint(rng.normal(30, 10, n)), 2, 64).astype(np.int64)
  tgt = np.clip(np.rint(0.9 * src + rng.normal(0, 3, n)), 2, 64).astype(np.int64)
  return src, tgt


def stream_padding(schedule, src, tgt, num_batches):
  computed = real = 0
  for k in range(num_batches):
    b, pos = schedule[k]
    rows, S, T = schedule.shapes[b]
    assert len(pos) == rows
    computed += rows * (S + T)
    real += int(src[pos].sum() + tgt[pos].sum())
  return computed / real - 1


def test_padding_bound_and_token_budget_on_a_synthetic_distribution():
  src, tgt = synthetic_lengths()
  schedule = token_schedule(src, tgt, tokens_per_batch=2048, num_buckets=16, row_multiple=4,
                            seed=0)
  assert len(schedule.shapes) <= 16
  for (rows, S, T), count in zip(schedule.shapes, schedule.counts, strict=True):
    assert rows % 4 == 0 and rows * max(S, T) <= 2048
    # As many rows as the budget allows, unless the bucket has fewer pairs.
    assert 2048 - rows * max(S, T) < 4 * max(S, T) or rows == count // 4 * 4
  epoch = int(schedule.batches_per_epoch)
  padding = stream_padding(schedule, src, tgt, epoch)
  assert padding < 0.10 and abs(padding - schedule.padding) < 0.01
  for k in range(epoch):  # every pair fits the shape of its batch
    b, pos = schedule[k]
    _, S, T = schedule.shapes[b]
    assert src[pos].max() <= S and tgt[pos].max() <= T
  # The same lengths in random batches of 64, padded to multiples of 8: far more padding.
  rng = np.random.default_rng(1)
  order = rng.permutation(len(src))[: len(src) // 64 * 64].reshape(-1, 64)
  pad8 = lambda x: -(-x // 8) * 8
  computed = sum(64 * (pad8(src[i].max()) + pad8(tgt[i].max())) for i in order)
  assert computed / (src[order].sum() + tgt[order].sum()) - 1 > 0.5


def reference_stream(bucket, rows, seed, num_epochs):
  """The definition, step by step: walk epoch e's permutation (seed, e); each pair joins its
  bucket; a bucket holding `rows` pairs is the next batch."""
  pending = [[] for _ in rows]
  out = []
  for epoch in range(num_epochs):
    for p in np.random.default_rng([seed, epoch]).permutation(len(bucket)):
      b = bucket[p]
      pending[b].append(p)
      if len(pending[b]) == rows[b]:
        out.append((b, pending[b]))
        pending[b] = []
  return out


@pytest.mark.parametrize('rows', [[3, 4, 2], [5, 7, 13]])  # 13 > its bucket's 9 pairs
def test_random_access_schedule_equals_the_streaming_definition(rows):
  rng = np.random.default_rng(0)
  bucket = rng.permutation(np.repeat([0, 1, 2], [17, 23, 9]))
  schedule = TokenSchedule(bucket, rows, seed=7)
  want = reference_stream(bucket, rows, seed=7, num_epochs=6)
  assert schedule.batches_before(6) == len(want)
  for k in reversed(range(len(want))):  # any order: no hidden sequential state
    b, pos = schedule[k]
    assert b == want[k][0] and pos.tolist() == want[k][1], k


def test_each_epoch_passes_every_pair_once_per_bucket():
  src, tgt = synthetic_lengths(n=3000)
  schedule = token_schedule(src, tgt, tokens_per_batch=1024, num_buckets=6, row_multiple=2,
                            seed=3)
  streams = {}
  for k in range(schedule.batches_before(4)):
    b, pos = schedule[k]
    streams.setdefault(b, []).extend(pos.tolist())
  bucket = assign_shapes(src, tgt, np.array([s[1:] for s in schedule.shapes]))
  for b, stream in streams.items():
    members = sorted(np.flatnonzero(bucket == b).tolist())
    c = len(members)
    for e in range(len(stream) // c):
      assert sorted(stream[e * c : (e + 1) * c]) == members


def list_source(num=400, seed=3):
  rng = np.random.default_rng(seed)
  text = lambda n: ''.join(rng.choice(list(LETTERS), n))
  return [{'source': text(int(rng.integers(1, 23))), 'target': text(int(rng.integers(1, 20))),
           'index': i} for i in range(num)]


def token_pipeline(source, **kwargs):
  args = dict(global_batch_size=8, max_source_length=20, max_target_length=20, bucket_size=4,
              seed=0, prefetch=0, batching='tokens', tokens_per_batch=96, num_buckets=4,
              row_multiple=2)
  args.update(kwargs)
  return TrainBatches(source, VOCAB, VOCAB, **args)


def test_token_batches_hold_their_shapes_and_the_kept_pairs():
  source = list_source()
  batches = token_pipeline(source)
  assert batches.num_filtered > 0 and len(batches.shapes) == 4
  kept = {(e['source'], e['target']) for e in source
          if len(e['source']) < 20 and len(e['target']) < 20}
  shapes = set()
  for _ in range(40):
    batch = next(batches)
    rows, S = batch['source'].shape
    T = batch['target'].shape[1]
    assert (rows, S, T) in batches.shapes and rows * max(S, T) <= 96 and rows % 2 == 0
    shapes.add((rows, S, T))
    assert {(VOCAB.decode(s), VOCAB.decode(t))
            for s, t in zip(batch['source'], batch['target'], strict=True)} <= kept
    assert (batch['source'] != PAD_ID).sum(axis=1).min() > 0  # no empty rows
  assert len(shapes) > 1 and batches.local_batch_size is None


def test_token_batches_are_deterministic_and_seeded():
  source = list_source()
  a, b, c = (token_pipeline(source, seed=s) for s in (0, 0, 1))
  first = [next(a) for _ in range(10)]
  assert all(np.array_equal(x['source'], next(b)['source']) for x in first)
  assert not all(np.array_equal(x['source'], next(c)['source']) for x in first)


@pytest.mark.parametrize('prefetch', [0, 2])
def test_token_batches_resume_to_the_uninterrupted_stream(prefetch):
  source = list_source()
  reference = list(itertools.islice(token_pipeline(source, prefetch=prefetch), 30))
  same = lambda got, k: all(np.array_equal(got[key], reference[k][key]) for key in got)
  resumed = token_pipeline(source, prefetch=prefetch, start_step=17)
  assert all(same(next(resumed), k) for k in range(17, 30))
  batches = token_pipeline(source, prefetch=prefetch)
  for _ in range(12):
    next(batches)
  state = json.loads(json.dumps(batches.get_state()))
  assert state == {'step': 12}
  batches.set_state({'step': 3})
  assert same(next(batches), 3)
  batches.set_state(state)
  assert same(next(batches), 12)
  batches.close()


def test_process_shares_have_equal_shapes_and_concatenate_to_the_global_batch():
  source = list_source()
  single = token_pipeline(source, row_multiple=2)
  shares = [token_pipeline(source, row_multiple=2, process_index=p, process_count=2)
            for p in (0, 1)]
  assert shares[0].shapes == shares[1].shapes == single.shapes
  for _ in range(25):
    want = next(single)
    parts = [next(s) for s in shares]
    for key in want:
      assert parts[0][key].shape == parts[1][key].shape
      assert np.array_equal(np.concatenate([p[key] for p in parts]), want[key])


def test_rows_divide_over_processes_times_devices():
  # 3 processes of 2 devices: rows a multiple of 6.
  batches = token_pipeline(list_source(), row_multiple=6, process_count=3, global_batch_size=9,
                           tokens_per_batch=200)
  assert all(rows % 6 == 0 for rows, _, _ in batches.shapes)
  assert next(batches)['source'].shape[0] in {rows // 3 for rows, _, _ in batches.shapes}


def test_config_keys_are_validated():
  def parse(**data):
    c = get_config()
    c.data.update(data)
    return config_lib.parse(c)

  parse(batching='tokens')
  with pytest.raises(config_lib.ConfigError, match='data.batching=.token. is not valid; choose '
                     'from examples, tokens'):
    parse(batching='token')
  with pytest.raises(config_lib.ConfigError, match='data.tokens_per_batch=0 must be a positive'):
    parse(tokens_per_batch=0)
  with pytest.raises(config_lib.ConfigError, match='data.num_buckets=0 must be a positive'):
    parse(num_buckets=0)
  with pytest.raises(config_lib.ConfigError, match='data.tokens_per_batch=20 cannot hold one '
                     'pair of the max length 32'):
    parse(batching='tokens', tokens_per_batch=20)
  parse(tokens_per_batch=20)  # ignored with example batching


def test_train_batches_from_config_use_the_run_devices():
  config = get_config()
  config.task.name = 'copy'
  config.task.num_train_examples = 200
  config.data.batching = 'tokens'
  config.data.tokens_per_batch = 256
  config.data.num_buckets = 3
  config.parallel.num_devices = 4
  cfg = config_lib.parse(config)
  task = load_task(cfg)
  batches = train_batches(task, cfg, process_index=0, process_count=1)
  assert all(rows % 4 == 0 and rows * max(S, T) <= 256 for rows, S, T in batches.shapes)
  batches.close()
  config.parallel.num_devices = 0  # every device: 8 in tests
  batches = train_batches(task, config, process_index=0, process_count=1)
  assert all(rows % 8 == 0 for rows, _, _ in batches.shapes)
  batches.close()


def toy_apply(variables, src_BxS, tgt_in_BxT, train=False, rngs=None):
  """A model cheap to compile whose logits depend on the source and the decoder input."""
  del train, rngs
  p = variables['params']
  context_BxV = jnp.tanh(p['source'][src_BxS].sum(axis=1))
  return p['target'][tgt_in_BxT] * context_BxV[:, None, :]


@pytest.mark.slow
def test_gradient_is_the_global_token_mean_whatever_the_rows():
  """Two batches of different rows and lengths over 4 devices: the update of plain SGD (lr 1)
  is minus the gradient of (sum of target-token NLL) / (number of target tokens) over the
  whole batch, although the devices hold different token counts (a mean of per-device means
  would differ)."""
  rng = np.random.default_rng(0)
  vocab = 12
  params = {'source': jnp.asarray(rng.normal(size=(vocab, vocab)), jnp.float32),
            'target': jnp.asarray(rng.normal(size=(vocab, vocab)), jnp.float32)}

  def batch(rows, S, T):
    out = {}
    for key, width in (('source', S), ('target', T)):
      ids = rng.integers(3, vocab, (rows, width)).astype(np.int32)
      lengths = rng.integers(1, width + 1, rows)
      ids[np.arange(width)[None, :] >= lengths[:, None]] = PAD_ID
      out[key] = ids
    return out

  parallel = DataParallel('pmap', devices=jax.local_devices()[:4])
  step_fn = parallel.compile_train_step(steps.train_step)
  for rows, S, T in ((16, 5, 4), (4, 11, 9)):
    b = batch(rows, S, T)
    per_device = (b['target'] != PAD_ID).reshape(4, -1).sum(axis=1)
    assert len(set(per_device.tolist())) > 1

    def mean_nll(p, b=b):
      bos_Bx1 = jnp.full((len(b['target']), 1), BOS_ID, jnp.int32)
      tgt_in = jnp.concatenate([bos_Bx1, b['target'][:, :-1]], axis=1)
      logp = jax.nn.log_softmax(toy_apply({'params': p}, b['source'], tgt_in))
      nll = -jnp.take_along_axis(logp, b['target'][..., None], axis=-1)[..., 0]
      mask = b['target'] != PAD_ID
      return jnp.sum(jnp.where(mask, nll, 0.0)) / jnp.sum(mask)

    want = jax.tree.map(lambda p, g: p - g, params, jax.grad(mean_nll)(params))
    state = steps.TrainState.create(apply_fn=toy_apply, params=params, tx=optax.sgd(1.0))
    new_state, _ = step_fn(parallel.replicate(state), parallel.shard_batch(b), jax.random.key(2))
    got = parallel.fetch(new_state.params)
    for key in params:
      np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_a_token_batched_run_trains_and_resumes_at_its_data_position(tmp_path):
  from support.smoke_runs import smoke_config

  from attnlab.train import loop as train

  config = smoke_config(**{'train.num_steps': 2, 'data.batching': 'tokens',
                           'data.tokens_per_batch': 160, 'data.num_buckets': 2})
  final = train.train_and_evaluate(config, str(tmp_path))
  assert np.isfinite(final['test']['loss'])
  run, _, batches, start = train_start.setup(config, str(tmp_path))
  run.ckpt.close()
  assert start == 2 and batches.get_state() == {'step': 2} and len(batches.shapes) == 2
  batches.close()
