"""Test-wide JAX settings: CPU, strict rank promotion, 8 host devices for parallel tests."""

import atexit
import os
import shutil
import sys
import tempfile
import textwrap

# Must happen before jax is imported anywhere: parallel tests need 8 CPU devices.
os.environ.setdefault('XLA_FLAGS', '--xla_force_host_platform_device_count=8')
os.environ.setdefault('JAX_PLATFORMS', 'cpu')
# One compilation cache for the session and the CLI processes it starts (they inherit the
# environment): the end-to-end tests build the same smoke models again and again, so each
# distinct program compiles once. A fresh folder: no test depends on an earlier session.
_COMPILATION_CACHE = tempfile.mkdtemp(prefix='attnlab-tests-xla-cache-')
atexit.register(shutil.rmtree, _COMPILATION_CACHE, ignore_errors=True)
os.environ.setdefault('JAX_COMPILATION_CACHE_DIR', _COMPILATION_CACHE)

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update('jax_numpy_rank_promotion', 'raise')


def under_ci() -> bool:
  """CI sets CI=true (GitHub Actions, GitLab and .ci/run all do)."""
  return os.environ.get('CI', '').lower() in ('true', '1', 'yes')


def require(part: str, found: bool, install: str) -> None:
  """A test (or, called at import, a test module) that needs an outside part: without it the
  test skips, naming the part and `install`, the command that installs it; under CI it fails
  instead, so that a CI which lost a package cannot pass on skips."""
  __tracebackhide__ = True  # reports name the caller's line, not this one
  if found:
    return
  if under_ci():
    pytest.fail(f'{part} not found: {install}; under CI (CI=true) its tests fail, not skip',
                pytrace=False)
  pytest.skip(f'{part} not found: {install}', allow_module_level=True)


def model_config(*, attention=None, transformer=None, **fields):
  """The validated `model` group of configs/base.py with `fields` (and the nested `attention` /
  `transformer` keys) replaced: the one way tests build a ModelConfig, so defaults stay in
  configs/base.py."""
  from attnlab.config import fields as config_fields
  from attnlab.config.model import ModelConfig
  from configs import base

  group = base.get_config().model
  group.update(fields)
  group.attention.update(attention or {})
  group.transformer.update(transformer or {})
  return config_fields.from_group(ModelConfig, group, 'model')


def parse_command_line(args):
  """The config that ml_collections' --config flags build from `args`, as attnlab.main does
  (private FlagValues: absl flags are process-global)."""
  from absl import flags
  from ml_collections import config_flags

  argv = ['main'] + [a for a in args if a.startswith('--config')]
  values = flags.FlagValues()
  config_flags.DEFINE_config_file(
    'config', None, '', flag_values=values, lock_config=True, sys_argv=argv
  )
  values(argv)
  return values.config


@pytest.fixture(scope='session')
def tiny_reverse_run(tmp_path_factory):
  """A reverse:smoke run (4 steps) trained once per session, for tests that read a trained
  run (decode, evaluate); sources of 3-6 symbols, so one padded shape compiles. Read it only
  (re-evaluations go to its evaluations/ folder)."""
  from attnlab.train import loop as train
  from configs import reverse

  config = reverse.get_config('smoke')
  with config.unlocked():
    config.parallel.num_devices = 1
    config.task.train_lengths = config.task.eval_lengths = (3, 6)
    config.eval.num_heatmaps = 0
  workdir = str(tmp_path_factory.mktemp('tiny_reverse_run'))
  train.train_and_evaluate(config, workdir)
  return workdir


# Sweep tests (test_sweep.py, test_sweep_select.py): an experiment file, and a grid of the smoke
# config, 2 scores x 2 seeds plus one invalid trial (a misspelt score).
def write_experiment(tmp_path, body, name='exp.py'):
  path = tmp_path / name
  path.write_text(textwrap.dedent(body))
  return str(path)


GRID = """
BASE = 'configs/reverse.py:smoke'
def sweep(add):
  for score in ('dot', 'general'):
    for seed in (0, 1):
      add(**{'model.attention.score': score, 'seed': seed})
  add(**{'model.attention.score': 'gneral', 'seed': 0})
"""


# Sweep runner tests (test_sweep.py, test_sweep_archive.py) run trials through this interpreter.
FAKE_MAIN = """\
#!{python}
# Stands in for `python -m attnlab.main`: logs step 2, then finishes (after FAKE_SECONDS), fails
# or hangs.
import json, os, sys, time
args = dict(a.split('=', 1) for a in sys.argv[3:])
workdir = args['--workdir']
seed = args['--config.seed']
if seed == '13':
  print('I1129 noise before the error')
  print('Traceback (most recent call last):')
  print('ValueError: seed 13 is unlucky')
  sys.exit(1)
with open(os.path.join(workdir, 'metrics.jsonl'), 'a') as f:
  f.write(json.dumps({{'step': 2, 'split': 'train'}}) + '\\n')
os.makedirs(os.path.join(workdir, 'checkpoints', '2'), exist_ok=True)
if os.environ.get('FAKE_HANG') == '1':
  time.sleep(120)
time.sleep(float(os.environ.get('FAKE_SECONDS', '0')))  # a trial that takes a while
final = {{'step': 4, 'test': {{'sequence_accuracy': 0.5}}}}
if seed == '1':  # a run that selected on WER and stopped early
  final = {{'step': 3, 'trained_steps': 4, 'selection': {{'metric': 'wer', 'stopped_early': True}},
           'test': {{'wer': 0.25, 'sequence_accuracy': 0.75}}}}
with open(os.path.join(workdir, 'final_metrics.json'), 'w') as f:
  json.dump(final, f)
"""


@pytest.fixture
def fake_python(tmp_path):
  path = tmp_path / 'fake_python'
  path.write_text(FAKE_MAIN.format(python=sys.executable))
  path.chmod(0o755)
  return str(path)


def memory_mappings() -> tuple[int, int]:
  """(this process's memory mappings, the kernel's vm.max_map_count); (0, 0) off Linux."""
  try:
    with open('/proc/self/maps') as maps, open('/proc/sys/vm/max_map_count') as limit:
      return sum(1 for _ in maps), int(limit.read())
  except OSError:
    return 0, 0


@pytest.fixture(autouse=True, scope='module')
def _compiled_programs_do_not_pile_up():
  """After each test module: the session's memory mappings stay well below the kernel's limit.

  XLA:CPU maps every live executable's code in hundreds of mappings; a process at
  vm.max_map_count dies in native code (a segfault in the next compilation or cache read), so a
  leak of compiled programs (jax.pmap keeps its functions': attnlab/runtime/parallel.py) fails
  here, by name.
  """
  yield
  count, limit = memory_mappings()
  if limit and count > 0.75 * limit:
    pytest.fail(f'the test process holds {count:,} memory mappings (vm.max_map_count '
                f'{limit:,}): compiled programs are being kept alive; XLA crashes at the limit')


def file_tree(root) -> dict:
  """Every file (its bytes) and folder (None) under `root`, by relative path: compare two to
  show that nothing under `root` changed."""
  found = {}
  for directory, folders, names in os.walk(root):
    for name in folders:
      found[os.path.relpath(os.path.join(directory, name), root)] = None
    for name in names:
      with open(os.path.join(directory, name), 'rb') as f:
        found[os.path.relpath(os.path.join(directory, name), root)] = f.read()
  return found
