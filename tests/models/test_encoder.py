"""RNN encoder and bridge: padding never leaks, directions line up, bridges map states right."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from support.config_builders import model_config

from attnlab.config.fields import ConfigError
from attnlab.config.model import ModelConfig
from attnlab.models import encoder, recurrent
from attnlab.models.encoder import Bridge, RNNEncoder

H, E, V = 8, 6, 11
LENGTHS = (5, 3, 1)
# Rows padded with PAD_ID=0 after their length; real tokens are >= 4.
SRC = np.array([[4, 5, 6, 7, 2], [8, 9, 2, 0, 0], [2, 0, 0, 0, 0]], np.int32)


def make_config(**overrides) -> ModelConfig:
  fields = dict(hidden_size=H, embed_dim=E, encoder_layers=2, dropout=0.0)
  fields.update(overrides)
  return model_config(**fields)


def hidden(carry):
  return carry[1] if isinstance(carry, tuple) else carry


@pytest.mark.slow
@pytest.mark.parametrize('cell', recurrent.CELLS)
@pytest.mark.parametrize('bidirectional', [False, True])
def test_padded_batch_equals_each_sequence_alone(cell, bidirectional):
  encoder = RNNEncoder(make_config(cell=cell, bidirectional=bidirectional), V)
  variables = encoder.init(jax.random.key(0), SRC, train=False)
  apply = jax.jit(lambda src: encoder.apply(variables, src, train=False))
  enc_BxSxH, finals = apply(SRC)
  assert enc_BxSxH.shape == (3, 5, H)
  assert len(finals) == 2
  for row, length in enumerate(LENGTHS):
    alone_1xLxH, alone_finals = apply(SRC[row : row + 1, :length])
    np.testing.assert_allclose(enc_BxSxH[row, :length], alone_1xLxH[0], atol=1e-6)
    # Padded positions are exactly zero.
    np.testing.assert_array_equal(enc_BxSxH[row, length:], 0.0)
    for layer in range(2):
      for batch_leaf, alone_leaf in zip(
        jax.tree.leaves(finals[layer]), jax.tree.leaves(alone_finals[layer]), strict=True
      ):
        np.testing.assert_allclose(batch_leaf[row], alone_leaf[0], atol=1e-6)
  # The top layer's final h is its output at the end each direction stops at: the forward
  # half at the last real token, the backward half at the first token.
  top_h_BxH = hidden(finals[-1])
  lengths = np.array(LENGTHS)
  last_BxH = np.asarray(enc_BxSxH)[np.arange(3), lengths - 1]
  if bidirectional:
    np.testing.assert_allclose(top_h_BxH[:, : H // 2], last_BxH[:, : H // 2], atol=1e-6)
    np.testing.assert_allclose(top_h_BxH[:, H // 2 :], enc_BxSxH[:, 0, H // 2 :], atol=1e-6)
  else:
    np.testing.assert_allclose(top_h_BxH, last_BxH, atol=1e-6)


def test_bidirectional_backward_half_reads_right_to_left():
  # Changing the last real token changes every backward output but only the last forward one.
  encoder = RNNEncoder(make_config(encoder_layers=1), V)
  variables = encoder.init(jax.random.key(1), SRC, train=False)
  apply = jax.jit(lambda src: encoder.apply(variables, src, train=False)[0])
  changed = SRC.copy()
  changed[0, 4] = 9
  diff_SxH = np.abs(np.asarray(apply(changed)[0]) - np.asarray(apply(SRC)[0]))
  assert np.all(diff_SxH[:4, : H // 2] == 0.0)
  assert np.all(diff_SxH[:, H // 2 :].max(axis=-1) > 1e-6)


@pytest.mark.slow
def test_dropout_only_in_training():
  encoder = RNNEncoder(make_config(dropout=0.5), V)
  variables = encoder.init(jax.random.key(0), SRC, train=False)
  run_train = jax.jit(
    lambda key: encoder.apply(variables, SRC, train=True, rngs={'dropout': jax.random.key(key)})[0]
  )
  run_eval = jax.jit(lambda: encoder.apply(variables, SRC, train=False)[0])
  run = lambda train, key: run_train(key) if train else run_eval()
  np.testing.assert_array_equal(run(False, 1), run(False, 2))
  np.testing.assert_array_equal(run(True, 1), run(True, 1))
  assert not np.allclose(run(True, 1), run(False, 1))
  assert not np.allclose(run(True, 1), run(True, 2))


@functools.cache
def encoder_final_states(cell):
  encoder = RNNEncoder(make_config(cell=cell), V)
  enc_vars = encoder.init(jax.random.key(0), SRC, train=False)
  return encoder.apply(enc_vars, SRC, train=False)[1]


@pytest.mark.parametrize('cell', recurrent.CELLS)
@pytest.mark.parametrize('bridge', encoder.BRIDGES)
def test_bridge(cell, bridge):
  config = make_config(cell=cell, bridge=bridge, decoder_layers=3)
  finals = encoder_final_states(cell)
  bridge_module = Bridge(config)
  bridge_vars = bridge_module.init(jax.random.key(3), finals)
  init_states = bridge_module.apply(bridge_vars, finals)
  assert isinstance(init_states, tuple) and len(init_states) == 3
  for layer, state in enumerate(init_states):
    # Decoder layer l reads encoder layer min(l, 1) (2 encoder layers).
    source = finals[min(layer, 1)]
    if cell == 'lstm':
      assert isinstance(state, tuple) and len(state) == 2
    else:
      assert isinstance(state, jax.Array)
    parts = ('c', 'h') if cell == 'lstm' else ('h',)
    leaves = zip(parts, jax.tree.leaves(state), jax.tree.leaves(source), strict=True)
    for part, leaf, src_leaf in leaves:
      assert leaf.shape == (3, H) and leaf.dtype == jnp.float32
      if bridge == 'zero':
        np.testing.assert_array_equal(leaf, 0.0)
      elif bridge == 'copy':
        np.testing.assert_array_equal(leaf, src_leaf)
      else:
        kernel_HxH = np.asarray(bridge_vars['params'][f'{part}_{layer}']['kernel'])
        np.testing.assert_allclose(leaf, np.tanh(np.asarray(src_leaf) @ kernel_HxH), atol=1e-6)
  if bridge == 'dense':
    expected = {f'{p}_{layer}' for p in ('ch' if cell == 'lstm' else 'h') for layer in range(3)}
    assert set(bridge_vars['params']) == expected
  else:
    assert 'params' not in bridge_vars or not bridge_vars['params']


@pytest.mark.parametrize('key, registry', [('cell', recurrent.CELLS), ('bridge', encoder.BRIDGES)])
def test_config_validation_accepts_exactly_the_registry(key, registry):
  for value in registry:
    assert getattr(make_config(**{key: value}), key) == value
  with pytest.raises(ConfigError) as info:
    make_config(**{key: 'bogus'})
  listed = ', '.join(sorted(registry))
  assert str(info.value) == f"model.{key}='bogus' is not valid; choose from {listed}"
