"""Copy a string of 5-40 symbols (vocabulary 20): the diagonal-alignment sanity task.

COMMAND: python -m attnlab.main --config=configs/copy.py --workdir=runs/copy
Variants: `smoke` (tiny, a few steps), `bottleneck` (no attention: timing=none).
"""

from configs import base

VARIANTS = ('smoke', 'bottleneck')


def get_config(arg: str = ''):
  c = base.get_config()
  c.task.name = 'copy'
  c.task.train_lengths = (5, 40)
  c.task.eval_lengths = (5, 40)
  c.data.max_source_length = 48
  c.data.max_target_length = 48
  c.train.num_steps = 2000
  if arg == 'smoke':
    base.shrink_for_smoke(c)
  elif arg == 'bottleneck':
    c.model.attention.timing = 'none'
    c.model.attention.input_feeding = False
  elif arg:
    raise ValueError(f'unknown variant {arg!r} of configs/copy.py; choose from '
                     f'{", ".join(VARIANTS)}')
  c.lock()
  return c
