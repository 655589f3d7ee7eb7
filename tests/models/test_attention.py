"""attend, Luong local windows and MultiHeadAttention against NumPy and independent code."""

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from support.config_builders import model_config

from attnlab.config.fields import ConfigError
from attnlab.models import attention, scoring

B, T, S, H, N = 2, 4, 6, 8, 2


def _normal(seed, shape):
  return jax.random.normal(jax.random.key(seed), shape)


def _np_softmax(x, mask):
  x = np.where(mask, x, -np.inf)
  peak = np.max(np.where(mask, x, -1e300), axis=-1, keepdims=True)
  e = np.where(mask, np.exp(x - peak), 0.0)
  total = e.sum(-1, keepdims=True)
  return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


# ---- attend ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_attend_matches_numpy_with_head_axis_and_mask():
  scores = _normal(0, (B, N, T, S))
  values = _normal(1, (B, N, S, H))
  mask = np.asarray(_normal(2, (B, 1, T, S))) > -0.3
  context, weights = attention.attend(scores, jnp.asarray(mask), values)
  want = _np_softmax(np.asarray(scores, np.float64), mask)
  np.testing.assert_allclose(weights, want, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(context, want @ np.asarray(values, np.float64), rtol=1e-5, atol=1e-5)


def test_attend_without_mask_is_plain_softmax():
  scores, values = _normal(0, (B, T, S)), _normal(1, (B, S, H))
  context, weights = attention.attend(scores, None, values)
  want = _np_softmax(np.asarray(scores, np.float64), np.ones((B, T, S), bool))
  np.testing.assert_allclose(weights, want, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(context, want @ np.asarray(values), rtol=1e-5, atol=1e-5)


def test_masked_keys_get_exactly_zero_weight_even_with_huge_scores():
  scores = _normal(0, (B, T, S)).at[:, :, -2:].set(1e30)
  mask = jnp.broadcast_to(jnp.arange(S)[None, None, :] < S - 2, (B, T, S))
  _, weights = attention.attend(scores, mask, _normal(1, (B, S, H)))
  assert np.all(np.asarray(weights)[:, :, -2:] == 0.0)
  np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-6)


def test_all_masked_rows_give_zero_context_and_finite_gradients():
  mask = jnp.ones((B, T, S), bool).at[0, 1, :].set(False).at[1].set(False)
  scores, values = _normal(0, (B, T, S)), _normal(1, (B, S, H))
  context, weights = attention.attend(scores, mask, values)
  assert np.all(np.asarray(weights)[0, 1] == 0.0) and np.all(np.asarray(weights)[1] == 0.0)
  assert np.all(np.asarray(context)[0, 1] == 0.0) and np.all(np.asarray(context)[1] == 0.0)
  loss = lambda s, v: jnp.sum(jnp.sin(attention.attend(s, mask, v)[0]))
  grad_s, grad_v = jax.grad(loss, argnums=(0, 1))(scores, values)
  assert np.all(np.isfinite(grad_s)) and np.all(np.isfinite(grad_v))
  assert np.all(np.asarray(grad_s)[1] == 0.0) and np.all(np.asarray(grad_v)[1] == 0.0)
  assert np.any(np.asarray(grad_s)[0] != 0.0)


def test_attend_rejects_a_mask_of_another_rank():
  with pytest.raises(ValueError, match='rank'):
    attention.attend(_normal(0, (B, T, S)), jnp.ones((B, S), bool), _normal(1, (B, S, H)))


# ---- Luong local windows ---------------------------------------------------------------------


class _Luong(nn.Module):
  """A decoder's use of attention_step: dot score + window over the encoder outputs."""

  window: str
  radius: int = 2

  @nn.compact
  def __call__(self, q_BxTxH, enc_BxSxH, mask_BxS, positions_T):
    score = scoring.make_score('dot', hidden_size=H)
    window = attention.LocalWindow(self.window, self.radius, name='window')
    keys_BxSxH = score.project_keys(enc_BxSxH)
    return attention.attention_step(
      score, window, q_BxTxH, keys_BxSxH, enc_BxSxH, mask_BxS, positions_T=positions_T
    )


def _luong_paper(q, enc, valid, centre, radius, gaussian):
  """Luong et al. 2015 section 3.2, one query at a time with plain Python loops.

  The window is the real source slots s with |s - p_t| <= D (0-based). Eq. 7 over the window:
  align(h_t, h_s) = exp(h_t . h_s) / sum_{s' in window} exp(h_t . h_s'). local-m: a_t = align.
  local-p (eq. 10): a_t(s) = align(h_t, h_s) exp(-(s - p_t)^2 / (2 sigma^2)), sigma = D / 2.
  c_t = sum_s a_t(s) h_s. A window without a real slot gives a_t = 0 and c_t = 0.
  """
  q, enc = np.asarray(q, np.float64), np.asarray(enc, np.float64)
  weights = np.zeros((B, T, S))
  for b in range(B):
    for t in range(T):
      p_t = float(centre[b, t])
      window = [s for s in range(S) if valid[b, s] and abs(s - p_t) <= radius]
      if not window:
        continue
      e = {s: math.exp(float(q[b, t] @ enc[b, s])) for s in window}
      total = sum(e.values())
      for s in window:
        weights[b, t, s] = e[s] / total
        if gaussian:
          weights[b, t, s] *= math.exp(-((s - p_t) ** 2) / (2 * (radius / 2) ** 2))
  return weights @ enc, weights


def _luong_inputs():
  valid = np.arange(S)[None, :] < np.array([[S], [4]])
  return _normal(0, (B, T, H)), _normal(1, (B, S, H)), valid, jnp.arange(T) + 1


def test_local_m_centres_the_window_on_the_decoder_step():
  q, enc, valid, positions = _luong_inputs()
  model = _Luong('local_m')
  variables = model.init(jax.random.key(0), q, enc, jnp.asarray(valid), positions)
  assert not variables  # local-m has no parameters
  context, weights = model.apply(variables, q, enc, jnp.asarray(valid), positions)
  centre = np.broadcast_to(np.asarray(positions, np.float64)[None, :], (B, T))
  want_context, want_weights = _luong_paper(q, enc, valid, centre, radius=2, gaussian=False)
  np.testing.assert_allclose(weights, want_weights, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(context, want_context, rtol=1e-5, atol=1e-5)
  assert np.all(np.asarray(weights)[1, :, 4:] == 0.0)  # padding stays masked inside windows
  # No Gaussian: every window holds a real key here, and its weights sum to 1 (eq. 7).
  np.testing.assert_allclose(np.asarray(weights).sum(-1), 1.0, rtol=1e-6)


@pytest.mark.slow
def test_local_p_predicts_the_centre_from_the_query():
  q, enc, valid, positions = _luong_inputs()
  model = _Luong('local_p', radius=1)
  variables = model.init(jax.random.key(3), q, enc, jnp.asarray(valid), positions)
  context, weights = model.apply(variables, q, enc, jnp.asarray(valid), positions)
  p = jax.tree.map(lambda x: np.asarray(x, np.float64), variables['params']['window'])
  logit = (np.tanh(np.asarray(q, np.float64) @ p['w_p']['kernel']) @ p['v_p']['kernel'])[..., 0]
  centre = valid.sum(-1)[:, None] / (1 + np.exp(-logit))  # S_b * sigmoid(.)
  want_context, want_weights = _luong_paper(q, enc, valid, centre, radius=1, gaussian=True)
  np.testing.assert_allclose(weights, want_weights, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(context, want_context, rtol=1e-5, atol=1e-5)

  # W_p learns only through the Gaussian: its gradient must reach the predictor.
  def loss(params):
    out, _ = model.apply({'params': params}, q, enc, jnp.asarray(valid), positions)
    return jnp.sum(out**2)

  grads = jax.grad(loss)(variables['params'])
  assert np.any(np.asarray(grads['window']['w_p']['kernel']) != 0.0)


def test_local_m_window_past_the_source_gives_zero_context():
  q, enc, valid, _ = _luong_inputs()
  positions = jnp.array([0, 1, 7, 9])  # example 1 has 4 real keys: steps 7, 9 see none
  model = _Luong('local_m', radius=2)
  context, weights = model.apply({}, q, enc, jnp.asarray(valid), positions)
  assert np.all(np.asarray(weights)[1, 2:] == 0.0) and np.all(np.asarray(context)[1, 2:] == 0.0)
  assert np.all(np.isfinite(context))


def test_global_window_is_plain_attend():
  q, enc, valid, positions = _luong_inputs()
  context, weights = _Luong('global').apply({}, q, enc, jnp.asarray(valid), positions)
  scores = jnp.einsum('bth,bsh->bts', q, enc)
  mask = jnp.broadcast_to(jnp.asarray(valid)[:, None, :], (B, T, S))
  want_context, want_weights = attention.attend(scores, mask, enc)
  np.testing.assert_allclose(weights, want_weights, rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(context, want_context, rtol=1e-6, atol=1e-6)


def test_config_validation_accepts_exactly_the_window_registry():
  for window in attention.WINDOWS:
    assert model_config(attention={'window': window}).attention.window == window
  with pytest.raises(ConfigError) as info:
    model_config(attention={'window': 'local'})
  listed = ', '.join(sorted(attention.WINDOWS))
  assert str(info.value) == f"model.attention.window='local' is not valid; choose from {listed}"


def test_unknown_window_lists_the_choices():
  with pytest.raises(ValueError, match="unknown window 'local'; choose from global, local_m"):
    attention.LocalWindow('local', 3)


# ---- MultiHeadAttention ----------------------------------------------------------------------


def _mha(num_heads=N):
  mha = attention.MultiHeadAttention(num_heads=num_heads, hidden_size=H)
  x, y = _normal(0, (B, T, H)), _normal(1, (B, S, H))
  return mha, mha.init(jax.random.key(2), x, y), x, y


def _key_valid():
  return jnp.arange(S)[None, :] < jnp.array([[S], [3]])


def test_masks_have_the_documented_shapes_and_values():
  np.testing.assert_array_equal(attention.causal_mask(3)[0, 0], np.tril(np.ones((3, 3), bool)))
  q_valid = jnp.array([[1, 1, 0, 0], [1, 1, 1, 1]])
  both = attention.padding_mask(q_valid, _key_valid())
  assert both.shape == (B, 1, T, S)
  np.testing.assert_array_equal(both[0, 0, 2], np.zeros(S, bool))
  np.testing.assert_array_equal(both[1, 0, 0], np.arange(S) < 3)
  assert attention.padding_mask(None, _key_valid()).shape == (B, 1, 1, S)
  assert attention.combine_masks(None, None) is None


@pytest.mark.parametrize('masked', [False, True])
def test_mha_equals_flax_multi_head_dot_product_attention(masked):
  mha, variables, x, y = _mha()
  reference = nn.MultiHeadDotProductAttention(num_heads=N, qkv_features=H)
  reference_variables = reference.init(jax.random.key(9), x, y)
  assert jax.tree.map(jnp.shape, variables) == jax.tree.map(jnp.shape, reference_variables)
  mask = attention.padding_mask(None, _key_valid()) if masked else None
  np.testing.assert_allclose(
    mha.apply(variables, x, y, mask),
    reference.apply(variables, x, y, mask=mask),
    rtol=1e-5,
    atol=1e-5,
  )


def test_mha_equals_jax_dot_product_attention_on_projected_qkv():
  mha, variables, x, y = _mha()
  mask = attention.combine_masks(attention.padding_mask(None, _key_valid()))
  q = mha.apply(variables, x, method=lambda m, x: m.query(x))
  k, v = mha.apply(variables, y, method='project_kv')
  assert k.shape == v.shape == (B, N, S, H // N)  # heads-major
  seq_major = lambda a: a.transpose(0, 2, 1, 3)  # jax.nn.dot_product_attention's BxSxNxD
  context = jax.nn.dot_product_attention(q, seq_major(k), seq_major(v), mask=mask)
  want = mha.apply(variables, context, method=lambda m, c: m.out(c))
  np.testing.assert_allclose(mha.apply(variables, x, y, mask), want, rtol=1e-5, atol=1e-5)


def test_one_head_equals_the_single_head_path():
  mha, variables, x, y = _mha(num_heads=1)
  mask = attention.padding_mask(None, _key_valid())
  q = mha.apply(variables, x, method=lambda m, x: m.query(x))[:, :, 0, :]
  k, v = (a[:, 0] for a in mha.apply(variables, y, method='project_kv'))
  score = scoring.make_score('scaled_dot', hidden_size=H)
  context_BxTxH, _ = attention.attend(score.apply({}, q, k), mask[:, 0], v)
  want = mha.apply(variables, context_BxTxH[:, :, None, :], method=lambda m, c: m.out(c))
  np.testing.assert_allclose(mha.apply(variables, x, y, mask), want, rtol=1e-5, atol=1e-5)


def test_causal_self_attention_never_reads_the_future():
  mha, variables, x, _ = _mha()
  x = x[:1]
  mask = attention.causal_mask(T)
  jacobian = jax.jacrev(lambda x: mha.apply(variables, x, x, mask))(x)  # 1xTxH x 1xTxH
  influence_TxT = np.abs(np.asarray(jacobian)).sum(axis=(0, 2, 3, 5))
  assert np.all(influence_TxT[np.triu_indices(T, k=1)] == 0.0)
  assert np.all(influence_TxT[np.tril_indices(T)] > 0.0)


def test_sown_weights_sum_to_one_over_unmasked_keys():
  mha, variables, x, y = _mha()
  mask = attention.padding_mask(None, _key_valid())
  _, state = mha.apply(variables, x, y, mask, mutable=['intermediates'])
  (weights,) = state['intermediates']['attention_weights']
  assert weights.shape == (B, N, T, S)
  np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-6)
  assert np.all(np.asarray(weights)[1, :, :, 3:] == 0.0)
  k, _ = mha.apply(variables, y, method='project_kv')
  direct = mha.apply(variables, x, k, mask, method='attention_weights')
  np.testing.assert_array_equal(direct, weights)


def test_cached_projection_path_equals_call_and_dropout_needs_training():
  mha = attention.MultiHeadAttention(num_heads=N, hidden_size=H, dropout_rate=0.5)
  x, y = _normal(0, (B, T, H)), _normal(1, (B, S, H))
  variables = mha.init(jax.random.key(2), x, y)
  k, v = mha.apply(variables, y, method='project_kv')
  step = mha.apply(variables, x[:, 1:2], k, v, method='attend_projected')
  np.testing.assert_allclose(step, mha.apply(variables, x, y)[:, 1:2], rtol=1e-6, atol=1e-6)
  rngs = {'dropout': jax.random.key(5)}
  dropped = mha.apply(variables, x, y, deterministic=False, rngs=rngs)
  assert not np.allclose(dropped, mha.apply(variables, x, y))


def test_mha_rejects_bad_shapes():
  mha, variables, x, y = _mha()
  with pytest.raises(ValueError, match='rank 4'):
    mha.apply(variables, x, y, jnp.ones((B, S), bool))
  bad = attention.MultiHeadAttention(num_heads=3, hidden_size=H)
  with pytest.raises(ValueError, match='does not divide'):
    bad.init(jax.random.key(0), x, y)


def test_mha_query_without_keys_outputs_the_bias_with_finite_gradients():
  mha, variables, x, y = _mha()
  k_valid = _key_valid().at[1].set(False)  # example 1 may attend to nothing
  mask = attention.padding_mask(None, k_valid)
  out = mha.apply(variables, x, y, mask)
  np.testing.assert_allclose(
    out[1], jnp.broadcast_to(variables['params']['out']['bias'], (T, H)), atol=1e-7
  )
  grads = jax.grad(lambda p: jnp.sum(mha.apply({'params': p}, x, y, mask) ** 2))(
    variables['params']
  )
  assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))


def test_bfloat16_mha_keeps_float32_params_and_weights():
  mha = attention.MultiHeadAttention(num_heads=N, hidden_size=H, dtype=jnp.bfloat16)
  x, y = _normal(0, (B, T, H)), _normal(1, (B, S, H))
  variables = mha.init(jax.random.key(2), x, y)
  assert all(p.dtype == jnp.float32 for p in jax.tree.leaves(variables))
  out, state = mha.apply(variables, x, y, mutable=['intermediates'])
  assert out.dtype == jnp.bfloat16
  assert state['intermediates']['attention_weights'][0].dtype == jnp.float32
  full = mha.clone(dtype=jnp.float32).apply(variables, x, y)
  np.testing.assert_allclose(out.astype(jnp.float32), full, rtol=0.05, atol=0.05)
