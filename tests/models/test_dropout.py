"""models/dropout.py: Threefry-2x32 as published, JAX's bits and flax's dropout bit for bit."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlab.models import dropout

SHAPES = [(1,), (5,), (6,), (3, 5, 7), (64, 16, 24)]


def test_threefry_matches_the_random123_known_answers():
  # Threefry-2x32, 20 rounds: the known-answer vectors that ship with Random123 (Salmon et al.
  # 2011), (key, counter) -> output.
  cases = [
    ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
  ]
  for key, count, want in cases:
    words = [jnp.uint32(w) for w in key + count]
    got = dropout.threefry2x32(*words)
    assert [int(g) for g in got] == list(want)


@pytest.mark.slow
@pytest.mark.parametrize('partitionable', [True, False])
def test_random_bits_equal_jax_random_bits(partitionable):
  key = jax.random.key(7)
  with jax.threefry_partitionable(partitionable):
    for shape in SHAPES:
      want = jax.random.bits(key, shape, jnp.uint32)
      got = jax.jit(dropout.random_bits, static_argnums=1)(key, shape)
      np.testing.assert_array_equal(got, want)
    raw = jax.random.PRNGKey(3)  # a legacy uint32[2] key
    np.testing.assert_array_equal(
      dropout.random_bits(raw, (4, 5)), jax.random.bits(raw, (4, 5), jnp.uint32)
    )


def test_bernoulli_equals_jax_for_every_probability_and_falls_back_where_it_must():
  key = jax.random.key(11)
  for p in (0.0, 0.1, 1 / 3, 0.5, 0.9, 1.0 - 2**-24, 1.0):
    np.testing.assert_array_equal(
      dropout.bernoulli(key, p, (64, 33)), jax.random.bernoulli(key, p, (64, 33))
    )
  with jax.enable_x64(True):  # p and the uniform become float64: JAX's own path
    np.testing.assert_array_equal(
      dropout.bernoulli(key, 0.9, (64, 33)), jax.random.bernoulli(key, 0.9, (64, 33))
    )
  rbg = jax.random.key(11, impl='rbg')
  assert dropout.random_bits(rbg, (3,)) is None
  np.testing.assert_array_equal(
    dropout.bernoulli(rbg, 0.7, (8, 9)), jax.random.bernoulli(rbg, 0.7, (8, 9))
  )


def test_bits_compile_without_the_loop_that_jax_uses_on_cpu():
  """The point of the module: JAX's CPU Threefry is a 5-pass while loop; ours is straight-line."""
  key = jax.random.key(0)
  ours = jax.jit(lambda k: dropout.bernoulli(k, 0.9, (8, 16))).lower(key).as_text()
  theirs = jax.jit(lambda k: jax.random.bernoulli(k, 0.9, (8, 16))).lower(key).as_text()
  assert 'while' not in ours
  assert 'while' in theirs  # if JAX ever unrolls it on CPU, this module can go


class _Pair(nn.Module):
  """The same dropout twice, from the same rng: attnlab's and flax's."""

  rate: float
  broadcast_dims: tuple = ()

  @nn.compact
  def __call__(self, x, deterministic=False):
    ours = dropout.Dropout(self.rate, self.broadcast_dims, name='drop')
    theirs = nn.Dropout(self.rate, self.broadcast_dims, name='drop_flax')
    rng = None if deterministic else self.make_rng('dropout')
    return ours(x, deterministic, rng=rng), theirs(x, deterministic, rng=rng)


@pytest.mark.parametrize('rate,broadcast_dims', [(0.1, ()), (0.5, (0,)), (0.3, (-1,)),
                                                 (0.0, ()), (1.0, ())])
def test_dropout_equals_flax_dropout_in_values_and_gradients(rate, broadcast_dims):
  x = jax.random.normal(jax.random.key(1), (4, 6, 10))
  pair = _Pair(rate, broadcast_dims)
  rngs = {'dropout': jax.random.key(5)}
  ours, theirs = pair.apply({}, x, rngs=rngs)
  np.testing.assert_array_equal(ours, theirs)
  grad = lambda i: jax.grad(lambda x: jnp.sum(jnp.sin(pair.apply({}, x, rngs=rngs)[i])))(x)
  np.testing.assert_array_equal(grad(0), grad(1))
  kept = np.mean(np.asarray(ours) != 0)
  assert abs(kept - (1 - rate)) < 0.2  # a real mask: neither all kept nor all dropped
  ours, theirs = pair.apply({}, x, deterministic=True)
  np.testing.assert_array_equal(ours, x)


def test_module_rng_stream_is_flax_dropout_stream():
  """Same name, same place: the module draws the same key that nn.Dropout would draw."""

  class One(nn.Module):
    cls: type

    @nn.compact
    def __call__(self, x):
      return self.cls(0.5, name='drop')(x, deterministic=False)

  x = jnp.ones((16, 16))
  rngs = {'dropout': jax.random.key(2)}
  np.testing.assert_array_equal(
    One(dropout.Dropout).apply({}, x, rngs=rngs), One(nn.Dropout).apply({}, x, rngs=rngs)
  )
