"""Your own parallel corpus: bi-LSTM encoder, Luong attention, beam search, BLEU/chrF.

Point the task at a TSV file (source<TAB>target) or two line-aligned files per split
(attnlab/data/parallel_text.py). Vocabularies come from the training side only; with
SentencePiece (byte fallback: characters unseen in training still round-trip) the models are
cached in `<data_dir>/attnlab_sentencepiece/` and saved into the workdir with the vocabularies.
Scores: corpus BLEU and chrF of detokenized output (sacrebleu), overall and by source length in
words (0-9, ..., 50+).

COMMAND: python -m attnlab.main --config=configs/parallel_text.py --workdir=runs/mytext \
  --config.task.train_files="('train.de','train.en')" \
  --config.task.eval_files="('dev.de','dev.en')" --config.task.test_files="('test.tsv',)"
Expected: depends on your corpus (no bundled data, no measured result).
Variants (`configs/parallel_text.py:NAME`):
  smoke  a tiny model for a few steps (tests set the file paths)
  char   character tokens on both sides (longer sequences)
  word   whitespace-separated words, the 8000 most frequent per side
"""

from configs import base

VARIANTS = ('smoke', 'char', 'word')


def get_config(arg: str = ''):
  c = base.get_config()
  c.task.name = 'parallel_text'
  c.task.max_chars = 1000
  base.translation(c, text_vocab_size=8000, global_batch_size=64)
  base.luong_lstm_model(c, embed_dim=256, hidden_size=512, dropout=0.3, layers=2)
  c.optim.warmup_steps = 1000
  c.train.num_steps = 30_000
  c.train.log_every = 100
  c.train.eval_every = 2_000
  c.train.checkpoint_every = 2_000
  if arg == 'smoke':
    base.shrink_translation_for_smoke(c)
  elif arg == 'char':
    c.task.tokenizer = 'char'
    c.data.max_source_length = 256
    c.data.max_target_length = 256
    c.data.bucket_size = 32
    c.eval.max_decode_length = 384
  elif arg == 'word':
    c.task.tokenizer = 'word'
  elif arg:
    raise ValueError(
      f'unknown variant {arg!r} of configs/parallel_text.py; choose from {", ".join(VARIANTS)}'
    )
  c.lock()
  return c
