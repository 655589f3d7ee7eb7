"""attnlab.cli helpers that every command shares."""

import pytest
from absl import logging

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
