"""WMT'14 German -> English (TFDS `wmt14_translate/de-en`), a Luong-et-al.-2015-sized model.

4-layer LSTM encoder and decoder with 1000 units and 1000-dim embeddings, dropout 0.2, global
attention with the `general` score and input feeding (Luong, Pham & Manning 2015), over
SentencePiece subwords (32,000 per side with byte fallback, trained on an evenly spaced sample
of at most 1M training sentences), beam search 5, BLEU/chrF with sacrebleu on detokenized output
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
  base.translation(c, text_vocab_size=32_000, global_batch_size=128)
  # Luong et al. use a unidirectional stacked encoder.
  base.luong_lstm_model(
    c, embed_dim=1000, hidden_size=1000, dropout=0.2, layers=4, bidirectional=False
  )
  c.optim.warmup_steps = 4000
  c.optim.clip_norm = 5.0
  c.train.num_steps = 300_000
  c.train.log_every = 200
  c.train.eval_every = 10_000
  c.train.checkpoint_every = 5_000
  if arg == 'smoke':
    base.shrink_translation_for_smoke(c)
    c.optim.warmup_steps = 1
    c.eval.num_samples = 2
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
