"""The score registry against NumPy formulas written from DESIGN.md section 1."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlab.models import scoring

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


@pytest.mark.parametrize(
  'name, param_shapes',
  [
    ('dot', {}),
    ('scaled_dot', {}),
    ('general', {'w_a': (H, H)}),
    ('concat', {'w_q': (H, H), 'w_k': (H, H), 'v': (H, 1)}),
    ('location', {'w_a': (H, MAX_S)}),
  ],
)
def test_parameters_are_the_formula_matrices_without_bias(name, param_shapes):
  _, variables, _, _ = _init(name)
  params = variables.get('params', {})
  assert {k: v['kernel'].shape for k, v in params.items()} == param_shapes
  assert all(set(v) == {'kernel'} for v in params.values())


@pytest.mark.parametrize('name', sorted(scoring.SCORES))
def test_keys_projected_once_are_reused_step_by_step(name):
  score, variables, q, enc = _init(name)
  keys = score.apply(variables, enc, method='project_keys')
  steps = [score.apply(variables, q[:, t : t + 1], keys) for t in range(T)]
  want = _reference(name, variables.get('params', {}), q, enc)
  np.testing.assert_allclose(np.concatenate(steps, axis=1), want, rtol=1e-5, atol=1e-5)


def test_general_and_concat_keys_are_the_projection():
  for name, param in (('general', 'w_a'), ('concat', 'w_k')):
    score, variables, _, enc = _init(name)
    keys = score.apply(variables, enc, method='project_keys')
    want = np.asarray(enc, np.float64) @ np.asarray(variables['params'][param]['kernel'])
    np.testing.assert_allclose(keys, want, rtol=1e-5, atol=1e-5)


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
  assert str(info.value) == (
    "unknown score 'gneral'; choose from concat, dot, general, location, scaled_dot"
  )


def test_location_rejects_sources_longer_than_its_slots():
  score = scoring.make_score('location', hidden_size=H, max_source_length=S - 1)
  q, enc = _inputs()
  with pytest.raises(ValueError, match=r'max_source_length.*S=5'):
    score.init(jax.random.key(0), q, enc, method=_full)


def test_location_needs_a_maximum_length():
  with pytest.raises(ValueError, match='max_source_length > 0'):
    scoring.make_score('location', hidden_size=H)


def test_module_name_is_passed_through():
  score = scoring.make_score('general', hidden_size=H, name_='attn_score')
  assert score.name == 'attn_score'
