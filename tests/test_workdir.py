"""Reusing a workdir: a changed config is refused before anything is written, unless the keys
may change on resume and are named in --allow_config_change."""

import json
import os
import types

import pytest
from smoke_runs import run_cli, smoke_config

from attnlab import train, workdir
from attnlab.data.vocab import Vocab


def _snapshot(directory):
  """Every file's bytes and mtime under `directory`."""
  out = {}
  for root, _, files in os.walk(directory):
    for name in files:
      path = os.path.join(root, name)
      with open(path, 'rb') as f:
        out[path] = (f.read(), os.stat(path).st_mtime_ns)
  return out


def test_cli_refuses_a_changed_config_and_writes_nothing(tmp_path):
  run_dir = str(tmp_path / 'run')
  first = run_cli('--config=configs/reverse.py:smoke', f'--workdir={run_dir}')
  assert first.returncode == 0, first.stderr[-3000:]
  before = _snapshot(run_dir)
  again = run_cli('--config=configs/reverse.py:smoke', f'--workdir={run_dir}',
                  '--config.optim.learning_rate=0.001', '--config.seed=1',
                  '--config.model.hidden_size=32')
  assert again.returncode == 2, again.stderr[-3000:]
  assert 'Traceback' not in again.stderr
  message = again.stderr
  assert message.startswith(f'error: {run_dir} holds a run with a different config (compared '
                            f'with {run_dir}/config.json); nothing was written.')
  assert '  optim.learning_rate: 0.003 -> 0.001\n' in message
  assert '  seed: 0 -> 1 (cannot change on resume)\n' in message
  assert '  model.hidden_size: 16 -> 32 (cannot change on resume)\n' in message
  assert 'use a new --workdir' in message
  assert 'only optim.learning_rate could change on resume' in message
  assert _snapshot(run_dir) == before  # config.json, vocabularies, checkpoints: untouched


def test_extending_num_steps_needs_the_flag_and_says_what_the_schedule_does(tmp_path):
  run_dir = str(tmp_path / 'run')
  common = {'optim.warmup_steps': 0, 'optim.schedule': 'cosine', 'optim.end_lr_fraction': 0.0}
  train.train_and_evaluate(smoke_config(**common), run_dir)
  longer = smoke_config(**common, **{'train.num_steps': 8})
  # Cosine from peak 0.003 to 0, at step 4: over 4 steps p = 1, lr = 0.003 (1 + cos(pi)) / 2 = 0;
  # over 8 steps p = 0.5, lr = 0.003 (1 + cos(pi / 2)) / 2 = 0.0015.
  with pytest.raises(workdir.WorkdirConfigError) as refused:
    train.train_and_evaluate(longer, run_dir)
  assert ('train.num_steps: 4 -> 8 (the cosine schedule is rebuilt over 8 steps, so at step 4 '
          'the learning rate jumps from 0 to 0.0015)') in str(refused.value)
  assert '--allow_config_change=train.num_steps' in str(refused.value)

  final = train.train_and_evaluate(longer, run_dir, allow_config_change=('train.num_steps',))
  assert json.load(open(os.path.join(run_dir, 'final_metrics.json')))['trained_steps'] == 8
  assert final['test']['num_examples'] == 48
  assert json.load(open(os.path.join(run_dir, 'config.json')))['train']['num_steps'] == 8
  (change,) = [json.loads(line) for line in open(os.path.join(run_dir, workdir.CONFIG_CHANGES))]
  assert change['step'] == 4 and change['changes'] == {'train.num_steps': [4, 8]}


def test_keys_that_cannot_change_are_refused_even_when_named(tmp_path):
  run_dir = str(tmp_path / 'run')
  train.train_and_evaluate(smoke_config(), run_dir)
  with pytest.raises(workdir.WorkdirConfigError, match=r'model.embed_dim: 8 -> 12 \(cannot '):
    train.train_and_evaluate(smoke_config(**{'model.embed_dim': 12}), run_dir,
                             allow_config_change=('model.embed_dim',))
  with pytest.raises(workdir.WorkdirConfigError, match='train.num_steps=2 is below the step the '
                     r'run reached \(4\)'):
    train.train_and_evaluate(smoke_config(**{'train.num_steps': 2}), run_dir,
                             allow_config_change=('train.num_steps',))
  # Without config.json the config saved in the latest checkpoint is compared.
  os.remove(os.path.join(run_dir, 'config.json'))
  with pytest.raises(workdir.WorkdirConfigError, match='compared with the latest checkpoint'):
    train.train_and_evaluate(smoke_config(**{'seed': 3}), run_dir)


def test_changed_keys_and_keys_attnlab_added_since():
  old = {'seed': 0, 'train': {'num_steps': 4, 'gone': 1}, 'eval': {'splits': ['eval']}}
  new = {'seed': 0, 'train': {'num_steps': 4, 'patience': 0}, 'eval': {'splits': ['eval']}}
  changes = workdir.changed_keys(old, new)
  assert changes == {'train.gone': (1, '(absent)'), 'train.patience': ('(absent)', 0)}


def test_a_resumed_run_must_build_the_same_vocabularies(tmp_path):
  Vocab.from_symbols('abc').save(tmp_path / 'source_vocab.json')
  Vocab.from_symbols('abc').save(tmp_path / 'target_vocab.json')
  same = types.SimpleNamespace(source_vocab=Vocab.from_symbols('abc'),
                               target_vocab=Vocab.from_symbols('abc'))
  workdir.check_vocabularies(str(tmp_path), same)
  grown = types.SimpleNamespace(source_vocab=Vocab.from_symbols('abcd'),
                                target_vocab=Vocab.from_symbols('abc'))
  with pytest.raises(workdir.WorkdirConfigError, match='source_vocab.json differs from the source '
                     r'vocabulary this config builds \(8 ids\): the data changed'):
    workdir.check_vocabularies(str(tmp_path), grown)
