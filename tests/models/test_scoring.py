"""The score registry against NumPy formulas written from docs/design.md, Attention."""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.ad_checkpoint import print_saved_residuals
from support import REPO
from support.config_builders import model_config

from attnlab.config.fields import ConfigError
from attnlab.models import attention, scoring

B, T, S, H = 2, 3, 5, 6
MAX_S = 7


def _inputs():
  kq, kh = jax.random.split(jax.random.key(0))
  return jax.random.normal(kq, (B, T, H)), jax.random.normal(kh, (B, S, H))


def _full(module, q_BxTxH, enc_BxSxH):
  return module(q_BxTxH, module.project_keys(enc_BxSxH))


def _init(name, dtype=jnp.float32):
  score = scoring.make_score(name, hidden_size=H, max_source_length=MAX_S, dtype=dtype)
  q, enc = _inputs()
  variables = score.init(jax.random.key(1), q, enc, method=_full)
  return score, variables, q, enc


def _reference(name, params, q, enc):
  q, enc = np.asarray(q, np.float64), np.asarray(enc, np.float64)
  kernel = lambda k: np.asarray(params[k]['kernel'], np.float64)
  if name == 'dot':
    return np.einsum('bth,bsh->bts', q, enc)
  if name == 'scaled_dot':
    return np.einsum('bth,bsh->bts', q, enc) / np.sqrt(H)
  if name == 'general':  # q^T W_a h with linen's x @ kernel convention: W_a h = h @ kernel.
    return np.einsum('bth,bsh->bts', q, enc @ kernel('w_a'))
  if name == 'concat':
    hidden = np.tanh((q @ kernel('w_q'))[:, :, None, :] + (enc @ kernel('w_k'))[:, None, :, :])
    return (hidden @ kernel('v'))[..., 0]
  if name == 'location':
    return (q @ kernel('w_a'))[:, :, :S]
  raise AssertionError(name)


@pytest.mark.parametrize('name', sorted(scoring.SCORES))
def test_score_matches_numpy_formula(name):
  score, variables, q, enc = _init(name)
  got = score.apply(variables, q, enc, method=_full)
  assert got.shape == (B, T, S) and got.dtype == jnp.float32
  want = _reference(name, variables.get('params', {}), q, enc)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


PARAM_SHAPES = {
  'dot': {},
  'scaled_dot': {},
  'general': {'w_a': (H, H)},
  'concat': {'w_q': (H, H), 'w_k': (H, H), 'v': (H, 1)},
  'location': {'w_a': (H, MAX_S)},
}


@pytest.mark.parametrize('name', sorted(scoring.SCORES))
def test_parameters_are_the_formula_matrices_without_bias(name):
  _, variables, _, _ = _init(name)
  params = variables.get('params', {})
  assert {k: v['kernel'].shape for k, v in params.items()} == PARAM_SHAPES[name]
  assert all(set(v) == {'kernel'} for v in params.values())


@pytest.mark.parametrize('name', sorted(scoring.SCORES))
def test_keys_projected_once_are_reused_step_by_step(name):
  score, variables, q, enc = _init(name)
  keys = score.apply(variables, enc, method='project_keys')
  steps = [score.apply(variables, q[:, t : t + 1], keys) for t in range(T)]
  want = _reference(name, variables.get('params', {}), q, enc)
  np.testing.assert_allclose(np.concatenate(steps, axis=1), want, rtol=1e-5, atol=1e-5)


def test_concat_bias_adds_b_q_inside_the_tanh():
  # OpenNMT-py / Sockeye MLP attention: e_ti = v^T tanh(W_q q_t + b_q + W_k h_i).
  score = scoring.make_score('concat', hidden_size=H, concat_bias=True)
  q, enc = _inputs()
  variables = score.init(jax.random.key(1), q, enc, method=_full)
  params = jax.tree.map(lambda a: np.asarray(a, np.float64), variables['params'])
  assert {k: set(v) for k, v in params.items()} == {
    'w_q': {'kernel', 'bias'}, 'w_k': {'kernel'}, 'v': {'kernel'}
  }
  b_q = np.linspace(-1.0, 1.0, H)  # a non-zero bias (it starts at zero)
  variables = {'params': {**variables['params'], 'w_q': {**variables['params']['w_q'],
                                                         'bias': jnp.asarray(b_q)}}}
  got = score.apply(variables, q, enc, method=_full)
  q64, enc64 = np.asarray(q, np.float64), np.asarray(enc, np.float64)
  want = np.zeros((B, T, S))
  for b in range(B):
    for t in range(T):
      for i in range(S):
        hidden = np.tanh(params['w_q']['kernel'].T @ q64[b, t] + b_q
                         + params['w_k']['kernel'].T @ enc64[b, i])
        want[b, t, i] = params['v']['kernel'][:, 0] @ hidden
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  without = {'params': {**variables['params'], 'w_q': {'kernel': variables['params']['w_q']
                                                                 ['kernel']}}}
  plain = scoring.make_score('concat', hidden_size=H).apply(without, q, enc, method=_full)
  assert not np.allclose(got, plain, atol=1e-3)  # the bias matters
  with pytest.raises(ValueError, match='concat_bias applies to the concat score only'):
    scoring.make_score('general', hidden_size=H, concat_bias=True)


def test_general_and_concat_keys_are_the_projection():
  for name, param in (('general', 'w_a'), ('concat', 'w_k')):
    score, variables, _, enc = _init(name)
    keys = score.apply(variables, enc, method='project_keys')
    want = np.asarray(enc, np.float64) @ np.asarray(variables['params'][param]['kernel'])
    np.testing.assert_allclose(keys, want, rtol=1e-5, atol=1e-5)


def test_concat_gradients_match_the_hand_derived_formula():
  # e = v^T tanh(a), a_btsk = (q W_q)_btk + keys_bsk. With u = g * (1 - tanh(a)^2) * v
  # (g = dL/de): dL/dkeys = sum_t u, dL/dW_q = q^T sum_s u, dL/dv = sum g tanh(a).
  score, variables, q, enc = _init('concat')
  keys = score.apply(variables, enc, method='project_keys')
  g = np.asarray(jax.random.normal(jax.random.key(2), (B, T, S)), np.float64)
  loss = lambda p, k: jnp.sum(score.apply({'params': p}, q, k) * g)
  d_params, d_keys = jax.grad(loss, argnums=(0, 1))(variables['params'], keys)
  params = jax.tree.map(lambda a: np.asarray(a, np.float64), variables['params'])
  q64, keys64 = np.asarray(q, np.float64), np.asarray(keys, np.float64)
  hidden = np.tanh((q64 @ params['w_q']['kernel'])[:, :, None, :] + keys64[:, None, :, :])
  u = g[..., None] * (1 - hidden**2) * params['v']['kernel'][:, 0]
  np.testing.assert_allclose(d_keys, u.sum(axis=1), rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(
    d_params['w_q']['kernel'], np.einsum('bth,btk->hk', q64, u.sum(axis=2)), rtol=1e-4, atol=1e-5
  )
  np.testing.assert_allclose(
    d_params['v']['kernel'][:, 0], np.einsum('bts,btsk->k', g, hidden), rtol=1e-4, atol=1e-5
  )


def test_concat_backward_recomputes_the_tanh_instead_of_storing_it(capsys):
  # The B x T x S x K tanh is a step's largest residual; stored, the backward pass is
  # memory-bound (scoring.ConcatScore._energies). The same formula written inline stores it,
  # which shows that the check sees such a residual.
  score, variables, q, enc = _init('concat')
  keys = score.apply(variables, enc, method='project_keys')
  inline = lambda mdl, q, k: mdl.v(jnp.tanh(mdl.w_q(q)[:, :, None, :] + k[:, None, :, :]))[..., 0]
  stored = f'f32[{B},{T},{S},{H}]'
  for method, stores in ((None, False), (inline, True)):
    apply = lambda p, k, method=method: score.apply({'params': p}, q, k, method=method)
    print_saved_residuals(apply, variables['params'], keys)
    assert (stored in capsys.readouterr().out) == stores, method


@pytest.mark.parametrize('name', ['dot', 'scaled_dot'])
def test_parameter_free_scores_keep_the_encoder_outputs_as_keys(name):
  score, variables, _, enc = _init(name)
  np.testing.assert_array_equal(score.apply(variables, enc, method='project_keys'), enc)


@pytest.mark.parametrize('name', sorted(scoring.SCORES))
def test_bfloat16_compute_keeps_float32_params_and_scores(name):
  score, variables, q, enc = _init(name, dtype=jnp.bfloat16)
  assert all(p.dtype == jnp.float32 for p in jax.tree.leaves(variables))
  got = score.apply(variables, q, enc, method=_full)
  assert got.dtype == jnp.float32
  want = _reference(name, variables.get('params', {}), q, enc)
  np.testing.assert_allclose(got, want, rtol=0.05, atol=0.15)


def test_unknown_score_lists_the_choices():
  with pytest.raises(ValueError) as info:
    scoring.make_score('gneral', hidden_size=H)
  listed = ', '.join(sorted(scoring.SCORES))
  assert str(info.value) == f"unknown score 'gneral'; choose from {listed}"


def test_config_validation_accepts_exactly_the_registry():
  # model.attention.score is checked against scoring.SCORES itself, not a copy in config.py.
  for name in scoring.SCORES:
    config = model_config(attention={'score': name, 'max_source_length': MAX_S})
    assert config.attention.score == name
  with pytest.raises(ConfigError) as info:
    model_config(attention={'score': 'gneral'})
  listed = ', '.join(sorted(scoring.SCORES))
  assert str(info.value) == f"model.attention.score='gneral' is not valid; choose from {listed}"


def test_importing_the_config_module_does_not_import_jax():
  # Sweeps and launchers read attnlab.config.run; the registries (and JAX) load on first validation.
  code = 'import sys, attnlab.config.run; assert "jax" not in sys.modules, "jax imported"'
  subprocess.run([sys.executable, '-c', code], check=True, cwd=REPO)


def test_location_masks_positions_beyond_its_slots():
  # An eval batch wider than max_source_length: slots 0..2 exist, positions 3 and 4 do not.
  # Row 1 has 4 real tokens, so its position 3 is a real token beyond what the score can
  # address; row 0's positions 3-4 are real too. Both get exactly zero weight.
  slots = S - 2
  score = scoring.make_score('location', hidden_size=H, max_source_length=slots)
  q, enc = _inputs()
  variables = score.init(jax.random.key(1), q, enc, method=_full)
  valid_BxS = np.arange(S)[None, :] < np.array([[S], [4]])
  assert score.apply(variables, q, enc, method=_full).shape == (B, T, S)
  np.testing.assert_array_equal(score.addressable_keys(S), np.arange(S) < slots)

  def step(module, q, enc, mask):
    return attention.attention_step(module, None, q, module.project_keys(enc), enc, mask)

  context, weights = score.apply(variables, q, enc, jnp.asarray(valid_BxS), method=step)
  # By hand: softmax of (q W_a) over the 3 slots (all real in both rows), zeros after them.
  e = np.asarray(q, np.float64) @ np.asarray(variables['params']['w_a']['kernel'], np.float64)
  a = np.exp(e - e.max(-1, keepdims=True))
  want = np.concatenate([a / a.sum(-1, keepdims=True), np.zeros((B, T, S - slots))], axis=-1)
  np.testing.assert_allclose(weights, want, rtol=1e-5, atol=1e-6)
  assert np.all(np.asarray(weights)[..., slots:] == 0.0)
  np.testing.assert_allclose(context, want @ np.asarray(enc, np.float64), rtol=1e-5, atol=1e-5)


def test_location_needs_a_maximum_length():
  with pytest.raises(ValueError, match='max_source_length > 0'):
    scoring.make_score('location', hidden_size=H)


def test_module_name_is_passed_through():
  score = scoring.make_score('general', hidden_size=H, name_='attn_score')
  assert score.name == 'attn_score'
