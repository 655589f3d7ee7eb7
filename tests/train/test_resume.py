"""Reusing a workdir: a changed config is refused before anything but the lock file's record is
written, unless the keys may change on resume and are named in --allow_config_change."""

import errno
import json
import os
import types

import pytest
from support.smoke_runs import run_cli, smoke_config

from attnlab.data.vocab import Vocab
from attnlab.errors import UserError
from attnlab.rundir import layout
from attnlab.rundir import lock as run_lock
from attnlab.train import loop as train
from attnlab.train import resume


def _snapshot(directory):
  """Every file's bytes and mtime under `directory`, but the lock file: it names the latest
  process that held the workdir, a refused one too."""
  out = {}
  for root, _, files in os.walk(directory):
    for name in files:
      path = os.path.join(root, name)
      if path == os.path.join(directory, layout.LOCK_FILE):
        continue
      with open(path, 'rb') as f:
        out[path] = (f.read(), os.stat(path).st_mtime_ns)
  return out


@pytest.mark.slow
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
                            f'with {run_dir}/config.json); nothing was written but the lock '
                            "file's record of this process.")
  assert '  optim.learning_rate: 0.003 -> 0.001\n' in message
  assert '  seed: 0 -> 1 (cannot change on resume)\n' in message
  assert '  model.hidden_size: 16 -> 32 (cannot change on resume)\n' in message
  assert 'use a new --workdir' in message
  assert 'only optim.learning_rate could change on resume' in message
  assert _snapshot(run_dir) == before  # config.json, vocabularies, checkpoints: untouched


@pytest.mark.slow
def test_extending_num_steps_needs_the_flag_and_says_what_the_schedule_does(tmp_path):
  run_dir = str(tmp_path / 'run')
  common = {'optim.warmup_steps': 0, 'optim.schedule': 'cosine', 'optim.end_lr_fraction': 0.0}
  train.train_and_evaluate(smoke_config(**common), run_dir)
  longer = smoke_config(**common, **{'train.num_steps': 8})
  # Cosine from peak 0.003 to 0, at step 4: over 4 steps p = 1, lr = 0.003 (1 + cos(pi)) / 2 = 0;
  # over 8 steps p = 0.5, lr = 0.003 (1 + cos(pi / 2)) / 2 = 0.0015.
  with pytest.raises(resume.WorkdirConfigError) as refused:
    train.train_and_evaluate(longer, run_dir)
  assert ('train.num_steps: 4 -> 8 (the cosine schedule is rebuilt over 8 steps, so at step 4 '
          'the learning rate jumps from 0 to 0.0015)') in str(refused.value)
  assert '--allow_config_change=train.num_steps' in str(refused.value)

  final = train.train_and_evaluate(longer, run_dir, allow_config_change=('train.num_steps',))
  assert json.load(open(os.path.join(run_dir, 'final_metrics.json')))['trained_steps'] == 8
  assert final['test']['num_examples'] == 48
  assert json.load(open(os.path.join(run_dir, 'config.json')))['train']['num_steps'] == 8
  (change,) = [json.loads(line) for line in open(os.path.join(run_dir, layout.CONFIG_CHANGES))]
  assert change['step'] == 4 and change['changes'] == {'train.num_steps': [4, 8]}


@pytest.mark.slow
def test_keys_that_cannot_change_are_refused_even_when_named(tmp_path):
  run_dir = str(tmp_path / 'run')
  train.train_and_evaluate(smoke_config(), run_dir)
  with pytest.raises(resume.WorkdirConfigError, match=r'model.embed_dim: 8 -> 12 \(cannot '):
    train.train_and_evaluate(smoke_config(**{'model.embed_dim': 12}), run_dir,
                             allow_config_change=('model.embed_dim',))
  with pytest.raises(resume.WorkdirConfigError, match='train.num_steps=2 is below the step the '
                     r'run reached \(4\)'):
    train.train_and_evaluate(smoke_config(**{'train.num_steps': 2}), run_dir,
                             allow_config_change=('train.num_steps',))
  # Without config.json the config saved in the latest checkpoint is compared.
  os.remove(os.path.join(run_dir, 'config.json'))
  with pytest.raises(resume.WorkdirConfigError, match='compared with the latest checkpoint'):
    train.train_and_evaluate(smoke_config(**{'seed': 3}), run_dir)


def test_changed_keys_and_keys_attnlab_added_since():
  old = {'seed': 0, 'train': {'num_steps': 4, 'gone': 1}, 'eval': {'splits': ['eval']}}
  new = {'seed': 0, 'train': {'num_steps': 4, 'patience': 0}, 'eval': {'splits': ['eval']}}
  changes = resume.changed_keys(old, new)
  assert changes == {'train.gone': (1, '(absent)'), 'train.patience': ('(absent)', 0)}


def test_a_resumed_run_must_build_the_same_vocabularies(tmp_path):
  Vocab.from_symbols('abc').save(tmp_path / 'source_vocab.json')
  Vocab.from_symbols('abc').save(tmp_path / 'target_vocab.json')
  same = types.SimpleNamespace(source_vocab=Vocab.from_symbols('abc'),
                               target_vocab=Vocab.from_symbols('abc'))
  resume.check_vocabularies(str(tmp_path), same)
  grown = types.SimpleNamespace(source_vocab=Vocab.from_symbols('abcd'),
                                target_vocab=Vocab.from_symbols('abc'))
  with pytest.raises(resume.WorkdirConfigError, match='source_vocab.json differs from the source '
                     r'vocabulary this config builds \(8 ids\): the data changed'):
    resume.check_vocabularies(str(tmp_path), grown)


def test_a_key_to_allow_that_is_no_config_key_is_refused(tmp_path):
  run_dir = str(tmp_path / 'run')
  with pytest.raises(resume.WorkdirConfigError) as refused:
    train.train_and_evaluate(smoke_config(), run_dir,
                             allow_config_change=('train.num_steps', 'train.num_step'))
  assert str(refused.value) == (
    "--allow_config_change=train.num_steps,train.num_step: 'train.num_step' is not a config key "
    '(did you mean train.num_steps?); the keys that may change on resume with it: '
    'train.num_steps, train.eval_every, train.patience, train.min_improvement, '
    'train.divergence_factor, optim.learning_rate, optim.plateau_min_scale, '
    'optim.plateau_at_floor')
  assert not os.path.exists(run_dir)
  with pytest.raises(resume.WorkdirConfigError, match="'bogus.key' is not a config key; "):
    resume.check_allowed_changes(run_dir, smoke_config(), ('bogus.key',))
  # A key that only the run's config.json has (attnlab removed it since) may be named.
  os.makedirs(run_dir)
  with open(os.path.join(run_dir, 'config.json'), 'w') as f:
    json.dump({'train': {'gone': 1}}, f)
  resume.check_allowed_changes(run_dir, smoke_config(), ('train.gone', 'train.num_steps'))


def _refuse_writes_in(monkeypatch, directory, error, *, lock_too):
  """os.open of a file in `directory` for writing fails with `error` (root writes anywhere, so a
  chmod cannot make a read-only folder in tests); the lock file too if `lock_too`."""
  real_open = os.open

  def guarded(path, flags, *args, **kwargs):
    inside = os.path.abspath(os.fspath(path)).startswith(directory)
    is_lock = os.fspath(path).endswith(layout.LOCK_FILE)
    if inside and flags & (os.O_WRONLY | os.O_RDWR) and (lock_too or not is_lock):
      raise OSError(error, os.strerror(error), os.fspath(path))
    return real_open(path, flags, *args, **kwargs)

  monkeypatch.setattr(os, 'open', guarded)


@pytest.mark.parametrize(('error', 'lock_too', 'problem'), [
  (errno.EROFS, True, 'it is on a read-only file system'),
  (errno.EACCES, False, 'it is not writable (permission denied)'),
])
def test_a_finished_run_in_a_read_only_folder_is_one_error(tmp_path, monkeypatch, error, lock_too,
                                                          problem):
  run_dir = str(tmp_path / 'run')
  train.train_and_evaluate(smoke_config(), run_dir)
  before = _snapshot(run_dir)
  _refuse_writes_in(monkeypatch, run_dir, error, lock_too=lock_too)
  with pytest.raises(UserError) as refused:
    train.train_and_evaluate(smoke_config(), run_dir)  # a rerun evaluates and writes again
  assert str(refused.value) == (
    f'--workdir={run_dir}: {problem}; training (and a rerun of a finished run) writes there, so '
    'copy the run to a writable folder to resume it, or name another --workdir')
  monkeypatch.undo()
  assert _snapshot(run_dir) == before
  with run_lock.RunLock(run_dir):  # the refused process let go of the lock
    pass
