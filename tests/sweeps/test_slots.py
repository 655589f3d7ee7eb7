"""Trials running side by side (`attnlab.sweep --parallel=N`) each get their own devices
(attnlab/sweeps/slots.py)."""

import io
import json
import os
import re
import sys
import time

import pytest
from support.experiment_files import write_experiment

from attnlab import sweep
from attnlab.sweeps import slots

SEEDS = """
BASE = 'configs/reverse.py:smoke'
def sweep(add):
  for seed in (0, 2, 3, 4):
    add(**{'seed': seed})
"""

# Records the devices its environment gives it, waits until two trials are running at once,
# then goes on as conftest.py's fake trial.
SLOT_MAIN = """\
#!{python}
import json, os, sys, time
args = dict(a.split('=', 1) for a in sys.argv[3:])
folder = os.environ['SLOTS_SEEN']
seen = {{k: os.environ.get(k) for k in ('CUDA_VISIBLE_DEVICES', 'XLA_FLAGS',
                                        'XLA_PYTHON_CLIENT_MEM_FRACTION')}}
time.sleep(0.5)  # the sweep pins a trial as it starts: a real one reaches JAX seconds later
seen['cpus'] = sorted(os.sched_getaffinity(0))
with open(os.path.join(folder, 'seed' + args['--config.seed']), 'w') as f:
  json.dump(seen, f)
deadline = time.monotonic() + 120
while len(os.listdir(folder)) < 2 and time.monotonic() < deadline:
  time.sleep(0.01)
os.execv({fake!r}, [{fake!r}, *sys.argv[1:]])
"""


def test_gpus_are_split_into_one_group_per_slot():
  gpus = {'CUDA_VISIBLE_DEVICES': '0,1,2,3,4,5,6,7'}
  assert [s.env for s in slots.plan(2, gpus)] == [{'CUDA_VISIBLE_DEVICES': '0,1,2,3'},
                                                  {'CUDA_VISIBLE_DEVICES': '4,5,6,7'}]
  assert [s.devices for s in slots.plan(3, gpus)] == ['GPUs 0,1', 'GPUs 2,3,4', 'GPUs 5,6,7']
  assert [s.env for s in slots.plan(1, {'CUDA_VISIBLE_DEVICES': '2,5'})] == [
      {'CUDA_VISIBLE_DEVICES': '2,5'}]


def test_more_slots_than_gpus_share_them_and_their_memory():
  planned = slots.plan(4, {'CUDA_VISIBLE_DEVICES': '0,1'})
  assert [s.env for s in planned] == [
      {'CUDA_VISIBLE_DEVICES': g, 'XLA_PYTHON_CLIENT_MEM_FRACTION': '0.375'}
      for g in ('0', '1', '0', '1')]
  assert planned[0].devices == 'GPU 0 (38% of its memory)'


def test_without_gpus_each_slot_is_pinned_to_its_own_cpus(monkeypatch):
  monkeypatch.setattr(slots.shutil, 'which', lambda name: None)  # no nvidia-smi here
  planned = slots.plan(2, {}, cpus=[0, 1])
  assert [(s.env, s.cpus, s.devices) for s in planned] == [({}, (0,), 'CPU 0'),
                                                           ({}, (1,), 'CPU 1')]
  assert [s.cpus for s in slots.plan(2, {'CUDA_VISIBLE_DEVICES': ''}, cpus=[0, 1])] == [
      (0,), (1,)]
  assert [s.devices for s in slots.plan(3, {}, cpus=list(range(8)))] == [
      'CPUs 0-1', 'CPUs 2-4', 'CPUs 5-7']
  assert [s.cpus for s in slots.plan(3, {}, cpus=[4, 6])] == [(4,), (6,), (4,)]  # take turns
  assert [s.devices for s in slots.plan(2, {}, cpus=[0, 2, 4, 6])] == ['CPUs 0,2', 'CPUs 4,6']


def test_one_slot_or_an_unknown_cpu_set_is_not_pinned(monkeypatch):
  monkeypatch.setattr(slots.shutil, 'which', lambda name: None)
  for planned in (slots.plan(1, {}, cpus=[0, 1]), slots.plan(2, {}, cpus=[])):
    assert all((s.env, s.cpus, s.devices) == ({}, None, 'the shared machine') for s in planned)
    assert not any(s.has_own_devices for s in planned)


def test_simulated_cpu_devices_are_divided_with_the_cpus(monkeypatch):
  monkeypatch.setattr(slots.shutil, 'which', lambda name: None)
  flags = {'XLA_FLAGS': '--xla_cpu_multi_thread_eigen=false '
                        '--xla_force_host_platform_device_count=8'}
  planned = slots.plan(2, flags, cpus=[0, 1, 2, 3])
  assert [s.env for s in planned] == [
      {'XLA_FLAGS': '--xla_cpu_multi_thread_eigen=false '
                    '--xla_force_host_platform_device_count=4'}] * 2
  assert [(s.cpus, s.devices) for s in planned] == [
      ((0, 1), 'CPUs 0-1, 4 simulated CPU devices'), ((2, 3), 'CPUs 2-3, 4 simulated CPU devices')]
  assert [s.env for s in slots.plan(1, flags, cpus=[0, 1])] == [{}]  # one trial keeps all 8
  unknown = slots.plan(2, flags, cpus=[])  # a platform that does not say: devices split alone
  assert [(s.env, s.cpus, s.devices) for s in unknown] == [
      (planned[0].env, None, '4 simulated CPU devices')] * 2


def test_nvidia_smi_names_the_gpus_when_no_variable_does(monkeypatch):
  listed = ('GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n'
            'GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-2)\n')
  monkeypatch.setattr(slots.shutil, 'which', lambda name: '/usr/bin/nvidia-smi')
  monkeypatch.setattr(slots.subprocess, 'run',
                      lambda *a, **k: type('Done', (), {'stdout': listed})())
  assert slots.visible_gpus({}) == ['0', '1']


def _recording_python(tmp_path, monkeypatch, template: str, fake_python):
  """The interpreter the sweep starts (`template` filled in) and the folder it records in."""
  runner_python = tmp_path / 'recording_python'
  runner_python.write_text(template.format(python=sys.executable, fake=fake_python))
  runner_python.chmod(0o755)
  seen = tmp_path / 'seen'
  seen.mkdir()
  monkeypatch.setenv('SLOTS_SEEN', str(seen))
  monkeypatch.delenv('CUDA_VISIBLE_DEVICES', raising=False)
  return runner_python, seen


ALLOWED_CPUS = slots.allowed_cpus()
CPU_HALVES = [ALLOWED_CPUS[:len(ALLOWED_CPUS) // 2], ALLOWED_CPUS[len(ALLOWED_CPUS) // 2:]]


@pytest.mark.parametrize('env, key, expected', [
    ({'XLA_FLAGS': '--xla_force_host_platform_device_count=8'}, 'XLA_FLAGS',
     ['--xla_force_host_platform_device_count=4'] * 2),
    ({'XLA_FLAGS': '--xla_force_host_platform_device_count=8'}, 'cpus', CPU_HALVES),
    ({}, 'cpus', CPU_HALVES),
    ({'CUDA_VISIBLE_DEVICES': '0,1,2,3,4,5,6,7'}, 'CUDA_VISIBLE_DEVICES', ['0,1,2,3', '4,5,6,7']),
    ({'CUDA_VISIBLE_DEVICES': '0,1,2,3,4,5,6,7'}, 'cpus', [ALLOWED_CPUS] * 2),  # GPUs: not pinned
])
def test_two_trials_running_at_once_see_their_own_devices(tmp_path, monkeypatch, fake_python,
                                                          env, key, expected):
  if key == 'cpus' and len(ALLOWED_CPUS) < 2:
    pytest.skip(f'pinning needs 2 CPUs; this process may use {len(ALLOWED_CPUS)}')
  runner_python, seen = _recording_python(tmp_path, monkeypatch, SLOT_MAIN, fake_python)
  for name, value in env.items():
    monkeypatch.setenv(name, value)
  path = write_experiment(tmp_path, SEEDS)
  out = io.StringIO()
  started = time.monotonic()
  code = sweep.run_sweep(path, str(tmp_path / 'runs'), parallel=2, report=False, out=out,
                         python=str(runner_python))
  assert code == 0, out.getvalue()
  assert time.monotonic() - started < 100, 'two trials never ran at once'
  first_two = {}
  for line in out.getvalue().splitlines():
    match = re.match(r'\[start\] seed=(\d+) \(slot (\d)', line)
    if match and len(first_two) < 2:
      first_two[match.group(1)] = int(match.group(2))
  assert sorted(first_two.values()) == [0, 1], out.getvalue()  # the first two: both slots
  for seed, slot in first_two.items():
    with open(seen / f'seed{seed}') as f:
      assert json.load(f)[key] == expected[slot]
  assert out.getvalue().count('devices: slot 0: ') == 1
  assert len(os.listdir(seen)) == 4


def test_a_cpu_share_narrows_every_slot_to_its_part_of_the_cpus(monkeypatch):
  monkeypatch.setattr(slots.shutil, 'which', lambda name: None)
  assert [s.cpus for s in slots.plan(1, {}, cpus=[0, 1, 2, 3], share=(2, 2))] == [(2, 3)]
  assert [s.cpus for s in slots.plan(2, {}, cpus=list(range(8)), share=(1, 2))] == [(0, 1),
                                                                                   (2, 3)]
  assert [s.cpus for s in slots.plan(1, {}, cpus=[0], share=(2, 2))] == [(0,)]  # take turns
  on_gpus = slots.plan(2, {'CUDA_VISIBLE_DEVICES': '0,1'}, cpus=[0, 1, 2, 3], share=(2, 2))
  assert [(s.env, s.cpus, s.devices) for s in on_gpus] == [
      ({'CUDA_VISIBLE_DEVICES': '0'}, (2, 3), 'GPUs 0, CPUs 2-3'),
      ({'CUDA_VISIBLE_DEVICES': '1'}, (2, 3), 'GPUs 1, CPUs 2-3')]


@pytest.mark.parametrize('text', ['0/2', '3/2', '1', 'a/b', '', '1/0'])
def test_a_bad_cpu_share_is_one_error_before_anything_is_written(tmp_path, text):
  path = write_experiment(tmp_path, SEEDS)
  with pytest.raises(slots.SweepError, match=r"^--cpu_share='.*': give K/N with 1 <= K <= N"):
    sweep.run_sweep(path, str(tmp_path / 'runs'), cpu_share=text, report=False)
  assert not (tmp_path / 'runs').exists()
  assert slots.parse_share(' 2 / 3 ') == (2, 3)


def test_a_cpu_share_is_refused_for_slurm(tmp_path):
  path = write_experiment(tmp_path, SEEDS)
  with pytest.raises(slots.SweepError, match='^--cpu_share pins the trials of a local sweep; '):
    sweep.run_sweep(path, str(tmp_path / 'runs'), cpu_share='1/2', backend='slurm')
  assert not (tmp_path / 'runs').exists()


# Records the CPUs it may run on (after a moment, as SLOT_MAIN), then goes on as conftest.py's
# fake trial.
AFFINITY_MAIN = """\
#!{python}
import json, os, sys, time
time.sleep(0.5)
args = dict(a.split('=', 1) for a in sys.argv[3:])
with open(os.path.join(os.environ['SLOTS_SEEN'], 'seed' + args['--config.seed']), 'w') as f:
  json.dump(sorted(os.sched_getaffinity(0)), f)
os.execv({fake!r}, [{fake!r}, *sys.argv[1:]])
"""


@pytest.mark.skipif(len(ALLOWED_CPUS) < 2, reason='a share of the CPUs needs 2 of them')
@pytest.mark.parametrize('share, expected', [('1/2', CPU_HALVES[0]), ('2/2', CPU_HALVES[1]),
                                             (None, ALLOWED_CPUS)])
def test_a_sweep_with_a_cpu_share_runs_its_trials_there(tmp_path, monkeypatch, fake_python,
                                                        share, expected):
  runner_python, seen = _recording_python(tmp_path, monkeypatch, AFFINITY_MAIN, fake_python)
  monkeypatch.setattr(slots.shutil, 'which', lambda name: None)
  path = write_experiment(tmp_path, SEEDS)
  out = io.StringIO()
  code = sweep.run_sweep(path, str(tmp_path / 'runs'), cpu_share=share, report=False, out=out,
                         python=str(runner_python))
  assert code == 0, out.getvalue()
  for name in os.listdir(seen):
    with open(seen / name) as f:
      assert json.load(f) == expected
  assert len(os.listdir(seen)) == 4
