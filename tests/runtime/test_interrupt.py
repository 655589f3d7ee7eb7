"""A Ctrl-C / SIGTERM that Python swallows (raised inside a finaliser) still stops the run."""

import json
import os
import signal
import sys

import jax
import numpy as np
import pytest
from support.smoke_runs import smoke_config

from attnlab import data
from attnlab.rundir import checkpoint, checkpoint_params, layout
from attnlab.runtime import interrupt
from attnlab.train import loop as train


@pytest.fixture
def installed():
  handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
  seen = []
  hook = sys.unraisablehook
  sys.unraisablehook = lambda unraisable: seen.append(unraisable.exc_value)
  signal.signal(signal.SIGTERM, signal.SIG_DFL)
  signal.signal(signal.SIGINT, signal.default_int_handler)  # nohup / CI start with SIG_IGN
  interrupt.install()
  yield seen
  sys.unraisablehook = hook
  for sig, handler in handlers.items():
    signal.signal(sig, handler)
  interrupt.reset()


class SignalledWhileFinalised:
  """Garbage whose finaliser is interrupted by SIGTERM, as a weakref callback in JAX can be."""

  def __del__(self):
    interrupt._handler(signal.SIGTERM, None)  # what Python calls when the signal lands here


def test_install_handles_both_signals(installed):
  assert signal.getsignal(signal.SIGTERM) is interrupt._handler
  assert signal.getsignal(signal.SIGINT) is interrupt._handler
  with pytest.raises(KeyboardInterrupt, match='signal 15'):
    os.kill(os.getpid(), signal.SIGTERM)
    signal.sigtimedwait([], 0)  # pending signal handlers run by now at the latest


def test_a_swallowed_signal_is_raised_by_the_next_check_and_not_printed(installed):
  interrupt.check()  # nothing pending: no-op
  SignalledWhileFinalised()  # collected at once; Python cannot raise from __del__
  assert installed == []  # the swallowed KeyboardInterrupt is not reported
  with pytest.raises(KeyboardInterrupt, match='signal 15'):
    interrupt.check()
  interrupt.check()  # raised once


def test_other_finaliser_errors_are_still_reported(installed):
  class Broken:
    def __del__(self):
      raise ValueError('a real bug')

  Broken()
  assert [type(e) for e in installed] == [ValueError]


@pytest.mark.slow
def signal_at_step_3():
  """data.train_batches whose batches come as usual, but whose third fetch (step 3's) meets a
  signal swallowed by a finaliser."""
  real_batches = data.train_batches

  class SignalAtStep3:
    def __init__(self, *args, **kwargs):
      self.inner = real_batches(*args, **kwargs)
      self.num_filtered = self.inner.num_filtered
      self.fetched = 0

    def __next__(self):
      self.fetched += 1
      if self.fetched == 3:
        SignalledWhileFinalised()
      return next(self.inner)

  return SignalAtStep3


def test_training_stops_at_the_step_after_a_swallowed_signal(tmp_path, monkeypatch, installed):
  monkeypatch.setattr(data, 'train_batches', signal_at_step_3())
  workdir = str(tmp_path / 'run')
  with pytest.raises(KeyboardInterrupt):
    train.train_and_evaluate(smoke_config(**{'train.num_steps': 8}), workdir)
  [attempt] = [json.loads(line) for line in open(os.path.join(workdir, train.RUN_TIMES))]
  assert attempt['outcome'] == 'interrupted' and attempt['last_step'] == 3
  interrupt.check()  # the stop answered the signal: nothing left for a later run


@pytest.mark.slow
def test_a_stopped_run_saves_its_last_step_and_resumes_there_bit_for_bit(tmp_path, monkeypatch,
                                                                         installed):
  """SIGTERM (a scheduler's time limit) at step 3 of 8, with checkpoints every 4 steps: step 3
  is saved at the stop, the rerun starts there, and its final parameters equal those of a run
  that was never stopped."""
  updates = {'train.num_steps': 8, 'train.checkpoint_every': 4, 'train.eval_every': 8}
  stopped, whole = str(tmp_path / 'stopped'), str(tmp_path / 'whole')
  with monkeypatch.context() as patch:
    patch.setattr(data, 'train_batches', signal_at_step_3())
    with pytest.raises(KeyboardInterrupt):
      train.train_and_evaluate(smoke_config(**updates), stopped)
  assert layout.saved_steps(stopped) == [3]
  train.train_and_evaluate(smoke_config(**updates), stopped)
  [first, second] = [json.loads(line) for line in open(os.path.join(stopped, train.RUN_TIMES))]
  assert (first['outcome'], first['last_step'], second['first_step']) == ('interrupted', 3, 3)
  train.train_and_evaluate(smoke_config(**updates), whole)
  for name in ('latest', 8):
    with checkpoint.Checkpointer(layout.checkpoint_dir(stopped), keep=10) as a, \
        checkpoint.Checkpointer(layout.checkpoint_dir(whole), keep=10) as b:
      for x, y in zip(jax.tree.leaves(checkpoint_params.restore(a, name)[0]),
                      jax.tree.leaves(checkpoint_params.restore(b, name)[0]), strict=True):
        np.testing.assert_array_equal(x, y)
