"""Helpers for tests that train the reverse:smoke config: overrides, tiny runs to read, the CLI,
a killed run and an eval metric that follows a script."""

import json
import os
import shutil
import subprocess
import sys

import jax
import numpy as np

from attnlab import data
from attnlab.train import loop as train
from attnlab.train.evaluation import Evaluator
from configs import reverse
from support import REPO

# Tiny runs: sources of 3-6 symbols, so one padded shape (8 tokens) trains and decodes.
TINY = {'task.train_lengths': (3, 6), 'task.eval_lengths': (3, 6), 'eval.num_heatmaps': 0}


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


def train_tiny(workdir, **updates) -> str:
  """Trains reverse:smoke (4 steps) with TINY and `updates` in `workdir`; returns its path."""
  train.train_and_evaluate(smoke_config(**{**TINY, **updates}), str(workdir))
  return str(workdir)


def predictions(workdir, split='eval') -> list[dict]:
  """The rows of a run's predictions_{split}.jsonl."""
  with open(os.path.join(workdir, f'predictions_{split}.jsonl'), encoding='utf-8') as f:
    return [json.loads(line) for line in f]


def copy_run(workdir, tmp_path):
  """A copy of the run in tmp_path/run, to damage or change; without its evaluations and
  TensorBoard files."""
  copy = tmp_path / 'run'
  shutil.copytree(workdir, copy, ignore=shutil.ignore_patterns('evaluations', 'tensorboard'))
  return copy


def run_cli(*args, module='attnlab.main', timeout=300):
  return subprocess.run(
    [sys.executable, '-m', module, *args],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=timeout,
    env={**os.environ, 'XLA_FLAGS': '--xla_force_host_platform_device_count=2'},
  )


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
