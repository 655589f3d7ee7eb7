"""Add two decimal numbers of 1-8 digits ('123+45' -> '168'): attention must find carries.

COMMAND: python -m attnlab.main --config=configs/addition.py --workdir=runs/addition
Variants: `smoke` (tiny, a few steps), `longer` (evaluate on 9-12 digit operands: length
generalisation beyond the training range).
"""

from configs import base

VARIANTS = ('smoke', 'longer')


def get_config(arg: str = ''):
  c = base.get_config()
  c.task.name = 'addition'
  c.task.train_lengths = (1, 8)  # digits per operand
  c.task.eval_lengths = (1, 8)
  c.data.max_source_length = 24
  c.data.max_target_length = 16
  c.train.num_steps = 4000
  if arg == 'smoke':
    base.shrink_for_smoke(c)
  elif arg == 'longer':
    c.task.eval_lengths = (9, 12)
  elif arg:
    raise ValueError(f'unknown variant {arg!r} of configs/addition.py; choose from '
                     f'{", ".join(VARIANTS)}')
  c.lock()
  return c
