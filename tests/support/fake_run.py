"""A fake finished run directory of the G2P task, for the run report tests: golden numbers that
the report's lines can be checked against."""

import json

import numpy as np

from attnlab.decoding import heatmaps
from attnlab.rundir import layout
from support.files import jsonl, write_file

COMMAND = 'python -m attnlab.main --config=configs/g2p.py --workdir=runs/g2p-final'
TEST = {
  'loss': 0.41234,
  'sequence_accuracy': 0.27412,
  'wer': 0.72588,
  'per': 0.1234,
  'num_examples': 1200,
  'by_length': [
    {'bucket': '0-4', 'count': 0, 'mean': None},
    {'bucket': '5-9', 'count': 2, 'mean': 0.5},
    {'bucket': '10-14', 'count': 4, 'mean': 0.25},
  ],
  'wer_by_length': [
    {'bucket': '0-4', 'count': 0, 'mean': None},
    {'bucket': '5-9', 'count': 2, 'mean': 0.5},
    {'bucket': '10-14', 'count': 4, 'mean': 0.75},
  ],
  'accuracy_by_locale': {'fr_FR': 0.5, 'de_DE': 0.75},
  'accuracy_by_format': {'short': 1.0, 'long': 0.125},
}
EVAL = {**TEST, 'sequence_accuracy': 0.3, 'wer': 0.7, 'num_examples': 500}
SELECTION = {
  'split': 'eval',
  'metric': 'wer',
  'mode': 'min',
  'best_step': 2000,
  'best_value': 0.7,
  'patience': 0,
  'stopped_early': False,
}
FINAL = {
  'step': 2000,
  'trained_steps': 2000,
  'num_params': 1234567,
  'selection': SELECTION,
  'eval': EVAL,
  'test': TEST,
}


def make_run(d):
  """A finished run directory at `d` (a pathlib.Path): config, final metrics, metrics.jsonl,
  heatmaps of two steps and two process runs' times."""
  write_file(d / 'config.json', json.dumps({'task': {'name': 'cmudict_g2p'}, 'seed': 0}))
  write_file(d / 'final_metrics.json', json.dumps(FINAL))
  # The first window (compilation) is left out: median of 400, 500, 900 tokens/s.
  events = [
    {'step': 500 * (i + 1), 'split': 'train', 'loss': 3.0 - i, 'tokens_per_sec': rate}
    for i, rate in enumerate([10.0, 400.0, 500.0, 900.0])
  ]
  # Dev WER best so far: 0.7012 at step 1,500 (= 0.75 x 2,000), 0.7 at 2,000: 0.12 points.
  events += [
    {'step': 1000, 'split': 'eval', 'wer': 0.8},
    {'step': 1500, 'split': 'eval', 'wer': 0.7012},
    {'step': 2000, 'split': 'eval', **EVAL},
  ]
  write_file(d / 'metrics.jsonl', jsonl(events))
  weights = np.full((3, 4), 0.25, np.float32)
  heatmaps.save_heatmap(d / 'attention' / 'test_step0002000_ex0.png', weights, 'abc.', 'xyz')
  write_file(d / 'attention' / 'test_step0001000_ex0.png', 'not the final step')
  runs = [
    {'first_step': 0, 'last_step': 2000, 'wall_s': 3000.0, 'finished_at': '2025-01-01T00:00'},
    {'first_step': 1500, 'last_step': 2000, 'wall_s': 723.0, 'finished_at': '2025-01-01T02:00'},
  ]
  write_file(d / layout.RUN_TIMES, jsonl(runs))
  return d
