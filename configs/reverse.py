"""Reverse a string of 5-20 symbols (vocabulary 20): bi-LSTM encoder, Luong general attention.

The README's demo (`make demo`). Reversal needs every source symbol at an anti-diagonal
position, so attention makes it easy and the fixed-vector bottleneck (`timing=none`) hard.

COMMAND: python -m attnlab.main --config=configs/reverse.py --workdir=runs/reverse
Variants (`configs/reverse.py:NAME`):
  smoke       a tiny model for a few steps (tests)
  bottleneck  the same model without attention (model.attention.timing=none)
  transformer a 2+2-layer Transformer (H=128, 4 heads) on the same task
"""

from configs import base

VARIANTS = ('smoke', 'bottleneck', 'transformer')


def get_config(arg: str = ''):
  c = base.get_config()
  c.task.name = 'reverse'
  c.task.vocab_size = 20
  c.task.train_lengths = (5, 20)
  c.task.eval_lengths = (5, 20)
  c.data.max_source_length = 24
  c.data.max_target_length = 24
  c.model.attention.score = 'general'
  c.model.attention.timing = 'luong'
  c.model.attention.input_feeding = True
  c.train.num_steps = 1500
  c.train.eval_every = 500
  c.train.checkpoint_every = 500
  if arg == 'smoke':
    base.shrink_for_smoke(c)
  elif arg == 'bottleneck':
    c.model.attention.timing = 'none'
    c.model.attention.input_feeding = False
  elif arg == 'transformer':
    c.model.kind = 'transformer'
    c.model.encoder_layers = 2
    c.model.decoder_layers = 2
    c.model.transformer.num_heads = 4
    c.model.transformer.mlp_dim = 256
    c.optim.learning_rate = 1e-3
    c.optim.warmup_steps = 200
  elif arg:
    raise ValueError(f'unknown variant {arg!r} of configs/reverse.py; choose from '
                     f'{", ".join(VARIANTS)}')
  c.lock()
  return c
