"""A four-trial sweep of the smoke config: what the sweep and report tests run (seconds).

COMMAND: python -m attnlab.sweep experiments/smoke.py --workdir=runs/smoke --parallel=2
"""

BASE = 'configs/reverse.py:smoke'


def sweep(add):
  for score in ('dot', 'concat'):
    for seed in (0, 1):
      add(**{'model.attention.score': score, 'seed': seed})
