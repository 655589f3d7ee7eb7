"""The divergence guard from the first logging window on: its reference starts at the loss of a
uniform guess, and no checkpoint whose loss was above the threshold is called good."""

import math
import os

import pytest
from support.smoke_runs import smoke_config

from attnlab.rundir import layout
from attnlab.train import divergence, steps
from attnlab.train import loop as train


def test_the_reference_starts_at_a_uniform_guess():
  guard = divergence.LossGuard(10.0, vocab_size=20)
  assert guard.threshold == pytest.approx(10 * math.log(20))  # 29.96
  assert guard.problem(3.2) is None  # a fresh model is a little worse than uniform
  assert guard.lowest == 3.2 and guard.threshold == pytest.approx(10 * math.log(20))
  assert guard.problem(2.0) is None and guard.threshold == 20.0  # then the logged lowest
  assert guard.problem(19.9) is None
  assert guard.problem(20.1).startswith('training loss 20.1 is above')
  first = divergence.LossGuard(10.0, vocab_size=20).problem(199.0)
  assert first == ('training loss 199 is above train.divergence_factor=10 times its lowest value '
                   'so far (2.996 = ln 20, the loss of a uniform guess over the target '
                   'vocabulary, as no logged loss was lower)')
  # A resumed run's lowest logged loss is kept; the guard off stays off.
  assert divergence.LossGuard(10.0, 0.5, vocab_size=20).threshold == 10.0
  assert divergence.LossGuard(0.0, vocab_size=20).problem(1e30) is None


@pytest.mark.slow
@pytest.mark.parametrize('learning_rate', [1e30, 50.0])
def test_a_run_diverging_in_its_first_window_stops_there(tmp_path, learning_rate):
  """lr 50 without warmup starts at ~200 nats and trained to the end; lr 1e30 was caught only
  by an eval, which called a checkpoint of loss 4e30 the last good one. (The command's one
  error line for a diverging run: tests/commands/test_cli_errors.py.)"""
  run_dir = str(tmp_path / 'run')
  config = smoke_config(**{'optim.learning_rate': learning_rate, 'optim.warmup_steps': 0,
                           'train.num_steps': 8})
  with pytest.raises(divergence.DivergenceError) as diverged:
    train.train_and_evaluate(config, run_dir)
  message = str(diverged.value)
  assert message.startswith('training diverged at step 2: training loss '), message
  assert 'as no logged loss was lower' in message
  assert 'no checkpoint was saved before it (the first is due at step 2)' in message
  assert 'good checkpoint' not in message
  assert layout.saved_steps(run_dir) == []
  assert not os.path.exists(os.path.join(run_dir, 'final_metrics.json'))


@pytest.mark.slow
def test_a_normal_run_is_not_stopped(tmp_path):
  config = smoke_config(**{'train.num_steps': 6, 'train.log_every': 1, 'train.eval_every': 6})
  final = train.train_and_evaluate(config, str(tmp_path / 'run'))
  assert final['test']['num_examples'] == 48
  assert layout.saved_steps(str(tmp_path / 'run')) == [2, 4, 6]


@pytest.mark.slow
def test_a_checkpoint_saved_above_the_threshold_is_not_called_good(tmp_path, monkeypatch):
  """A checkpoint saved with the guard off (or by an attnlab without this guard) at a runaway
  loss: a resumed run that diverges does not offer it as the one to continue from."""
  real_step = steps.train_step

  def runaway(state, batch, key, *, axis_name, label_smoothing=0.0):
    new_state, sums = real_step(state, batch, key, axis_name=axis_name,
                                label_smoothing=label_smoothing)
    return new_state, dict(sums, loss_sum=sums['loss_sum'] * 1e6)  # finite, about 3e6 nats

  monkeypatch.setattr(steps, 'train_step', runaway)
  run_dir = str(tmp_path / 'run')
  train.train_and_evaluate(smoke_config(**{'train.divergence_factor': 0.0}), run_dir)
  assert layout.saved_steps(run_dir) == [2, 4]
  with pytest.raises(train.DivergenceError) as stopped:
    train.train_and_evaluate(smoke_config(**{'train.num_steps': 8}), run_dir,
                             allow_config_change=('train.num_steps', 'train.divergence_factor'))
  message = str(stopped.value)
  assert message.startswith('training diverged at step 6: training loss 3.')
  assert (f'the latest checkpoint (step 4) in {run_dir}/checkpoints was saved at a training loss '
          'of 3.') in message
  assert 'above the threshold already, so it is no good one to resume from' in message
  assert 'good checkpoint' not in message
