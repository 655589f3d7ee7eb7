"""benchmarks/peers' command: the supervisor stops a command tree at its CPU budget and stamps
its checkpoints; bad flags are one error line; the pins name one version of each part."""

import os
import subprocess
import sys

import pytest

from benchmarks.peers import __main__ as peers_main
from benchmarks.peers import environment, supervise


def test_supervisor_stops_the_tree_at_its_cpu_budget_and_stamps_checkpoints(tmp_path):
  # A shell whose child writes checkpoint 1 and then spins: only the tree's CPU time stops it.
  spin = (
    "import pathlib, time; pathlib.Path('ckpt_1').touch(); t = time.process_time()\n"
    'while time.process_time() - t < 60: pass'
  )
  cmd = ['sh', '-c', f'{sys.executable} -c "{spin}"; echo never']
  done = supervise.run(
    cmd,
    log_path=str(tmp_path / 'log'),
    cpu_budget_s=1.0,
    cwd=str(tmp_path),
    checkpoint_steps=lambda: [int(n[5:]) for n in os.listdir(tmp_path) if n.startswith('ckpt_')],
  )
  assert done.over_budget and done.returncode != 0
  assert 1.0 <= done.cpu_s < 30 and done.wall_s < 30
  assert list(done.checkpoints) == [1] and done.checkpoints[1].cpu_s <= done.cpu_s
  assert 'never' not in (tmp_path / 'log').read_text()


def test_a_command_that_ends_within_its_budget_is_not_stopped(tmp_path):
  done = supervise.run(
    [sys.executable, '-c', 'pass'],
    log_path=str(tmp_path / 'log'),
    cpu_budget_s=60,
    checkpoint_steps=list,
  )
  assert (done.returncode, done.over_budget, done.checkpoints) == (0, False, {})


@pytest.mark.parametrize(
  'flag, message',
  [
    ('--systems=attnlab,marian', "unknown systems ['marian']"),
    ('--cpu_budget_min=0', '--cpu_budget_min must be positive, got 0'),
    ('--task=wmt', "unknown --task 'wmt'; choose from g2p, bible"),
  ],
)
def test_bad_flags_are_one_error_line(capsys, flag, message):
  with pytest.raises(SystemExit) as stopped:
    peers_main.main([flag])
  assert stopped.value.code == 2
  assert message in capsys.readouterr().err


def test_pins_name_one_version_of_each_part():
  assert environment.pinned_versions() == {
    'torch': '2.13.0',
    'OpenNMT-py': '3.5.1',
    'joeynmt': '2.3.0',
  }
  names = [
    p.split('==')[0] for p in (environment.TORCH, *environment.TOOLKITS, *environment.IMPORTED)
  ]
  assert len(names) == len(set(names)) and all('==' in p for p in environment.IMPORTED)
  assert not environment.installed('/nonexistent/peers-venv')
  # The launcher that adapts Joey NMT to torch 2.13 runs in the peers' venv: no attnlab there.
  source = open(environment.JOEY_MAIN).read()
  assert 'attnlab' not in source.split('"""')[-1] and 'run_module' in source
  subprocess.run([sys.executable, '-m', 'py_compile', environment.JOEY_MAIN], check=True)


def test_a_partial_run_never_takes_the_whole_comparisons_name():
  every = list(peers_main.systems.SYSTEM_NAMES)
  assert peers_main.results_name('g2p', 'm', every[::-1], 30) == 'peers_g2p_m'
  assert (peers_main.results_name('g2p', 'm', ['attnlab-tokens', 'opennmt-py'], 30)
          == 'peers_g2p_m+attnlab-tokens+opennmt-py')
  assert peers_main.results_name('bible', 'm', every, 10) == 'peers_bible_m-10cpumin'
