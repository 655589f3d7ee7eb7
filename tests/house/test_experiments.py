"""Every experiment file expands into trials whose configs exist and validate.

An experiment that names a key the config no longer has, or a value outside its choices, fails
here instead of hours into a sweep. The command line each trial runs must build the same config
as the in-process check, and every variant must run the same seeds (paired comparisons).
"""

import contextlib
import glob
import json
import os
import signal
import subprocess
import sys

import pytest
from support import REPO
from support.config_builders import parse_command_line

from attnlab.sweeps import shared, trials

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


def _config_keys(name: str) -> dict[str, str]:
  """trial name -> shared.config_key of its resolved config, for experiments/NAME.py."""
  experiment = trials.load_experiment(f'experiments/{name}.py')
  configs, _ = trials.check_trials(experiment.trials)
  return {n: shared.config_key(c.to_dict()) for n, c in configs.items()}


def test_overlapping_trials_have_equal_configs_so_sweeps_share_them(monkeypatch):
  """The cells the ablations have in common are the same configs (attnlab/sweeps/shared.py
  copies them instead of training them twice), and the local windows' D is the paper's."""
  monkeypatch.chdir(REPO)
  bottleneck, grid_bible = _config_keys('bottleneck'), _config_keys('score_timing_bible')
  grid_g2p, local_global = _config_keys('score_timing'), _config_keys('local_global')
  for seed in (0, 1):
    for cell in ('timing=bahdanau,score=concat,input_feeding=False',
                 'timing=luong,score=general,input_feeding=True'):
      timing, score, feeding = cell.split(',')
      assert bottleneck[f'bible,{cell},seed={seed}'] == grid_bible[
        f'bible,{score},{timing},{feeding},seed={seed}']
    assert local_global[f'bible,window=global,seed={seed}'] == bottleneck[
      f'bible,timing=luong,score=general,input_feeding=True,seed={seed}']
  for seed in (0, 1, 2):
    assert local_global[f'g2p,window=global,seed={seed}'] == grid_g2p[
      f'g2p,score=general,timing=luong,input_feeding=True,seed={seed}']
  radius = {
    (name.split(',')[0], window): json.loads(key)['model.attention.window_radius']
    for name, key in local_global.items()
    for window in ('local_m', 'local_p') if f'window={window}' in name
  }
  assert radius == {('bible', 'local_m'): 10, ('bible', 'local_p'): 10,
                    ('g2p', 'local_m'): 3, ('g2p', 'local_p'): 3}


def _make_ablations(*settings):
  # PY=echo prints each sweep command instead of running it; -o: the venv stamp is not rebuilt.
  return subprocess.run(['make', '-s', 'ablations', 'PY=echo', '-o', '.venv/.installed',
                         *settings], cwd=REPO, capture_output=True, text=True)


def test_make_ablations_sweeps_every_archived_experiment_after_those_it_copies_from():
  """`make ablations` runs each experiment whose COMMAND archives in results/, as that COMMAND
  does, and every experiment after the ones it shares trials with (shared.py copies only what
  an earlier sweep finished); each of its worker processes goes through the whole list."""
  names = {os.path.relpath(path, REPO)[len('experiments/'):-3]: path for path in EXPERIMENTS}
  archived = {name for name, path in names.items()
              if f'--archive=results/{name}' in open(path).read()}
  run = _make_ablations('ABLATION_WORKERS=1')
  assert run.returncode == 0, run.stderr
  order = []
  for line in run.stdout.splitlines():
    name = line.split('experiments/')[1].split('.py')[0]
    assert line == (f'-m attnlab.sweep experiments/{name}.py --parallel=1 '
                    f'--workdir=runs/{name} --archive=results/{name}')
    order.append(name)
  assert sorted(order) == sorted(archived)
  for donor, sharer in [('bottleneck', 'score_timing_bible'), ('bottleneck', 'local_global'),
                        ('score_timing', 'local_global')]:
    assert order.index(donor) < order.index(sharer)
  workers = _make_ablations()  # the default: two workers, each through the whole list
  assert workers.returncode == 0, workers.stderr
  assert sorted(workers.stdout.splitlines()) == sorted(
    f'{line} --cpu_share={worker}/2' for line in run.stdout.splitlines() for worker in (1, 2))


def test_make_ablations_refuses_an_unknown_experiment_before_running_any():
  run = _make_ablations('ABLATIONS=heads nope')
  assert run.returncode != 0
  assert run.stdout == ''  # not even heads ran
  assert run.stderr.splitlines()[0] == 'error: no such file: experiments/nope.py'


FAKE_SWEEP = """\
#!{python}
# Stands in for `python -m attnlab.sweep`: says it started, and on SIGTERM that it stopped.
import os, signal, sys, time
def say(what):  # one write: the two workers' lines must not interleave
  os.write(1, f'{{what}} {{sys.argv[3]}}\\n'.encode())
def stop(*_):
  say('stopped')
  sys.exit(1)
signal.signal(signal.SIGTERM, stop)
say('started')
time.sleep(60)
"""


def test_ctrl_c_stops_every_worker_of_make_ablations(tmp_path):
  """Background jobs of a script ignore SIGINT: the recipe must pass Ctrl-C on to the sweeps
  (as SIGTERM, which they answer by stopping their trials), and start no later experiment."""
  fake = tmp_path / 'python'
  fake.write_text(FAKE_SWEEP.format(python=sys.executable))
  fake.chmod(0o755)
  # A terminal's foreground job starts with SIGINT at its default; a suite started under nohup or
  # as a background job inherits it ignored, and a shell cannot trap a signal ignored on entry.
  # Exec'ing make from a process that reset it keeps that default without a preexec_fn.
  with_sigint = ('import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); '
                 'os.execvp(sys.argv[1], sys.argv[1:])')
  make = subprocess.Popen([sys.executable, '-c', with_sigint, 'make', '-s', 'ablations',
                           f'PY={fake}', '-o', '.venv/.installed', 'ABLATIONS=heads local_global'],
                          cwd=REPO, start_new_session=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  try:
    lines = [make.stdout.readline().strip() for _ in range(2)]
    assert lines == ['started experiments/heads.py'] * 2
    os.killpg(make.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends the foreground group
    rest, _ = make.communicate(timeout=30)
  finally:
    with contextlib.suppress(ProcessLookupError):
      os.killpg(make.pid, signal.SIGKILL)  # whatever a failure left running
  assert rest.count('stopped experiments/heads.py') == 2, rest
  assert 'local_global' not in rest


_FIXED_OF = """
import json, sys
from attnlab.sweeps import trials
experiment = trials.load_experiment(sys.argv[1])
print(json.dumps({t.name: t.fixed for t in experiment.trials}))
"""


def _fixed(path, sizes=None):
  """The trials' fixed overrides, read in a fresh process with ATTNLAB_SIZES=`sizes` (unset:
  None)."""
  env = {k: v for k, v in os.environ.items() if k != trials.SIZES_VARIABLE}
  if sizes is not None:
    env[trials.SIZES_VARIABLE] = sizes
  return subprocess.run([sys.executable, '-c', _FIXED_OF, path], cwd=REPO, capture_output=True,
                        text=True, env=env, check=False)


@pytest.mark.slow
def test_sizes_for_accelerators_are_picked_by_a_flag_not_an_edit(tmp_path):
  env = {k: v for k, v in os.environ.items() if k != trials.SIZES_VARIABLE}
  cpu = json.loads(_fixed('experiments/score_timing_bible.py').stdout)
  fast = json.loads(_fixed('experiments/score_timing_bible.py', 'accelerator').stdout)
  assert {t['model.hidden_size'] for t in cpu.values()} == {128}
  assert {(t['model.hidden_size'], t['model.embed_dim']) for t in fast.values()} == {(256, 128)}
  assert len(fast) == len(cpu) == 27  # 9 variants x 3 seeds
  # On CPU the seeds trained before sizes.FINISH keep their stop at the floor; at accelerator
  # sizes every trial is new and FINISHes.
  finish = {k for k, t in cpu.items() if t.get('optim.plateau_at_floor') == 'hold'}
  assert finish == {k for k in cpu if k.endswith('seed=2')}
  assert all(t['optim.plateau_at_floor'] == 'hold' and t['train.min_improvement'] == 0.1
             for t in fast.values())
  g2p = json.loads(_fixed('experiments/score_timing.py', 'accelerator').stdout)
  assert {(t['model.hidden_size'], t['model.encoder_layers']) for t in g2p.values()} == {(256, 2)}
  bad = _fixed('experiments/score_timing.py', 'tpu')
  assert "ATTNLAB_SIZES='tpu' is not valid; choose from cpu, accelerator" in bad.stderr
  # The command's flag sets the variable before the experiment file is read.
  result = subprocess.run(
    [sys.executable, '-m', 'attnlab.sweep', 'experiments/heads.py', '--sizes=accelerator',
     '--dry_run', f'--workdir={tmp_path / "heads"}'], cwd=REPO, capture_output=True, text=True,
    env=env, check=False)
  assert result.returncode == 0, result.stderr
  assert 'seed=2' in result.stdout
  result = subprocess.run(
    [sys.executable, '-m', 'attnlab.sweep', 'experiments/heads.py', '--sizes=gpu', '--dry_run',
     f'--workdir={tmp_path / "heads"}'], cwd=REPO, capture_output=True, text=True, env=env,
    check=False)
  assert result.returncode == 2 and result.stderr.count('\n') == 1, result.stderr
  result = subprocess.run(
    [sys.executable, '-m', 'attnlab.sweep', 'experiments/heads.py', '--dry_run',
     f'--workdir={tmp_path / "heads"}'], cwd=REPO, capture_output=True, text=True,
    env={**env, trials.SIZES_VARIABLE: 'tpu'}, check=False)
  assert result.returncode == 2 and result.stderr == (
      "error: ATTNLAB_SIZES='tpu' is not valid; choose from cpu, accelerator\n")
