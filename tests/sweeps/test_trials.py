"""Trials from experiment files (attnlab/sweeps/trials.py): readable names, overrides equal to
the command line, bad keys, values and experiment files refused, labels kept in the manifest."""

import pytest
from support.config_builders import parse_command_line
from support.experiment_files import write_experiment

from attnlab.config.fields import ConfigError
from attnlab.sweeps import trial_dirs, trials
from attnlab.sweeps.trials import SweepError, Trial

SMOKE = 'configs/reverse.py:smoke'


def test_names_are_readable_safe_and_depend_on_the_trial_alone():
  name = trials.trial_name
  assert name({'model.attention.score': 'dot', 'seed': 0}) == 'score=dot,seed=0'
  assert name({'seed': 1}, 'configs/dates.py') == 'dates,seed=1'
  assert name({'task.train_lengths': (5, 60)}, SMOKE) == 'reverse-smoke,train_lengths=5-60'
  heads = {'model.attention.num_heads': 2, 'model.transformer.num_heads': 4}
  assert name(heads) == 'attention.num_heads=2,transformer.num_heads=4'
  assert name({'task.data_dir': '/data/my set'}) == 'data_dir=-data-my-set'
  assert name({}) == 'base'
  long_a = {f'model.key{i}': 'v' * 20 for i in range(8)}
  long_b = {**long_a, 'model.key7': 'w' * 20}
  assert len(name(long_a)) <= 120 and name(long_a) != name(long_b)
  assert name(long_a) == name(dict(long_a))


def test_overrides_equal_the_command_line():
  overrides = {
    'task.train_lengths': (5, 60),
    'model.attention.input_feeding': False,
    'optim.learning_rate': 0.001,
    'model.attention.score': 'concat',
    'seed': 7,
    'eval.splits': ('eval', 'test'),
    'model.dropout': 0.0,
    'optim.eps': 1e-07,
  }
  trial = Trial('t', SMOKE, overrides, {'train.num_steps': 3})
  in_process = trials.trial_config(trial)
  assert in_process.task.train_lengths == (5, 60) and in_process.train.num_steps == 3
  assert in_process.model.attention.input_feeding is False
  assert parse_command_line(trial.command('/tmp/x')).to_dict() == in_process.to_dict()


def test_unknown_keys_and_bad_values_name_the_key():
  config = trials.load_config(SMOKE)
  with pytest.raises(ConfigError, match=r'model.attention.scroe: model.attention has .*score'):
    trials.apply_overrides(config, {'model.attention.scroe': 'dot'})
  with pytest.raises(ConfigError, match='nosuch.key: the top level has .*seed'):
    trials.apply_overrides(config, {'nosuch.key': 1})
  with pytest.raises(ConfigError, match="seed='one'"):
    trials.apply_overrides(config, {'seed': 'one'})
  with pytest.raises(ConfigError, match='input_feeding=1: expected bool'):
    trials.apply_overrides(config, {'model.attention.input_feeding': 1})
  with pytest.raises(ConfigError, match='model.attention is a group'):
    trials.apply_overrides(config, {'model.attention': 'dot'})
  with pytest.raises(ConfigError, match="'gneral' is not valid; choose from concat, dot"):
    trials.trial_config(Trial('t', SMOKE, {'model.attention.score': 'gneral'}, {}))


@pytest.mark.parametrize(
  'body, message',
  [
    ('def sweep(add):\n  add(seed=0)\n', 'needs BASE'),
    (f'BASE = {SMOKE!r}\n', 'needs a function sweep'),
    (f'BASE = {SMOKE!r}\ndef sweep(add):\n  pass\n', 'added no trials'),
    (f'BASE = {SMOKE!r}\ndef sweep(add):\n  add(seed=0)\n  add(seed=0)\n', 'share the directory'),
    (f'BASE = {SMOKE!r}\ndef sweep(add):\n  add(**{{"task.name": {{}}}})\n', 'must be bool'),
    (f'BASE = {SMOKE!r}\ndef sweep(add):\n  add(label="a", seed=0)\n  add(label="b", seed=1)\n',
     'labelled both'),
    (f'BASE = {SMOKE!r}\ndef sweep(add):\n  add(label="a", seed=0)\n'
     '  add(label="a", **{"model.dropout": 0.5})\n', 'names two variants'),
    (f'BASE = {SMOKE!r}\ndef sweep(add):\n  add(label=3, seed=0)\n', 'must be a string'),
  ],
)
def test_bad_experiment_files_are_refused(tmp_path, body, message):
  with pytest.raises(SweepError, match=message):
    trials.load_experiment(write_experiment(tmp_path, body))


def test_labels_name_variants_in_the_manifest_not_in_the_trial(tmp_path):
  body = (f'BASE = {SMOKE!r}\ndef sweep(add):\n  for seed in (0, 1):\n'
          '    add(label="no attention", **{"model.attention.timing": "none", "seed": seed})\n'
          '    add(**{"model.attention.timing": "luong", "seed": seed})\n')
  experiment = trials.load_experiment(write_experiment(tmp_path, body))
  assert [t.label for t in experiment.trials] == ['no attention', '', 'no attention', '']
  assert experiment.trials[0].name == 'timing=none,seed=0'  # the directory ignores the label
  assert trial_dirs.identity(experiment.trials[0]) == trial_dirs.identity(
    Trial('timing=none,seed=0', SMOKE, {'model.attention.timing': 'none', 'seed': 0}, {}))
  trials.write_manifest(str(tmp_path), experiment, 'local')
  _, read = trials.read_manifest(str(tmp_path))
  assert read == list(experiment.trials)
