"""Sort the symbols of a 5-20 symbol string (vocabulary 20): a non-monotonic alignment.

COMMAND: python -m attnlab.main --config=configs/sort.py --workdir=runs/sort
Variants: `smoke` (tiny, a few steps).
"""

from configs import base

VARIANTS = ('smoke',)


def get_config(arg: str = ''):
  c = base.get_config()
  c.task.name = 'sort'
  c.data.max_source_length = 24
  c.data.max_target_length = 24
  c.train.num_steps = 3000
  if arg == 'smoke':
    base.shrink_for_smoke(c)
  elif arg:
    raise ValueError(f'unknown variant {arg!r} of configs/sort.py; choose from '
                     f'{", ".join(VARIANTS)}')
  c.lock()
  return c
