"""Dropout with flax's masks, bit for bit, whose random bits cost one fused kernel on CPU.

`flax.linen.Dropout` draws its mask with `jax.random.bernoulli`, i.e. Threefry-2x32 bits (Salmon
et al. 2011, "Parallel random numbers: as easy as 1, 2, 3"). On CPU, JAX lowers the Threefry
hash as a loop of 5 iterations, each a separate pass over the whole array of counters
(`jax._src.random.threefry2x32`, `use_rolled_loops=True`, chosen for compile time), and the
loop keeps XLA from fusing the hash into the mask. `random_bits` computes the same 20 rounds
as straight-line integer ops, which XLA fuses with the comparison and the select into one
kernel: the same bits as `jax.random.bits`, about 3x faster on a 1M-element mask, and the
Transformer's training step 5-8% faster (benchmarks/OPTIMISATIONS.md, Transformer training).
`Dropout` is `flax.linen.Dropout` with that mask and the same rng stream, so models keep their
parameters, their masks and their training curves. Keys of another PRNG implementation fall
back to flax's own code.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

# Threefry-2x32 with 20 rounds (Random123's default): rotation distances of rounds 0..7 (then
# repeating) and the key-schedule parity constant.
_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)
_PARITY = 0x1BD11BDA


def _rotate_left(x, distance: int):
  return (x << np.uint32(distance)) | (x >> np.uint32(32 - distance))


def threefry2x32(key0, key1, count0, count1):
  """Threefry-2x32-20 of the counter pairs (count0, count1) under the key (key0, key1).

  All arguments uint32 (keys scalar, counts of one shape); returns the two output words.
  """
  schedule = (key0, key1, key0 ^ key1 ^ np.uint32(_PARITY))
  x0, x1 = count0 + schedule[0], count1 + schedule[1]
  for block in range(5):  # 4 rounds, then a key injection
    for r in range(4):
      x0 = x0 + x1
      x1 = _rotate_left(x1, _ROTATIONS[4 * (block % 2) + r]) ^ x0
    x0 = x0 + schedule[(block + 1) % 3]
    x1 = x1 + schedule[(block + 2) % 3] + np.uint32(block + 1)
  return x0, x1


def _threefry_key_words(key):
  """(key0, key1) uint32 scalars of a Threefry-2x32 key, or None for any other PRNG."""
  if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
    if key.shape or str(jax.random.key_impl(key)) != 'threefry2x32':
      return None
    words = jax.random.key_data(key)
  elif key.shape == (2,) and key.dtype == jnp.uint32:  # legacy raw key: the default impl
    if jax.config.jax_default_prng_impl != 'threefry2x32':
      return None
    words = key
  else:
    return None
  return words[0], words[1]


def random_bits(key, shape: tuple[int, ...]):
  """uint32 bits equal to `jax.random.bits(key, shape)` for a Threefry key (None otherwise).

  JAX's counter for element i (row-major) is the 64-bit i as (high, low) words and the bits are
  the XOR of the two output words (`jax_threefry_partitionable`, the default); with that flag
  off, JAX hashes the pairs (i, i + ceil(n/2)) and concatenates the outputs instead (half the
  hashes).
  """
  words = _threefry_key_words(key)
  size = int(np.prod(shape))
  if words is None or size >= 2**32:
    return None
  if jax.config.jax_threefry_partitionable:
    return _bits_per_counter(words, size).reshape(shape)
  return _bits_per_half(words, size).reshape(shape)


def _bits_per_counter(words, size: int):
  low = lax.iota(jnp.uint32, size)
  y0, y1 = threefry2x32(*words, jnp.zeros_like(low), low)
  return y0 ^ y1


def _bits_per_half(words, size: int):
  half = (size + 1) // 2
  first = lax.iota(jnp.uint32, half)
  second = first + np.uint32(half)
  if size % 2:  # JAX pads the counters with a 0, which pairs with the last of the first half
    second = jnp.where(first == half - 1, np.uint32(0), second)
  y0, y1 = threefry2x32(*words, first, second)
  return jnp.concatenate([y0, y1])[:size]


def bernoulli(key, p: float, shape: tuple[int, ...]):
  """`jax.random.bernoulli(key, p, shape)`, bit for bit (falls back to it for other keys and
  under `jax_enable_x64`, where p and the uniform are float64).

  bernoulli is uniform < p, and uniform's float is m / 2^23 with m the top 23 bits, so the test
  is m < ceil(float32(p) * 2^23) on integers.
  """
  bits = None
  if jax.dtypes.canonicalize_dtype(jnp.float64) == jnp.float32:  # with x64, p is float64
    bits = random_bits(key, shape)
  if bits is None:
    return jax.random.bernoulli(key, p, shape)
  threshold = int(np.ceil(np.float64(np.float32(p)) * 2**23))
  return (bits >> np.uint32(9)) < np.uint32(threshold)


class Dropout(nn.Dropout):
  """`flax.linen.Dropout` (same fields, rng stream and masks) drawing its mask with `bernoulli`."""

  @nn.compact
  def __call__(self, inputs, deterministic: bool | None = None, rng=None):
    deterministic = nn.merge_param('deterministic', self.deterministic, deterministic)
    if self.rate == 0.0 or deterministic:
      return inputs
    if self.rate == 1.0:  # as flax: no division by a zero keep probability
      return jnp.zeros_like(inputs)
    keep_prob = 1.0 - self.rate
    if rng is None:
      rng = self.make_rng(self.rng_collection)
    mask_shape = list(inputs.shape)
    for dim in self.broadcast_dims:
      mask_shape[dim] = 1
    mask = jnp.broadcast_to(bernoulli(rng, keep_prob, tuple(mask_shape)), inputs.shape)
    return lax.select(mask, inputs / keep_prob, jnp.zeros_like(inputs))
