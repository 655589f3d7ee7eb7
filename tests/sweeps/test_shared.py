"""Trials two experiments share (attnlab/sweeps/shared.py): a sweep copies a trial that another
experiment's archive holds finished under the same resolved config, instead of training it."""

import io
import json
import os
import threading
import time

from attnlab import sweep
from attnlab.rundir import layout
from attnlab.sweeps import claims, shared, trial_dirs
from attnlab.sweeps import runner as sweep_runner
from attnlab.sweeps import trials as trials_lib
from attnlab.sweeps.trials import Trial

SMOKE = 'configs/reverse.py:smoke'
# Experiment B: seeds 0 and 1 under the same FIXED; the 'bottleneck' archive (A) holds seed 0
# finished under exactly that config, seed 1 under another learning rate.
EXPERIMENT_B = f"""
BASE = {SMOKE!r}
def sweep(add):
  for seed in (0, 1):
    add(fixed={{'optim.learning_rate': 0.01}}, **{{'seed': seed}})
"""
DONOR_RESULT = {'step': 4, 'test': {'sequence_accuracy': 0.875}}


def _finished_donor(archive, name, overrides, fixed):
  """A finished trial in `archive` as the runner leaves it: config.json of its resolved config,
  final_metrics.json, sweep_status.json."""
  trial = Trial(name, SMOKE, overrides, fixed)
  directory = trial_dirs.trial_dir(archive, trial)
  os.makedirs(directory)
  with open(os.path.join(directory, layout.CONFIG_FILE), 'w') as f:
    f.write(trials_lib.trial_config(trial).to_json_best_effort(indent=2, sort_keys=True))
  with open(os.path.join(directory, trial_dirs.FINAL_FILE), 'w') as f:
    json.dump(DONOR_RESULT, f)
  trial_dirs.write_status(
    directory, {**trial_dirs.identity(trial), 'status': 'finished', 'wall_s': 60.0}
  )
  return directory


def _setup(tmp_path):
  results = tmp_path / 'results'
  _finished_donor(str(results / 'bottleneck'), 'timing=luong,seed=0', {'seed': 0},
                  {'optim.learning_rate': 0.01})
  _finished_donor(str(results / 'bottleneck'), 'timing=luong,seed=1', {'seed': 1},
                  {'optim.learning_rate': 0.02})  # one key differs: another trial
  path = tmp_path / 'b.py'
  path.write_text(EXPERIMENT_B)
  return str(path), str(results / 'b'), str(tmp_path / 'runs' / 'b')


def test_a_trial_finished_in_another_archive_under_the_same_config_is_copied(
  tmp_path, fake_python
):
  experiment, archive, workdir = _setup(tmp_path)
  out = io.StringIO()
  code = sweep.run_sweep(experiment, workdir, archive=archive, report=False, out=out,
                         python=fake_python)
  assert code == 0, out.getvalue()
  text = out.getvalue()
  assert ('[shared] seed=0: finished as bottleneck/timing=luong,seed=0 under the same config; '
          'copied, not trained again') in text
  assert '[start] seed=0' not in text
  assert '[start] seed=1' in text  # the donor of seed 1 has another learning rate
  for root in (archive, workdir):
    copy = os.path.join(root, 'seed=0')
    assert trial_dirs.trial_state(copy) == 'finished'
    with open(os.path.join(copy, trial_dirs.FINAL_FILE)) as f:
      assert json.load(f) == DONOR_RESULT
    status = trial_dirs.read_status(copy)
    assert status[shared.COPIED_FROM] == 'bottleneck/timing=luong,seed=0'
    assert status['overrides'] == {'optim.learning_rate': 0.01, 'seed': 0}  # B's trial now
  # The rerun finds everything finished and copies nothing again.
  out = io.StringIO()
  assert sweep.run_sweep(experiment, workdir, archive=archive, report=False, out=out,
                         python=fake_python) == 0
  assert '[shared]' not in out.getvalue()
  assert '2 finished (skipped), 0 to run' in out.getvalue()


def test_dry_run_shows_what_the_sweep_would_copy_and_writes_nothing(tmp_path):
  """The status before a run: a trial another experiment's archive holds under the same config
  reads as `shared`, with the donor's result and where it comes from; one whose config differs
  stays new; --noshare lists it as new too. Nothing is copied or created."""
  experiment, archive, workdir = _setup(tmp_path)
  for share, seed0 in ((True, ['shared', '0/4', 'seed=0', 'test sequence_accuracy 0.8750 '
                                '(as bottleneck/timing=luong,seed=0)']),
                       (False, ['new', '0/4', 'seed=0'])):
    out = io.StringIO()
    assert sweep.run_sweep(experiment, workdir, archive=archive, share=share, dry_run=True,
                           out=out) == 0
    rows = {line.split()[3]: line.split(None, 4)[1:] for line in out.getvalue().splitlines()
            if line.strip()[:1].isdigit()}
    assert rows['seed=0'] == seed0
    assert rows['seed=1'] == ['new', '0/4', 'seed=1']
  assert not os.path.exists(workdir) and not os.path.exists(archive)


def test_a_copy_of_a_copy_names_the_original(tmp_path):
  experiment, archive, workdir = _setup(tmp_path)
  [first, _] = trials_lib.load_experiment(experiment).trials
  configs, _ = trials_lib.check_trials([first])
  assert shared.copy_shared([first], configs, workdir, archive) == {
    'seed=0': 'bottleneck/timing=luong,seed=0'
  }
  # A third experiment with the same trial finds it twice (bottleneck and b): the original wins
  # by name order, and a copy would name the original anyway.
  third_archive = os.path.join(os.path.dirname(archive), 'c')
  copied = shared.copy_trial(os.path.join(archive, 'seed=0'), str(tmp_path / 'runs' / 'c'),
                             third_archive, first)
  assert copied == 'bottleneck/timing=luong,seed=0'


def test_noshare_trains_the_trial(tmp_path, fake_python):
  experiment, archive, workdir = _setup(tmp_path)
  out = io.StringIO()
  assert sweep.run_sweep(experiment, workdir, archive=archive, share=False, report=False,
                         out=out, python=fake_python) == 0
  assert '[shared]' not in out.getvalue()
  assert '[start] seed=0' in out.getvalue()
  assert shared.COPIED_FROM not in trial_dirs.read_status(os.path.join(archive, 'seed=0'))


def test_configs_equal_only_when_every_key_is():
  trial = Trial('t', SMOKE, {'seed': 0}, {})
  config = trials_lib.trial_config(trial)
  saved = json.loads(config.to_json_best_effort(indent=2, sort_keys=True))
  assert shared.config_key(config.to_dict()) == shared.config_key(saved)
  saved['model']['attention']['window_radius'] += 1  # a key the global window ignores
  assert shared.config_key(config.to_dict()) != shared.config_key(saved)


def test_a_trial_whose_config_trains_in_another_experiment_waits_and_is_copied(
  tmp_path, fake_python, monkeypatch
):
  """Experiment A is training seed 0's config right now (it holds the claim): B trains seed 1,
  waits for seed 0 instead of training it too, and copies it once A has archived it."""
  path = tmp_path / 'b.py'
  path.write_text(EXPERIMENT_B)
  results, workdir = tmp_path / 'results', str(tmp_path / 'runs' / 'b')
  [seed0, _] = trials_lib.load_experiment(str(path)).trials
  configs, _ = trials_lib.check_trials([seed0])
  donor_dir = str(tmp_path / 'runs' / 'bottleneck' / 'timing=luong,seed=0')
  key = shared.config_key(configs[seed0.name].to_dict())
  claim = claims.try_claim(claims.claim_path(workdir, key), donor_dir)
  assert isinstance(claim, claims.Claim)
  monkeypatch.setattr(sweep_runner, 'WAIT_RETRY_S', 0.05)
  out, code = io.StringIO(), []
  thread = threading.Thread(target=lambda: code.append(sweep.run_sweep(
    str(path), workdir, archive=str(results / 'b'), report=False, out=out, python=fake_python)))
  thread.start()
  try:
    deadline = time.monotonic() + 60
    while not ('[wait] seed=0' in out.getvalue() and '[archived] seed=1' in out.getvalue()):
      assert time.monotonic() < deadline, out.getvalue()
      time.sleep(0.05)
    assert thread.is_alive()  # seed 0 is still to come
    # A finishes: it archives the trial, then lets go of the claim.
    _finished_donor(str(results / 'bottleneck'), 'timing=luong,seed=0', {'seed': 0},
                    {'optim.learning_rate': 0.01})
  finally:
    claim.release()
  thread.join(timeout=60)
  text = out.getvalue()
  assert code == [0], text
  assert (f'[wait] seed=0: the same config is training in {donor_dir}; copied from there when '
          'it finishes') in text
  assert '[shared] seed=0: finished as bottleneck/timing=luong,seed=0' in text
  assert '[start] seed=0' not in text
  assert [line for line in text.splitlines() if line.startswith('sweep ')][-1].startswith(
    'sweep 2/2 done, 0 failed, 0 running')  # the copy counts as done
  assert trial_dirs.read_status(os.path.join(workdir, 'seed=0'))[shared.COPIED_FROM] == (
    'bottleneck/timing=luong,seed=0')
