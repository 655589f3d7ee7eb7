"""Helpers for tests that train the reverse:smoke config: overrides, the CLI, a killed run and
an eval metric that follows a script."""

import os
import subprocess
import sys

import jax
import numpy as np

from attnlab import data
from attnlab.train.evaluation import Evaluator
from configs import reverse

REPO = os.path.join(os.path.dirname(__file__), '..')


def smoke_config(**updates):
  """reverse:smoke on one device with dotted-key `updates` ('train.num_steps': 6, ...)."""
  c = reverse.get_config('smoke')
  updates = {'parallel.num_devices': 1, **updates}  # 8 simulated devices only in parallel tests
  with c.unlocked():
    for key, value in updates.items():
      *groups, leaf = key.split('.')
      node = c
      for g in groups:
        node = getattr(node, g)
      setattr(node, leaf, value)
  return c


def run_cli(*args, module='attnlab.main', timeout=300):
  return subprocess.run([sys.executable, '-m', module, *args], cwd=REPO, capture_output=True,
                        text=True, timeout=timeout,
                        env={**os.environ, 'XLA_FLAGS': '--xla_force_host_platform_device_count=2'})


class Killed(BaseException):
  """A process that dies on the spot (SIGKILL, a machine that goes away): unlike Ctrl-C, no
  stop handling of attnlab's catches it (it saves nothing at the stop)."""


def one_error_line(result) -> str:
  """The single `error: ...` line a command prints for a user's mistake (exit status 2, no
  traceback), checked and returned."""
  assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
  assert 'Traceback' not in result.stderr
  lines = [line for line in result.stderr.splitlines() if line.strip()]
  assert len(lines) == 1 and lines[0].startswith('error: '), result.stderr[-3000:]
  assert '\\n' not in lines[0]  # no repr of a message with a newline in it
  return lines[0]


def die_before_step(monkeypatch, step: int, *, killed: bool = False) -> None:
  """The next run gets the real batches but stops fetching `step`'s: interrupted as by Ctrl-C
  or SIGTERM (KeyboardInterrupt), or `killed` (Killed)."""
  real_batches = data.train_batches

  class DyingBatches:
    def __init__(self, *args, **kwargs):
      self.inner = real_batches(*args, **kwargs)
      self.num_filtered = self.inner.num_filtered
      self.fetched = kwargs.get('start_step', 0)

    def __next__(self):
      if self.fetched == step - 1:
        raise Killed('simulated kill') if killed else KeyboardInterrupt('simulated interrupt')
      self.fetched += 1
      return next(self.inner)

  monkeypatch.setattr(data, 'train_batches', DyingBatches)


def script_eval_metric(monkeypatch, values: dict, tested: dict) -> None:
  """The eval split's sequence_accuracy at step s becomes values[s]; the host params of every
  test-split evaluation are recorded in tested[step]."""
  real = Evaluator.evaluate

  def scripted(self, params, split, step):
    result = real(self, params, split, step)
    if split == 'eval':
      result['sequence_accuracy'] = values[step]
    if split == 'test':
      tested[step] = jax.tree.map(np.asarray, self.parallel.fetch(params))
    return result

  monkeypatch.setattr(Evaluator, 'evaluate', scripted)
