"""decoding/spread.py: batches searched over every local device (8 simulated CPU devices here),
ahead of the host, give what one device gives searching one batch at a time, in input order."""

import functools

import jax
import numpy as np
import pytest
from support.random_runs import random_run

from attnlab.data.pipeline import pad_rows
from attnlab.decoding import search, spread
from attnlab.tokens import EOS_ID
from configs import reverse


def test_results_come_in_order_with_at_most_ahead_batches_dispatched():
  calls = []

  def double_plus(params, src_BxS, *, max_length):
    return {'out': src_BxS * params['scale'] + max_length}

  searcher = spread.SpreadSearch(double_plus)
  assert searcher.num_devices == jax.local_device_count() == 8
  pulled = []

  def batches():
    for i in range(6):
      pulled.append(i)
      calls.append(i)
      yield f'batch {i}', np.full((8, 3), i, np.int32), 10 * i

  results = searcher.results(searcher.replicate({'scale': np.int32(2)}), batches())
  tag, first = next(results)
  # The first result is fetched once AHEAD more batches are on their way, not all six.
  assert (tag, pulled) == ('batch 0', list(range(spread.AHEAD + 1)))
  np.testing.assert_array_equal(first['out'], np.zeros((8, 3)))
  rest = list(results)
  assert [t for t, _ in rest] == [f'batch {i}' for i in range(1, 6)]
  for i, (_, found) in enumerate(rest, start=1):
    np.testing.assert_array_equal(found['out'], np.full((8, 3), 2 * i + 10 * i))


def test_rows_that_do_not_split_over_the_devices_are_refused():
  searcher = spread.SpreadSearch(lambda params, src_BxS, *, max_length: src_BxS)
  with pytest.raises(ValueError, match='12 rows do not split over 8 devices'):
    list(searcher.results({}, [('b', np.zeros((12, 3), np.int32), 4)]))


@pytest.mark.slow
@pytest.mark.parametrize('method', ['greedy', 'beam'])
def test_eight_devices_search_as_one_device_does(method, tmp_path):
  run = random_run(reverse.get_config('smoke'), tmp_path)
  search_fn = functools.partial(search.search_batch, run.model, method=method, beam_size=3,
                                length_penalty=0.6)
  rng = np.random.default_rng(0)
  def sentence(n):
    return [*rng.integers(4, run.source_vocab.size, size=n), EOS_ID]

  batches = [pad_rows([sentence(n) for n in rng.integers(1, 12, size=16)], 16, 16)
             for _ in range(3)]
  one_device = jax.jit(search_fn, static_argnames=('max_length',))
  searcher = spread.SpreadSearch(search_fn)
  spread_out = searcher.results(searcher.replicate(run.params),
                                ((i, src, 12) for i, src in enumerate(batches)))
  for i, found in spread_out:
    alone = jax.device_get(one_device(run.params, batches[i], max_length=12))
    for got, want in zip(jax.tree.leaves(found), jax.tree.leaves(alone), strict=True):
      np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
