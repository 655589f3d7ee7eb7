"""Fixtures of the explore tests: the explorer of two runs, served for the whole folder."""

import pytest
from support.explorer import LABELS, serving
from support.random_runs import random_run

from attnlab.decoding import runs
from attnlab.explore import api
from configs import reverse


@pytest.fixture(scope='package')
def explorer(tiny_reverse_run, tmp_path_factory):
  """The session's tiny reverse run and an untrained 4-head RNN side by side, as LABELS."""
  config = reverse.get_config('smoke')
  with config.unlocked():
    config.model.attention.num_heads = 4
    config.model.attention.score = 'scaled_dot'
  heads = random_run(config, tmp_path_factory.mktemp('four_heads'))  # no predictions there
  return api.Explorer([runs.load_run(tiny_reverse_run, 'latest'), heads], LABELS)


@pytest.fixture(scope='package')
def url(explorer):
  """The explorer served on a free port of 127.0.0.1 while the folder's tests run."""
  with serving(explorer) as served:
    yield served
