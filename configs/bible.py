"""Bible Spanish -> English (RV1909 -> WEB): bi-LSTM encoder, attentional LSTM decoder, beam 5.

The length study of Bahdanau et al. 2015 (Fig. 2) on a real, offline corpus: 31,077 verse
pairs from the SWORD modules of the Reina-Valera 1909 and the World English Bible
(attnlab/data/bible.py; split by chapter: train 27,896, eval 1,745, test 1,436; sources of 22.5
words on average, up to 111). SentencePiece with byte fallback, 2,000 pieces per side (256
of them bytes). A bidirectional LSTM encoder (128 units per direction) and an LSTM decoder of
256 units with Luong's global attention (`general` score, input feeding; the `bahdanau`
variant is RNNsearch's additive score on s_{t-1}, 1.4x the step time), beam search 5.
Scores: BLEU and chrF (sacrebleu) of detokenized output, and BLEU by source length in words,
0-9 ... 50+ (`bleu_by_length`, Bahdanau et al. 2015, Fig. 2); the `encdec` variant is the
no-attention baseline of that figure (RNNencdec, Cho et al. 2014).

Setup: apt-get install sword-text-sparv sword-text-web (Debian; .ci/run does it), or modules
from the CrossWire repository (see attnlab/data/bible.py).
COMMAND: python -m attnlab.main --config=configs/bible.py --workdir=runs/bible
Measured (results/bible/, 2,273,232 parameters, AMD EPYC Zen 4, one of the 2 cores while a G2P
run had the other: 1h05m47s wall for 6,000 steps at ~2.3 steps/s and seven beam-5
evaluations): test BLEU 31.47 / chrF 51.88 (1,436 verses), eval 31.47 / 52.01, selected step
6,000 (eval BLEU still rising 0.06 over the last 1,000 steps); test BLEU by source length in
words 26.3 (0-9), 29.6 (10-19), 30.6 (20-29), 33.3 (30-39), 33.4 (40-49), 35.2 (50+): no
fall with length, as RNNsearch in Bahdanau et al. 2015, Fig. 2.
Variants (`configs/bible.py:NAME`):
  smoke     a tiny model for two steps (tests)
  bahdanau  RNNsearch's attention: `concat` score, `timing=bahdanau`, no input feeding
  encdec    the same model without attention, RNNencdec (Cho et al. 2014): a fixed summary of
            the source, c = tanh(V h_N), enters every decoder step and the readout
            (`timing=fixed`; `timing=none` gives Sutskever et al.'s: the initial state only)
  kjv       English target = King James Version (sword-text-kjv)
"""

from configs import base

VARIANTS = ('smoke', 'bahdanau', 'encdec', 'kjv')


def get_config(arg: str = ''):
  c = base.get_config()
  c.task.name = 'bible'
  c.task.source_module = 'spaRV1909eb'
  c.task.target_module = 'engWEB2015eb'
  base.translation(c, text_vocab_size=2000, global_batch_size=64)
  # 99.8% of the training pairs have at most 96 pieces per side (eval and test keep all).
  c.data.max_source_length = 96
  c.data.max_target_length = 96
  c.data.bucket_size = 16
  # Token batching: 16 padded shapes fit to the lengths, ~2,624 tokens (about 63 pairs) a step;
  # padded work falls from 132% to 11% of the real tokens (benchmarks/results/padding_*.md).
  c.data.batching = 'tokens'
  c.data.tokens_per_batch = 2624
  c.data.num_buckets = 16
  base.luong_lstm_model(c, embed_dim=128, hidden_size=256, dropout=0.3)
  c.optim.learning_rate = 2e-3
  c.optim.warmup_steps = 300
  c.train.num_steps = 6_000  # ~13.6 epochs of the 27,896 training pairs
  c.train.patience = 3  # stop once eval BLEU has not improved for 3,000 steps
  c.train.log_every = 100
  c.train.eval_every = 1_000
  c.train.checkpoint_every = 1_000
  c.eval.beam_size = 5
  c.eval.max_decode_length = 0  # data.max_target_length, or longer for longer references
  if arg == 'smoke':
    base.shrink_translation_for_smoke(c)
    c.data.batching = 'examples'  # one padded shape: fewer compilations
    # The whole corpus has 325 characters besides the 256 bytes and 4 specials: 384 pieces
    # let `configs/bible.py:smoke` run on it too; on a few books (tests) they are nearly
    # characters, so verses need longer sequences.
    c.task.text_vocab_size = 384
    c.data.max_source_length = 160
    c.data.max_target_length = 160
    c.data.bucket_size = 32
    c.eval.max_decode_length = 32
    c.eval.max_examples = 8
  elif arg == 'bahdanau':
    c.model.attention.score = 'concat'
    c.model.attention.timing = 'bahdanau'
    c.model.attention.input_feeding = False
  elif arg == 'encdec':
    c.model.attention.timing = 'fixed'
    c.model.attention.input_feeding = False
  elif arg == 'kjv':
    c.task.target_module = 'engKJV2006eb'
  elif arg:
    raise ValueError(
      f'unknown variant {arg!r} of configs/bible.py; choose from {", ".join(VARIANTS)}'
    )
  c.lock()
  return c
