"""Experiment files for the sweep tests: one written from a body, and a grid of the smoke
config, 2 scores x 2 seeds plus one invalid trial (a misspelt score)."""

import textwrap


def write_experiment(tmp_path, body, name='exp.py'):
  path = tmp_path / name
  path.write_text(textwrap.dedent(body))
  return str(path)


GRID = """
BASE = 'configs/reverse.py:smoke'
def sweep(add):
  for score in ('dot', 'general'):
    for seed in (0, 1):
      add(**{'model.attention.score': score, 'seed': seed})
  add(**{'model.attention.score': 'gneral', 'seed': 0})
"""
