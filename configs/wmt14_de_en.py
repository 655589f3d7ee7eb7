"""WMT'14 German -> English (TFDS `wmt14_translate/de-en`), a Luong-et-al.-2015-sized model.

4-layer LSTM encoder and decoder with 1000 units and 1000-dim embeddings, dropout 0.2, global
attention with the `general` score and input feeding (Luong, Pham & Manning 2015), over
SentencePiece subwords (32,000 per side, trained on an evenly spaced sample of at most 1M
training sentences), beam search 5, BLEU/chrF with sacrebleu on detokenized output
(newstest2013 = eval, newstest2014 = test). For users with internet (TFDS downloads WMT and
prepares it as array_record, ~4.5M pairs) and accelerators; here it is only tested under
`tfds.testing.mock_data`.

COMMAND: python -m attnlab.main --config=configs/wmt14_de_en.py --workdir=runs/wmt14_de_en
Expected: not measured here.
Variants (`configs/wmt14_de_en.py:NAME`):
  smoke    a tiny model for two steps (tests, under mock data)
  local_p  Luong's predictive local attention (window radius 10)
"""

from configs import base

VARIANTS = ('smoke', 'local_p')


def wmt_config(source_language: str, target_language: str, arg: str, filename: str):
  c = base.get_config()
  c.task.name = 'wmt14_translate'
  c.task.source_language = source_language
  c.task.target_language = target_language
  c.task.tokenizer = 'sentencepiece'
  c.task.text_vocab_size = 32_000
  c.data.max_source_length = 64
  c.data.max_target_length = 64
  c.data.bucket_size = 16
  c.data.global_batch_size = 128
  c.model.kind = 'rnn'
  c.model.bidirectional = False  # Luong et al. use a unidirectional stacked encoder
  c.model.embed_dim = 1000
  c.model.hidden_size = 1000
  c.model.encoder_layers = 4
  c.model.decoder_layers = 4
  c.model.dropout = 0.2
  c.model.attention.score = 'general'
  c.model.attention.timing = 'luong'
  c.model.attention.input_feeding = True
  c.optim.learning_rate = 1e-3
  c.optim.warmup_steps = 4000
  c.optim.clip_norm = 5.0
  c.train.num_steps = 300_000
  c.train.log_every = 200
  c.train.eval_every = 10_000
  c.train.checkpoint_every = 5_000
  c.eval.search = 'beam'
  c.eval.beam_size = 5
  c.eval.max_decode_length = 128
  if arg == 'smoke':
    c.task.text_vocab_size = 64
    c.data.max_source_length = 32
    c.data.max_target_length = 32
    c.data.bucket_size = 8
    c.data.global_batch_size = 8
    c.model.embed_dim = 8
    c.model.hidden_size = 16
    c.model.encoder_layers = 1
    c.model.decoder_layers = 1
    c.optim.warmup_steps = 1
    c.train.num_steps = 2
    c.train.log_every = 1
    c.train.eval_every = 2
    c.train.checkpoint_every = 2
    c.eval.beam_size = 2
    c.eval.max_decode_length = 32
    c.eval.num_samples = 2
    c.eval.num_heatmaps = 1
  elif arg == 'local_p':
    c.model.attention.window = 'local_p'
    c.model.attention.window_radius = 10
  elif arg:
    raise ValueError(
      f'unknown variant {arg!r} of configs/{filename}; choose from {", ".join(VARIANTS)}'
    )
  c.lock()
  return c


def get_config(arg: str = ''):
  return wmt_config('de', 'en', arg, 'wmt14_de_en.py')
