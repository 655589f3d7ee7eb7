"""The attentional RNN decoder against a NumPy reference written from docs/design.md, Attention.

The reference re-derives two decoder steps from the module's parameters only (its own LSTM /
GRU gate equations in flax's parameter layout, its own scores, masked softmax and readout), so
a wrong timing, query, input feeding or readout shows up as a mismatch. The nn.scan training
unroll is checked against a Python loop of `decode_step` for every timing, both local windows
and multi-head attention.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import model_config

from attnlab.config.fields import ConfigError
from attnlab.config.model import ModelConfig
from attnlab.models import decoder
from attnlab.models.seq2seq import Seq2Seq

H, E, V = 8, 6, 11
# Source rows of lengths 5, 3, 2 (PAD_ID=0 after them); targets start with BOS_ID=1.
SRC = np.array([[4, 5, 6, 7, 2], [8, 9, 2, 0, 0], [5, 2, 0, 0, 0]], np.int32)
TGT_IN = np.array([[1, 6, 7, 8], [1, 9, 10, 0], [1, 4, 0, 0]], np.int32)
PAD_BxS = SRC == 0


def make_config(cell='lstm', decoder_layers=1, dropout=0.0, dtype='float32', bridge='dense',
                **attention):
  return model_config(
    hidden_size=H,
    embed_dim=E,
    encoder_layers=1,
    decoder_layers=decoder_layers,
    dropout=dropout,
    dtype=dtype,
    cell=cell,
    bridge=bridge,
    attention=attention,
  )


@functools.cache
def build(config: ModelConfig):
  """Model, params and jitted teacher-forced / encode / step functions for one config."""
  model = Seq2Seq(config, V, V)
  variables = model.init(jax.random.key(0), SRC, TGT_IN)

  @jax.jit
  def forward(src, tgt_in):
    logits, state = model.apply(variables, src, tgt_in, mutable=['intermediates'])
    return logits, state['intermediates']['cross_attention'][0]

  encode = jax.jit(lambda src: model.apply(variables, src, method='encode'))
  init_carry = jax.jit(lambda memory: model.apply(variables, memory, 0, method='init_decode_carry'))
  step = jax.jit(
    lambda memory, tokens, carry: model.apply(
      variables, memory, tokens, carry, method='decode_step'
    )
  )
  return model, variables, forward, encode, init_carry, step


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


CASES = {
  'bahdanau_concat_lstm': make_config(timing='bahdanau', score='concat', input_feeding=False),
  'bahdanau_general_gru': make_config(
    cell='gru', timing='bahdanau', score='general', input_feeding=False
  ),
  # dropout only acts with train=True (test_dropout_active_only_in_training); eval is exact.
  'luong_feed_general_lstm_2layers': make_config(decoder_layers=2, score='general', dropout=0.3),
  'luong_nofeed_concat_gru': make_config(cell='gru', score='concat', input_feeding=False),
  'none_lstm': make_config(timing='none', input_feeding=False),
  'fixed_lstm': make_config(timing='fixed', input_feeding=False, bridge='copy'),
  'fixed_gru_2layers': make_config(cell='gru', decoder_layers=2, timing='fixed',
                                   input_feeding=False, bridge='copy'),
  'local_m': make_config(window='local_m', window_radius=1, score='dot'),
  'local_p': make_config(window='local_p', window_radius=1, score='location', max_source_length=7),
  'heads2': make_config(num_heads=2, score='scaled_dot'),
}
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


@pytest.mark.slow
@pytest.mark.parametrize('case', list(CASES))
def test_scan_unroll_equals_decode_step_loop(case):
  config = CASES[case]
  _, _, forward, encode, init_carry, step = build(config)
  logits_BxTxV, weights_BxTxS = forward(SRC, TGT_IN)
  memory = encode(SRC)
  jax.tree.map(lambda leaf: np.testing.assert_equal(leaf.shape[0], 3), memory)
  carry = init_carry(memory)
  for t in range(TGT_IN.shape[1]):
    jax.tree.map(lambda leaf: np.testing.assert_equal(leaf.shape[0], 3), carry)
    logits_BxV, weights_BxS, carry = step(memory, TGT_IN[:, t], carry)
    np.testing.assert_allclose(logits_BxV, logits_BxTxV[:, t], atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(weights_BxS, weights_BxTxS[:, t], atol=1e-6)
  weights = np.asarray(weights_BxTxS)
  if not config.attention.attends:
    np.testing.assert_array_equal(weights, 0.0)
    return
  # Padded source positions get exactly zero attention.
  assert np.all(weights[np.broadcast_to(PAD_BxS[:, None, :], weights.shape)] == 0.0)
  if config.attention.window == 'global':
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, atol=1e-5)
  if config.attention.window == 'local_m':
    # p_t = t with D = 1: step t only sees source positions t-1..t+1.
    t_T, i_S = np.arange(weights.shape[1]), np.arange(weights.shape[2])
    outside_TxS = np.abs(i_S[None, :] - t_T[:, None]) > 1
    assert np.all(weights[:, outside_TxS] == 0.0)
    # Row 0 has no padding: every slot inside its windows gets some weight.
    assert np.all(weights[0][~outside_TxS] > 0.0)


def test_multi_head_weights_are_the_mean_of_the_sown_head_weights():
  model, variables, _, encode, init_carry, _ = build(CASES['heads2'])
  memory = encode(SRC)
  (_, weights_BxS, _), state = model.apply(
    variables,
    memory,
    TGT_IN[:, 0],
    init_carry(memory),
    method='decode_step',
    mutable=['intermediates'],
  )
  (heads_BxNx1xS,) = state['intermediates']['decoder']['mha']['attention_weights']
  assert heads_BxNx1xS.shape == (3, 2, 1, 5)
  np.testing.assert_allclose(weights_BxS, heads_BxNx1xS.mean(axis=1)[:, 0], atol=1e-6)


@pytest.mark.slow
def test_dropout_active_only_in_training():
  model, variables, forward, _, _, _ = build(CASES['luong_feed_general_lstm_2layers'])
  run = jax.jit(lambda key: model.apply(variables, SRC, TGT_IN, train=True, rngs={'dropout': key}))
  eval_logits = forward(SRC, TGT_IN)[0]
  train_a, train_b = run(jax.random.key(1)), run(jax.random.key(2))
  np.testing.assert_array_equal(train_a, run(jax.random.key(1)))
  assert not np.allclose(train_a, eval_logits, atol=1e-4)
  assert not np.allclose(train_a, train_b, atol=1e-4)


@pytest.mark.slow
def test_bfloat16_compute_keeps_float32_logits_and_carry():
  config = make_config(dtype='bfloat16')
  _, _, forward, encode, init_carry, step = build(config)
  logits_BxTxV, _ = forward(SRC, TGT_IN)
  assert logits_BxTxV.dtype == jnp.float32 and np.all(np.isfinite(logits_BxTxV))
  memory = encode(SRC)
  _, _, carry = step(memory, TGT_IN[:, 0], init_carry(memory))
  assert all(leaf.dtype in (jnp.float32, jnp.int32) for leaf in jax.tree.leaves(carry))


@pytest.mark.slow
def test_location_score_on_a_batch_wider_than_its_slots():
  # SRC is 5 wide, the location score has 3 slots: positions 3-4 (row 0's real tokens 4 and
  # EOS among them) get exactly zero weight. With local_m (D = 1) step 4's window 3..5 holds no
  # addressable key: an all-zero row, not a uniform one over unaddressable positions.
  tgt_in_Bx5 = np.concatenate([TGT_IN, TGT_IN[:, -1:]], axis=1)
  for window in ('global', 'local_m'):
    config = make_config(score='location', max_source_length=3, window=window, window_radius=1)
    _, _, forward, *_ = build(config)
    logits_BxTxV, weights_BxTxS = forward(SRC, tgt_in_Bx5)
    weights = np.asarray(weights_BxTxS)
    assert np.all(np.isfinite(logits_BxTxV))
    assert np.all(weights[..., 3:] == 0.0)
    if window == 'global':
      np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    else:
      assert np.all(weights[:, 4] == 0.0) and np.all(weights[0, 3, 2] == 1.0)


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


WHOLE_SEQUENCE_CASES = {
  'luong_general_lstm_2layers': make_config(decoder_layers=2, input_feeding=False),
  'luong_concat_gru': make_config(cell='gru', score='concat', input_feeding=False),
  'luong_local_m': make_config(window='local_m', window_radius=1, score='dot',
                               input_feeding=False),
  'luong_local_p': make_config(window='local_p', window_radius=1, score='location',
                               max_source_length=7, input_feeding=False),
  'luong_heads2': make_config(num_heads=2, score='scaled_dot', input_feeding=False),
  'none_gru_2layers': make_config(cell='gru', decoder_layers=2, timing='none',
                                  input_feeding=False),
  'fixed_lstm_2layers': make_config(decoder_layers=2, timing='fixed', input_feeding=False),
}


@pytest.mark.slow
@pytest.mark.parametrize('case', list(WHOLE_SEQUENCE_CASES))
def test_whole_sequence_equals_the_step_scan_in_values_and_gradients(case):
  # Luong without input feeding: RNN over all steps, then attention for all T at once, must be
  # the step path exactly: logits, weights (source padding, windows, heads), final carry and
  # every parameter's gradient.
  config = WHOLE_SEQUENCE_CASES[case]
  assert not decoder.rnn_reads_attention(config)  # so `unroll` takes whole_sequence
  model, variables, *_ = build(config)

  def run(params, path):
    def fn(module, src, tgt_in):
      memory = module.encode(src)
      carry = module.init_decode_carry(memory, tgt_in.shape[1])
      if path == 'whole':
        return module.decoder.whole_sequence(carry, tgt_in, memory, train=False)
      return decoder.unroll_steps(module.decoder, carry, tgt_in, memory, train=False)

    return model.apply({'params': params}, SRC, TGT_IN, method=fn)

  probe_logits = jax.random.normal(jax.random.key(7), (3, 4, V))
  probe_attn = jax.random.normal(jax.random.key(8), (3, 4, SRC.shape[1]))

  def loss(params, path):
    carry, logits, attn = run(params, path)
    top = decoder.top_hidden(carry['states'][-1])
    return jnp.sum(logits * probe_logits) + jnp.sum(attn * probe_attn) + jnp.sum(top**2)

  params = variables['params']
  whole, steps = run(params, 'whole'), run(params, 'steps')
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5), whole, steps)
  if config.attention.window == 'local_m':  # step t sees t-1..t+1 only
    outside_TxS = np.abs(np.arange(5)[None, :] - np.arange(4)[:, None]) > 1
    assert np.all(np.asarray(whole[2])[:, outside_TxS] == 0.0)
  assert np.all(np.asarray(whole[2])[np.broadcast_to(PAD_BxS[:, None, :], (3, 4, 5))] == 0.0)
  grad_whole = jax.grad(loss)(params, 'whole')
  grad_steps = jax.grad(loss)(params, 'steps')
  flat_whole = jax.tree_util.tree_leaves_with_path(grad_whole)
  assert len(flat_whole) == len(jax.tree.leaves(grad_steps))
  for (path, g_whole), g_steps in zip(flat_whole, jax.tree.leaves(grad_steps), strict=True):
    np.testing.assert_allclose(g_whole, g_steps, atol=1e-5, rtol=1e-4,
                               err_msg=jax.tree_util.keystr(path))
  assert any(np.any(np.asarray(g) != 0) for g in jax.tree.leaves(grad_whole['decoder']))


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
