"""attnlab.cli helpers that every command shares, and the commands' scripts."""

import os
import subprocess
import sys
import tomllib

import pytest
from absl import logging
from support import REPO

from attnlab import cli, decode, evaluate


@pytest.fixture
def info_verbosity():
  before = logging.get_verbosity()
  logging.set_verbosity(logging.INFO)
  yield
  logging.set_verbosity(before)


def test_library_warnings_only_restores_the_callers_verbosity(info_verbosity):
  with cli.library_warnings_only():
    assert logging.get_verbosity() == logging.WARNING
  assert logging.get_verbosity() == logging.INFO
  with pytest.raises(RuntimeError), cli.library_warnings_only():
    raise RuntimeError('a failing command')
  assert logging.get_verbosity() == logging.INFO


@pytest.mark.parametrize('command', [evaluate.main, decode.main])
def test_commands_called_in_process_leave_the_verbosity_alone(command, tmp_path, capsys,
                                                              info_verbosity):
  missing = str(tmp_path / 'no_run')
  assert command(['--workdir', missing]) == cli.EXIT_USER_ERROR
  assert capsys.readouterr().err.startswith('error: ')
  assert logging.get_verbosity() == logging.INFO


@pytest.mark.slow
def test_every_script_runs_its_command():
  """pyproject.toml's [project.scripts]: each names a callable that runs the command of the
  same `python -m attnlab.X` module, here answering --help."""
  with open(os.path.join(REPO, 'pyproject.toml'), 'rb') as f:
    scripts = tomllib.load(f)['project']['scripts']
  own_flag = {'attnlab-train': '--workdir', 'attnlab-decode': '--workdir',
              'attnlab-evaluate': '--workdir', 'attnlab-explore': '--workdir',
              'attnlab-sweep': '--workdir', 'attnlab-report': '--metric',
              'attnlab-run-report': '--out'}
  assert set(scripts) == set(own_flag)
  for name, target in scripts.items():
    module, function = target.split(':')
    code = (f'import sys; sys.argv = [{name!r}, "--help"]; '
            f'from {module} import {function}; sys.exit({function}())')
    result = subprocess.run([sys.executable, '-c', code], cwd=REPO, capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode in (0, 1), (name, result.stderr[-2000:])  # absl's --help: 1
    assert own_flag[name] in result.stdout, (name, result.stdout)
    assert 'Traceback' not in result.stderr, (name, result.stderr[-2000:])
