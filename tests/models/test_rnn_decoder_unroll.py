"""The RNN decoder's unrolls agree: the nn.scan training unroll with a Python loop of
`decode_step` for every timing, both local windows and multi-head attention, and Luong's
whole-sequence path with the step scan in values and gradients. Beside them, what the paths
keep: head weights sown, dropout only in training, float32 logits and carry under bfloat16, and
location slots past the source masked.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from support.rnn_decoder import CASES, SRC, TGT_IN, PAD_BxS, V, build, make_config

from attnlab.models import decoder


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
