"""CMUdict grapheme-to-phoneme: bi-LSTM encoder, attentional LSTM decoder, beam search.

Letters -> ARPAbet phonemes without stress (attnlab/data/cmudict_g2p.py: split by word hash,
train 112,449 words, eval 6,302, test 6,175). Test WER counts a word wrong unless the output
equals one of its pronunciations; PER is the edit distance to the closest one over its length.
Published (other CMUdict splits): bi-LSTM 23.55% WER / 5.45% PER (Yao & Zweig 2015); on the
latest CMUdict without stress a 3x256 Transformer gets 30.2% WER (CMUSphinx g2p-seq2seq).

COMMAND: python -m attnlab.main --config=configs/g2p.py --workdir=runs/g2p
Measured (results/g2p/, 1.13M parameters, 2 CPU cores, 27m52s wall for 10,000 steps and both
beam-5 evaluations): test WER 27.95% / PER 6.60% (6,175 words), eval 28.01% / 6.71%; WER rises
with word length from 20% (up to 4 letters) to 32% (10-14) and 52% (15-19).
Variants (`configs/g2p.py:NAME`):
  smoke   a tiny model for a few steps (tests; still prepares the full dictionary once)
  stress  keep stress digits in the targets (task.keep_stress=True)
"""

from configs import base

VARIANTS = ('smoke', 'stress')


def get_config(arg: str = ''):
  c = base.get_config()
  c.task.name = 'cmudict_g2p'
  c.task.keep_stress = False
  # Words have at most 22 letters and 20 phonemes: nothing is dropped, 3 padded shapes.
  c.data.max_source_length = 24
  c.data.max_target_length = 24
  c.data.bucket_size = 8
  c.data.global_batch_size = 128
  base.luong_lstm_model(c, embed_dim=64, hidden_size=256, dropout=0.2)
  c.optim.learning_rate = 3e-3
  c.optim.warmup_steps = 200
  c.optim.schedule = 'cosine'
  c.train.num_steps = 10_000  # ~10.6 epochs of the 120,356 training pronunciations
  c.train.log_every = 100
  c.train.eval_every = 5_000
  c.train.checkpoint_every = 1_000
  c.eval.search = 'beam'
  c.eval.beam_size = 5
  c.eval.length_penalty = 0.0  # phoneme counts follow the spelling; no bias to longer outputs
  c.eval.max_decode_length = 32
  if arg == 'smoke':
    base.shrink_real_task_for_smoke(c)
    c.data.bucket_size = 24  # one padded shape: fewer compilations
    c.eval.beam_size = 2
    c.eval.max_examples = 16
  elif arg == 'stress':
    c.task.keep_stress = True
  elif arg:
    raise ValueError(
      f'unknown variant {arg!r} of configs/g2p.py; choose from {", ".join(VARIANTS)}'
    )
  c.lock()
  return c
