"""End to end: attention learns to reverse; the fixed-vector bottleneck does measurably worse.

Reverse (lengths 5-20, vocabulary 20) with the demo's model: Luong attention must reach
>= 98% sequence accuracy on the eval split within 400 steps; the same model without attention
(timing=none) must be clearly worse on the longest sources (Bahdanau et al. 2015, Fig. 2).
The thresholds leave margin for the CPU's rounding: at 400 steps Luong gets 1 or 2 of 300 eval
sequences wrong (15-19 symbols: ~0.99), where the bottleneck gets none of 15-19 symbols right.
"""

import pytest

from attnlab.train import loop as train
from configs import reverse

STEPS = 400


def trained(variant: str, workdir: str) -> dict:
  c = reverse.get_config(variant)
  with c.unlocked():
    c.train.num_steps = STEPS
    c.train.eval_every = STEPS
    c.train.checkpoint_every = STEPS
    c.train.log_every = 250
    c.task.num_eval_examples = 300
    c.eval.num_heatmaps = 1
    c.parallel.num_devices = 1  # learning, not parallelism (tests/runtime/test_parallel.py)
  return train.train_and_evaluate(c, workdir)


def long_source_accuracy(result: dict) -> float:
  buckets = [b for b in result['eval']['by_length'] if b['bucket'] == '15-19']
  assert buckets and buckets[0]['count'] > 50
  return buckets[0]['mean']


@pytest.mark.slow
def test_attention_learns_reverse_and_beats_the_bottleneck(tmp_path):
  luong = trained('', str(tmp_path / 'luong'))
  assert luong['eval']['sequence_accuracy'] >= 0.98, luong['eval']
  assert luong['eval']['alignment_error_rate'] <= 0.02  # attends anti-diagonally
  none = trained('bottleneck', str(tmp_path / 'none'))
  assert long_source_accuracy(luong) >= 0.95
  assert long_source_accuracy(none) <= long_source_accuracy(luong) - 0.3, none['eval']
