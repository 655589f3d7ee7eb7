"""A fake sweep directory as attnlab.sweep + attnlab.main leave it (5 finished trials, 1 failed),
for the report tests: its numbers are chosen so that every statistic can be worked out by hand."""

import json
import os

import numpy as np

from attnlab.decoding import heatmaps
from support.files import write_file

# Fake trials: (timing, seed) -> test results. Four test examples per seed; luong and bahdanau
# get the same examples right (paired difference 0), none gets every example wrong (paired
# difference -1 against the best): the bootstrap intervals are exact, whatever the resampling.
CORRECT = {
  ('luong', 0): [1, 1, 1, 1],
  ('luong', 1): [1, 1, 1, 0],
  ('bahdanau', 0): [1, 1, 1, 1],
  ('bahdanau', 1): [1, 1, 1, 0],
  ('none', 0): [0, 0, 0, 0],
}
ENTROPY = {('luong', 0): 0.5, ('luong', 1): 0.7, ('bahdanau', 0): 1.0, ('bahdanau', 1): 1.2}
AER = {('luong', 0): 0.1, ('luong', 1): 0.2, ('bahdanau', 0): 0.3, ('bahdanau', 1): 0.5}
PARAMS = {'luong': 1200, 'bahdanau': 1100, 'none': 800}
WALL = {
  ('luong', 0): 60.0,
  ('luong', 1): 80.0,
  ('bahdanau', 0): 100.0,
  ('bahdanau', 1): 110.0,
  ('none', 0): 30.0,
}
# Training throughput per logging window; the first (compilation) is left out, then median.
TOKENS = {
  'luong': [10.0, 400.0, 500.0, 900.0],
  'bahdanau': [10.0, 300.0],
  'none': [10.0, 1000.0, 2000.0],
}
FINAL_STEP = 4  # the selected (best eval) step: the test split was evaluated there
LAST_STEP = 8  # trained steps; eval every 2, flat after FINAL_STEP: every trial converged


# run_times.jsonl's CPU seconds per process run; bahdanau seed 1 ran before CPU time was
# recorded (its line has none) and timing=none has no run_times.jsonl at all.
CPU = {
  ('luong', 0): (30.0, 40.0),
  ('luong', 1): (50.0,),
  ('bahdanau', 0): (90.0,),
  ('bahdanau', 1): (None,),
}
# The machine each process run named (attnlab/runtime/machine.py); the bahdanau runs named none.
MACHINE = {('luong', 0): 'amd-epyc-f25m17-avx512-2cpu', ('luong', 1): 'intel-xeon-f6m167-amx-2cpu'}


def trial_name(timing, seed):
  """The folder and name of the fake trial of `timing` and `seed`."""
  return f'timing={timing},seed={seed}'


def make_sweep(root, *, npz=True):
  """A sweep directory as attnlab.sweep + attnlab.main leave it: 5 finished, 1 failed trial."""
  trials = [
    {
      'name': trial_name(t, s),
      'config': 'configs/reverse.py',
      'overrides': {'model.attention.timing': t, 'seed': s},
      'fixed': {},
    }
    for t in ('luong', 'bahdanau', 'none')
    for s in (0, 1)
  ]
  manifest = {
    'experiment': 'experiments/toy.py',
    'name': 'toy',
    'base': 'configs/reverse.py',
    'fixed': {},
    'backend': 'local',
    'seed_key': 'seed',
    'trials': trials,
  }
  write_file(os.path.join(root, 'sweep.json'), json.dumps(manifest))
  for (timing, seed), correct in CORRECT.items():
    d = os.path.join(root, trial_name(timing, seed))
    accuracy = float(np.mean(correct))
    test = {
      'loss': 1.0 - accuracy / 2,
      'sequence_accuracy': accuracy,
      'num_examples': 4,
      'by_length': [
        {'bucket': '0-4', 'count': 0, 'mean': None},
        {'bucket': '5-9', 'count': 2, 'mean': float(np.mean(correct[:2]))},
        {'bucket': '10-14', 'count': 2, 'mean': float(np.mean(correct[2:]))},
      ],
    }
    if (timing, seed) in ENTROPY:
      test['attention_entropy'] = ENTROPY[timing, seed]
      test['alignment_error_rate'] = AER[timing, seed]
    selection = {
      'split': 'eval',
      'metric': 'sequence_accuracy',
      'mode': 'max',
      'best_step': FINAL_STEP,
      'best_value': accuracy,
      'patience': 0,
      'stopped_early': False,
    }
    final = {
      'step': FINAL_STEP,
      'trained_steps': LAST_STEP,
      'num_params': PARAMS[timing],
      'selection': selection,
      'eval': test,
      'test': test,
    }
    write_file(os.path.join(d, 'final_metrics.json'), json.dumps(final))
    events = [
      {'step': 2 * (i + 1), 'split': 'train', 'loss': 3.0 - i, 'tokens_per_sec': rate}
      for i, rate in enumerate(TOKENS[timing])
    ]
    events += [
      {'step': step, 'split': 'eval', 'sequence_accuracy': value}
      for step, value in ((2, accuracy / 2), (4, accuracy), (6, accuracy), (8, accuracy / 2))
    ]
    events.append({'step': FINAL_STEP, 'split': 'selection', 'metric': 'sequence_accuracy'})
    write_file(os.path.join(d, 'metrics.jsonl'), ''.join(json.dumps(e) + '\n' for e in events))
    write_file(
      os.path.join(d, 'predictions_test.jsonl'),
      ''.join(json.dumps({'index': i, 'correct': bool(c)}) + '\n' for i, c in enumerate(correct)),
    )
    write_file(
      os.path.join(d, 'sweep_status.json'),
      json.dumps({'status': 'finished', 'wall_s': WALL[timing, seed], 'attempts': 1}),
    )
    if (timing, seed) in CPU:
      runs = [
        {'wall_s': 1.0}
        | ({} if c is None else {'cpu_s': c})
        | ({'machine': MACHINE[timing, seed]} if (timing, seed) in MACHINE else {})
        for c in CPU[timing, seed]
      ]
      write_file(os.path.join(d, 'run_times.jsonl'), ''.join(json.dumps(r) + '\n' for r in runs))
    if timing != 'none':
      weights = np.full((3, 4), 0.25, np.float32)
      weights[:, 0] = 0.4 if timing == 'luong' else 0.1
      weights /= weights.sum(axis=1, keepdims=True)
      folder = os.path.join(d, 'attention')
      if npz:
        os.makedirs(folder, exist_ok=True)
        np.savez(
          os.path.join(folder, f'test_step{FINAL_STEP:07d}.npz'),
          weights_0=weights,
          source_0=np.array(['a', 'b', 'c', '<eos>']),
          output_0=np.array(['c', 'b', 'a']),
        )
      else:
        heatmaps.save_heatmap(
          os.path.join(folder, f'test_step{FINAL_STEP:07d}_ex0.png'),
          weights,
          ['a', 'b', 'c', '<eos>'],
          ['c', 'b', 'a'],
        )
  write_file(
    os.path.join(root, trial_name('none', 1), 'sweep_status.json'),
    json.dumps({'status': 'failed', 'wall_s': 5.0, 'error': 'ValueError: boom'}),
  )
  return root
