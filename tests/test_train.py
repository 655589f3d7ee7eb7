"""The training system end to end: resume, non-finite loss, the CLI, and learning."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlab import checkpoint, data, steps, train
from configs import reverse

REPO = os.path.join(os.path.dirname(__file__), '..')


def smoke_config(**updates):
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


def restored_params(workdir, config):
  run, state, _, _ = train.setup(config, workdir)
  run.ckpt.close()
  return state.params


def test_interrupted_run_resumes_to_the_same_result(tmp_path, monkeypatch):
  config = smoke_config(**{'train.num_steps': 6, 'train.checkpoint_every': 2,
                           'train.log_every': 1, 'train.eval_every': 6})
  full = train.train_and_evaluate(config, str(tmp_path / 'full'))

  real_batches = data.train_batches

  class DyingBatches:
    """The real batches of a fresh run, but the process 'dies' fetching step 4's batch."""

    def __init__(self, *args, **kwargs):
      self.inner = real_batches(*args, **kwargs)
      self.num_filtered = self.inner.num_filtered
      self.fetched = kwargs.get('start_step', 0)

    def __next__(self):
      if self.fetched == 3:
        raise KeyboardInterrupt('simulated kill')
      self.fetched += 1
      return next(self.inner)

  monkeypatch.setattr(data, 'train_batches', DyingBatches)
  workdir = str(tmp_path / 'interrupted')
  with pytest.raises(KeyboardInterrupt):
    train.train_and_evaluate(config, workdir)
  assert checkpoint.Checkpointer(os.path.join(workdir, 'checkpoints'), keep=3).latest_step() == 2
  monkeypatch.undo()
  resumed = train.train_and_evaluate(config, workdir)  # the same command again

  for split in ('eval', 'test'):
    for key in ('loss', 'token_accuracy', 'sequence_accuracy'):
      np.testing.assert_allclose(resumed[split][key], full[split][key], rtol=1e-6)
  a = restored_params(str(tmp_path / 'full'), config)
  b = restored_params(workdir, config)
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
    np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)
  events = [json.loads(line) for line in open(os.path.join(workdir, 'metrics.jsonl'))]
  assert max(e['step'] for e in events if e['split'] == 'train') == 6
  assert {e['split'] for e in events} == {'train', 'eval', 'test'}


def test_non_finite_loss_stops_and_keeps_last_good_checkpoint(tmp_path, monkeypatch):
  real_step = steps.train_step

  def poisoned(state, batch, key, *, axis_name, label_smoothing=0.0):
    new_state, sums = real_step(state, batch, key, axis_name=axis_name,
                                label_smoothing=label_smoothing)
    bad = state.step >= 3  # the 4th optimiser step onwards
    sums = dict(sums, loss_sum=jnp.where(bad, jnp.nan, sums['loss_sum']))
    return new_state, sums

  monkeypatch.setattr(steps, 'train_step', poisoned)
  config = smoke_config(**{'train.num_steps': 8, 'train.checkpoint_every': 2,
                           'train.log_every': 1, 'train.eval_every': 8})
  workdir = str(tmp_path / 'nan')
  with pytest.raises(train.NonFiniteLossError,
                     match=r'non-finite training loss in steps up to 4; the last good '
                           r'checkpoint \(step 2\)'):
    train.train_and_evaluate(config, workdir)
  ckpt = checkpoint.Checkpointer(os.path.join(workdir, 'checkpoints'), keep=3)
  assert ckpt.latest_step() == 2


def run_cli(*args, timeout=240):
  return subprocess.run([sys.executable, '-m', 'attnlab.main', *args], cwd=REPO,
                        capture_output=True, text=True, timeout=timeout,
                        env={**os.environ, 'XLA_FLAGS': '--xla_force_host_platform_device_count=2'})


def test_cli_runs_writes_outputs_and_resumes(tmp_path):
  workdir = str(tmp_path / 'cli')
  first = run_cli('--config=configs/reverse.py:smoke', f'--workdir={workdir}')
  assert first.returncode == 0, first.stderr[-3000:]
  for name in ('config.json', 'metrics.jsonl', 'final_metrics.json', 'source_vocab.json',
               'checkpoints', 'samples', 'attention', 'tensorboard'):
    assert os.path.exists(os.path.join(workdir, name)), name
  assert any(f.endswith('.png') for f in os.listdir(os.path.join(workdir, 'attention')))
  second = run_cli('--config=configs/reverse.py:smoke', f'--workdir={workdir}')
  assert second.returncode == 0, second.stderr[-3000:]
  assert 'resumed from step 4' in second.stderr


def test_cli_rejects_bad_value_before_compiling(tmp_path):
  result = run_cli('--config=configs/reverse.py:smoke', f'--workdir={tmp_path}',
                   '--config.model.attention.score=gneral', timeout=60)
  assert result.returncode != 0
  assert ("model.attention.score='gneral' is not valid; choose from concat, dot, general, "
          'location, scaled_dot') in result.stderr
  assert not os.path.exists(os.path.join(tmp_path, 'checkpoints'))
