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


def test_simulated_cpu_devices_are_divided_and_a_plain_cpu_is_shared(monkeypatch):
  monkeypatch.setattr(slots.shutil, 'which', lambda name: None)  # no nvidia-smi here
  flags = {'XLA_FLAGS': '--xla_cpu_multi_thread_eigen=false '
                        '--xla_force_host_platform_device_count=8'}
  assert [s.env for s in slots.plan(2, flags)] == [
      {'XLA_FLAGS': '--xla_cpu_multi_thread_eigen=false '
                    '--xla_force_host_platform_device_count=4'}] * 2
  assert [s.env for s in slots.plan(2, {})] == [{}, {}]
  assert [s.env for s in slots.plan(2, {'CUDA_VISIBLE_DEVICES': ''})] == [{}, {}]


def test_nvidia_smi_names_the_gpus_when_no_variable_does(monkeypatch):
  listed = ('GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n'
            'GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-2)\n')
  monkeypatch.setattr(slots.shutil, 'which', lambda name: '/usr/bin/nvidia-smi')
  monkeypatch.setattr(slots.subprocess, 'run',
                      lambda *a, **k: type('Done', (), {'stdout': listed})())
  assert slots.visible_gpus({}) == ['0', '1']


@pytest.mark.parametrize('env, expected', [
    ({'XLA_FLAGS': '--xla_force_host_platform_device_count=8'},
     ['--xla_force_host_platform_device_count=4'] * 2),
    ({'CUDA_VISIBLE_DEVICES': '0,1,2,3,4,5,6,7'}, ['0,1,2,3', '4,5,6,7']),
])
def test_two_trials_running_at_once_see_their_own_devices(tmp_path, monkeypatch, fake_python,
                                                          env, expected):
  runner_python = tmp_path / 'slot_python'
  runner_python.write_text(SLOT_MAIN.format(python=sys.executable, fake=fake_python))
  runner_python.chmod(0o755)
  seen = tmp_path / 'seen'
  seen.mkdir()
  monkeypatch.setenv('SLOTS_SEEN', str(seen))
  monkeypatch.delenv('CUDA_VISIBLE_DEVICES', raising=False)
  for key, value in env.items():
    monkeypatch.setenv(key, value)
  path = write_experiment(tmp_path, SEEDS)
  out = io.StringIO()
  started = time.monotonic()
  code = sweep.run_sweep(path, str(tmp_path / 'runs'), parallel=2, report=False, out=out,
                         python=str(runner_python))
  assert code == 0, out.getvalue()
  assert time.monotonic() - started < 100, 'two trials never ran at once'
  key = 'XLA_FLAGS' if 'XLA_FLAGS' in env else 'CUDA_VISIBLE_DEVICES'
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
