"""Fixtures of the report tests."""

import pytest
from support import fake_run


@pytest.fixture
def run_dir(tmp_path):
  """The fake finished run of support/fake_run.py, in tmp_path/run."""
  return fake_run.make_run(tmp_path / 'run')
