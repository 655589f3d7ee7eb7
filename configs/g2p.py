"""CMUdict grapheme-to-phoneme: bi-LSTM encoder, attentional LSTM decoder, beam search.

Letters -> ARPAbet phonemes without stress (attnlab/data/cmudict_g2p.py: split by word hash,
train 112,449 words, eval 6,302, test 6,175). Test WER counts a word wrong unless the output
equals one of its pronunciations; PER is the edit distance to the closest one over its length.
Published (other CMUdict splits): bi-LSTM 23.55% WER / 5.45% PER (Yao & Zweig 2015); on the
latest CMUdict without stress a 3x256 Transformer gets 30.2% WER (CMUSphinx g2p-seq2seq).

COMMAND: python -m attnlab.main --config=configs/g2p.py --workdir=runs/g2p
Measured (results/g2p/, 1,526,187 parameters, AMD EPYC Zen 4, 2 cores, 55m58s wall for 24,000
steps and four beam-5 evaluations): test WER 24.28% / PER 5.72% (6,175 words) at the selected
step 24,000, eval 24.75% / 5.88%: under 25.0% / 6.0% within an hour on 2 CPU cores.
Why these settings (each a measured lever, chosen on eval; results/README.md, Real tasks, has
every run with its command and test WER / PER):
  token batching          2.3x the words/s of fixed batches of 128 words
  2 encoder layers        letters need more context than one bi-LSTM layer gives
  label smoothing 0.1     lower eval and test WER than none
  dropout 0.2             the first lever that gains beyond run-to-run noise (sign test on words)
  bfloat16, 24,000 steps  1.1x the steps/s, so the run fits the hour on a slow day
  beam 5, token batch 1,152: beam 10 and a batch of 2,304 do not pay
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
  c.data.bucket_size = 8  # data.batching=examples only
  c.data.global_batch_size = 128  # data.batching=examples only
  # Token batching: 8 padded shapes fit to the word lengths, ~1,152 tokens (~126 words) a step;
  # padded work falls from 119% to 8% of the real tokens, 2.3x the words per second.
  c.data.batching = 'tokens'
  c.data.tokens_per_batch = 1152
  c.data.num_buckets = 8
  base.luong_lstm_model(c, embed_dim=64, hidden_size=256, dropout=0.2)
  c.model.encoder_layers = 2  # letters need more context than one bi-LSTM layer gives
  c.model.dtype = 'bfloat16'  # 1.1x the steps/s on AVX-512 CPUs; no loss in accuracy measured
  c.optim.learning_rate = 3e-3
  c.optim.warmup_steps = 200
  c.optim.schedule = 'cosine'
  c.train.label_smoothing = 0.1
  c.train.num_steps = 24_000  # ~25 epochs of the 120,356 training pronunciations
  c.train.log_every = 100
  c.train.eval_every = 6_000  # model selection on eval WER (beam 5, all 6,302 words)
  c.train.checkpoint_every = 6_000
  c.eval.search = 'beam'
  c.eval.beam_size = 5
  c.eval.length_penalty = 0.0  # phoneme counts follow the spelling; no bias to longer outputs
  c.eval.max_decode_length = 32
  if arg == 'smoke':
    base.shrink_real_task_for_smoke(c)
    c.model.dtype = 'float32'
    c.data.batching = 'examples'
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
