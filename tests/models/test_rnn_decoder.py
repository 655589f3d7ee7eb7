"""The attentional RNN decoder against a NumPy reference written from docs/design.md, Attention.

The reference re-derives the decoder's steps from the module's parameters only (its own LSTM /
GRU gate equations in flax's parameter layout, its own scores, masked softmax and readout), so
a wrong timing, query, input feeding or readout shows up as a mismatch. Timing guards that need
no reference, the fixed context, the concat bias and the timing registry are checked beside it;
the unrolls are in test_rnn_decoder_unroll.py.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from support.rnn_decoder import CASES, SRC, TGT_IN, H, build, make_config

from attnlab.config.fields import ConfigError
from attnlab.models import decoder

# ----------------------------------------------------------------------------- NumPy reference


def sigmoid(x):
  return 1.0 / (1.0 + np.exp(-x))


def lstm_step(p, carry, x):
  """flax LSTMCell: input kernels i*, recurrent kernels+biases h*, gates i, f, g, o."""
  c, h = carry
  pre = lambda g: x @ p[f'i{g}']['kernel'] + h @ p[f'h{g}']['kernel'] + p[f'h{g}']['bias']
  i, f, g, o = sigmoid(pre('i')), sigmoid(pre('f')), np.tanh(pre('g')), sigmoid(pre('o'))
  c = f * c + i * g
  return c, o * np.tanh(c)


def gru_step(p, h, x):
  """flax GRUCell: input kernels+biases i*, recurrent kernels h* (bias on hn only)."""
  r = sigmoid(x @ p['ir']['kernel'] + p['ir']['bias'] + h @ p['hr']['kernel'])
  z = sigmoid(x @ p['iz']['kernel'] + p['iz']['bias'] + h @ p['hz']['kernel'])
  n = np.tanh(
    x @ p['in']['kernel'] + p['in']['bias'] + r * (h @ p['hn']['kernel'] + p['hn']['bias'])
  )
  return (1.0 - z) * n + z * h


def score(name, p, q_BxH, enc_BxSxH):
  if name == 'general':  # q^T W_a h
    return np.einsum('bh,bsh->bs', q_BxH, enc_BxSxH @ p['w_a']['kernel'])
  if name == 'concat':  # v^T tanh(W_q q + W_k h)
    hidden = np.tanh((q_BxH @ p['w_q']['kernel'])[:, None, :] + enc_BxSxH @ p['w_k']['kernel'])
    return (hidden @ p['v']['kernel'])[..., 0]
  if name == 'dot':
    return np.einsum('bh,bsh->bs', q_BxH, enc_BxSxH)
  raise AssertionError(name)


def attend(e_BxS, valid_BxS, enc_BxSxH):
  e_BxS = np.where(valid_BxS, e_BxS, -np.inf)
  a_BxS = np.exp(e_BxS - e_BxS.max(axis=-1, keepdims=True))
  a_BxS = a_BxS / a_BxS.sum(axis=-1, keepdims=True)
  return np.einsum('bs,bsh->bh', a_BxS, enc_BxSxH), a_BxS


def reference(config, params, memory, tokens_BxT):
  """Logits BxTxV and weights BxTxS of the decoder, from the docs/design.md formulas."""
  to64 = lambda tree: jax.tree.map(lambda a: np.asarray(a, np.float64), tree)
  p, memory = to64(params['decoder']), to64(memory)
  att = config.attention
  enc_BxSxH, valid_BxS = memory['values'], np.asarray(memory['mask'], bool)
  cell_step = lstm_step if config.cell == 'lstm' else gru_step
  hidden = lambda carry: carry[1] if config.cell == 'lstm' else carry
  states = list(memory['init_states'])
  if att.timing == 'fixed':
    # Cho et al. 2014: c = tanh(V h_N). The copy bridge hands the decoder the encoder's final
    # state as is, so h_N is read from the initial state, not from the model's memory['context'].
    assert config.bridge == 'copy' and config.encoder_layers == 1
    c_fixed = np.tanh(hidden(states[0]) @ p['summary']['kernel'])
  h_tilde = np.zeros((tokens_BxT.shape[0], H))
  logits, weights = [], []

  def rnn(x):
    for layer in range(config.decoder_layers):
      states[layer] = cell_step(p[f'cells_{layer}'], states[layer], x)
      x = hidden(states[layer])
    return x

  for t in range(tokens_BxT.shape[1]):
    emb_BxE = p['embed']['embedding'][tokens_BxT[:, t]]
    if att.timing == 'bahdanau':  # query s_{t-1}, context into the RNN input
      c, a = attend(
        score(att.score, p.get('score'), hidden(states[-1]), enc_BxSxH), valid_BxS, enc_BxSxH
      )
      s = rnn(np.concatenate([emb_BxE, c], axis=-1))
    elif att.timing == 'luong':  # query s_t, h~_{t-1} fed with input feeding
      x = np.concatenate([emb_BxE, h_tilde], axis=-1) if att.input_feeding else emb_BxE
      s = rnn(x)
      c, a = attend(score(att.score, p.get('score'), s, enc_BxSxH), valid_BxS, enc_BxSxH)
    elif att.timing == 'fixed':  # the same c in every step's RNN input and readout
      c, a = c_fixed, np.zeros(valid_BxS.shape)
      s = rnn(np.concatenate([emb_BxE, c], axis=-1))
    else:
      s = rnn(emb_BxE)
      c, a = np.zeros((s.shape[0], 0)), np.zeros(valid_BxS.shape)
    h_tilde = np.tanh(np.concatenate([s, c], axis=-1) @ p['w_c']['kernel'])
    logits.append(h_tilde @ p['w_o']['kernel'] + p['w_o']['bias'])
    weights.append(a)
  return np.stack(logits, axis=1), np.stack(weights, axis=1)


REFERENCE_CASES = [name for name in CASES if not name.startswith(('local', 'heads'))]


@pytest.mark.slow
@pytest.mark.parametrize('case', REFERENCE_CASES)
def test_decoder_steps_match_numpy_reference(case):
  # Every step of T=4 (the first two start from the bridge state and from step 1's carry).
  config = CASES[case]
  _, variables, forward, encode, _, _ = build(config)
  logits_BxTxV, weights_BxTxS = forward(SRC, TGT_IN)
  ref_logits, ref_weights = reference(config, variables['params'], encode(SRC), TGT_IN)
  np.testing.assert_allclose(logits_BxTxV, ref_logits, atol=1e-5, rtol=1e-5)
  np.testing.assert_allclose(weights_BxTxS, ref_weights, atol=1e-5, rtol=1e-5)
  assert logits_BxTxV.dtype == jnp.float32


def test_reference_distinguishes_timings():
  # Guard for the reference itself: the same params (RNN input [emb; H-vector] in both) read
  # with Bahdanau timing instead of Luong + input feeding give different logits.
  config = CASES['luong_feed_general_lstm_2layers']
  _, variables, forward, encode, _, _ = build(config)
  other = make_config(decoder_layers=2, timing='bahdanau', input_feeding=False)
  ref_other, _ = reference(other, variables['params'], encode(SRC), TGT_IN)
  assert not np.allclose(forward(SRC, TGT_IN)[0], ref_other, atol=1e-3)


@pytest.mark.parametrize('score', ['dot', 'general', 'concat'])
@pytest.mark.parametrize('timing, input_feeding', [
  ('bahdanau', False), ('luong', False), ('luong', True),
])
def test_step_t_attention_reads_the_token_fed_at_t_only_under_luong(timing, input_feeding, score):
  # A timing guard that needs no reference: Bahdanau's step t attends with s_{t-1}, before the
  # RNN reads y_{t-1} (the token fed at t), so changing only that token leaves step t's weights
  # as they were; Luong's attends with s_t, which has read it.
  config = make_config(cell='gru', timing=timing, score=score, input_feeding=input_feeding)
  _, _, forward, *_ = build(config)
  t = 2
  other = TGT_IN.copy()
  other[:, t] = [9, 5, 3]  # every row's token at t differs from TGT_IN's [7, 10, 0]
  _, weights_BxTxS = forward(SRC, TGT_IN)
  _, other_BxTxS = forward(SRC, other)
  weights, changed = np.asarray(weights_BxTxS), np.asarray(other_BxTxS)
  np.testing.assert_array_equal(weights[:, :t], changed[:, :t])  # earlier steps never see it
  # Every row's change reaches the attention by step t+1 at the latest, whatever the timing
  # (small, untrained weights: a few 1e-5 apart, well above float32 rounding).
  assert np.all(np.abs(weights[:, t + 1] - changed[:, t + 1]).max(-1) > 1e-5)
  gap_B = np.abs(weights[:, t] - changed[:, t]).max(-1)
  if timing == 'bahdanau':
    assert np.all(gap_B <= 1e-6), gap_B
  else:
    assert np.all(gap_B > 1e-5), gap_B


def test_concat_bias_reaches_the_decoder_score():
  # model.attention.concat_bias gives the decoder's concat score b_q (test_scoring: formula).
  for concat_bias in (False, True):
    config = make_config(timing='bahdanau', score='concat', input_feeding=False,
                         concat_bias=concat_bias)
    _, variables, *_ = build(config)
    w_q = variables['params']['decoder']['score']['w_q']
    assert ('bias' in w_q) == concat_bias


def test_config_validation_accepts_exactly_the_timing_registry():
  for timing in decoder.TIMINGS:
    config = make_config(timing=timing, input_feeding=timing == 'luong')
    assert config.attention.timing == timing
  with pytest.raises(ConfigError) as info:
    make_config(timing='early')
  listed = ', '.join(sorted(decoder.TIMINGS))
  assert str(info.value) == f"model.attention.timing='early' is not valid; choose from {listed}"


def test_fixed_context_carries_the_source_without_a_bridge():
  # timing=fixed reads c = tanh(V h_N) at every step, so even a zero initial state (which
  # config validation refuses for timing=none) leaves the decoder conditioned on the source.
  config = make_config(timing='fixed', input_feeding=False, bridge='zero')
  _, variables, forward, encode, _, _ = build(config)
  memory = encode(SRC)
  assert all(np.all(np.asarray(leaf) == 0) for leaf in jax.tree.leaves(memory['init_states']))
  other_src = SRC.copy()
  other_src[0, :4] = [9, 8, 7, 6]
  logits, _ = forward(SRC, TGT_IN)
  other_logits, _ = forward(other_src, TGT_IN)
  assert not np.allclose(logits[0], other_logits[0], atol=1e-4)
  np.testing.assert_allclose(logits[1:], other_logits[1:], atol=1e-6)  # rows do not mix
  with pytest.raises(ConfigError, match='timing=none with model.bridge=zero'):
    make_config(timing='none', input_feeding=False, bridge='zero')
