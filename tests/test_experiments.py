"""Every experiment file expands into trials whose configs exist and validate.

An experiment that names a key the config no longer has, or a value outside its choices, fails
here instead of hours into a sweep. The command line each trial runs must build the same config
as the in-process check, and every variant must run the same seeds (paired comparisons).
"""

import glob
import os

import pytest
from conftest import parse_command_line

from attnlab.sweeps import trials

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Experiment files define sweep(add); experiments/sizes.py holds the sizes they share.
EXPERIMENTS = sorted(
  p for pattern in ('*.py', 'learning_speed/*.py')
  for p in glob.glob(os.path.join(REPO, 'experiments', pattern))
  if 'def sweep(' in open(p).read()
)


def test_the_ablations_exist():
  names = {os.path.relpath(p, os.path.join(REPO, 'experiments'))[:-3] for p in EXPERIMENTS}
  ablations = {'score_timing', 'bottleneck', 'local_global', 'heads'}
  assert ablations | {'score_timing_bible'} <= names
  assert {f'learning_speed/{name}' for name in ablations} <= names


@pytest.fixture(params=EXPERIMENTS, ids=lambda p: os.path.relpath(p, REPO)[len('experiments/'):-3])
def experiment(request, monkeypatch):
  monkeypatch.chdir(REPO)  # experiments name config files relative to the repository
  return trials.load_experiment(os.path.relpath(request.param, REPO))


def test_every_trial_config_is_valid(experiment):
  configs, errors = trials.check_trials(experiment.trials)
  assert not errors, '\n'.join(f'{name}: {error}' for name, error in errors.items())
  assert len(configs) == len(experiment.trials)


def test_command_lines_build_the_checked_configs(experiment):
  for trial in experiment.trials:
    command = trial.command(os.path.join('runs', trial.name))
    assert command[1:3] == ['-m', 'attnlab.main']
    assert parse_command_line(command).to_dict() == trials.trial_config(trial).to_dict(), (
      trial.name
    )


def test_variants_share_seeds(experiment):
  seeds = {}
  for trial in experiment.trials:
    assert trials.SEED_KEY in trial.overrides, f'{trial.name}: set the seed explicitly'
    key = (trial.config, repr(sorted(trial.variant.items())))
    seeds.setdefault(key, set()).add(trial.overrides[trials.SEED_KEY])
  by_group = {}
  for (group, _), group_seeds in seeds.items():
    by_group.setdefault(group, []).append(group_seeds)
  for group, seed_sets in by_group.items():
    assert all(s == seed_sets[0] for s in seed_sets), f'{group}: variants use different seeds'


def test_docstring_gives_the_command(experiment):
  module_doc = open(os.path.join(REPO, experiment.path)).read().split('"""')[1]
  assert f'python -m attnlab.sweep {experiment.path}' in module_doc
