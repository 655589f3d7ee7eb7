"""The RNN decoder under test: a small padded batch, configs of every timing, cell, window and
head count, and the jitted functions of a config's model."""

import functools

import jax
import numpy as np

from attnlab.config.model import ModelConfig
from attnlab.models.seq2seq import Seq2Seq
from support.config_builders import model_config

H, E, V = 8, 6, 11
# Source rows of lengths 5, 3, 2 (PAD_ID=0 after them); targets start with BOS_ID=1.
SRC = np.array([[4, 5, 6, 7, 2], [8, 9, 2, 0, 0], [5, 2, 0, 0, 0]], np.int32)
TGT_IN = np.array([[1, 6, 7, 8], [1, 9, 10, 0], [1, 4, 0, 0]], np.int32)
PAD_BxS = SRC == 0


def make_config(
  cell='lstm', decoder_layers=1, dropout=0.0, dtype='float32', bridge='dense', **attention
):
  """The model config of the decoder under test (H units, E-dimensional embeddings, one encoder
  layer); `attention` sets model.attention's keys."""
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


CASES = {
  'bahdanau_concat_lstm': make_config(timing='bahdanau', score='concat', input_feeding=False),
  'bahdanau_general_gru': make_config(
    cell='gru', timing='bahdanau', score='general', input_feeding=False
  ),
  # dropout only acts with train=True (test_rnn_decoder_unroll.py checks); eval is exact.
  'luong_feed_general_lstm_2layers': make_config(decoder_layers=2, score='general', dropout=0.3),
  'luong_nofeed_concat_gru': make_config(cell='gru', score='concat', input_feeding=False),
  'none_lstm': make_config(timing='none', input_feeding=False),
  'fixed_lstm': make_config(timing='fixed', input_feeding=False, bridge='copy'),
  'fixed_gru_2layers': make_config(
    cell='gru', decoder_layers=2, timing='fixed', input_feeding=False, bridge='copy'
  ),
  'local_m': make_config(window='local_m', window_radius=1, score='dot'),
  'local_p': make_config(window='local_p', window_radius=1, score='location', max_source_length=7),
  'heads2': make_config(num_heads=2, score='scaled_dot'),
}
