"""Test-wide JAX settings: CPU, strict rank promotion, 8 host devices for parallel tests."""

import atexit
import os
import shutil
import tempfile

# Must happen before jax is imported anywhere: parallel tests need 8 CPU devices.
os.environ.setdefault('XLA_FLAGS', '--xla_force_host_platform_device_count=8')
os.environ.setdefault('JAX_PLATFORMS', 'cpu')
# One compilation cache for the session and the CLI processes it starts (they inherit the
# environment): the end-to-end tests build the same smoke models again and again, so each
# distinct program compiles once. A fresh folder: no test depends on an earlier session.
_COMPILATION_CACHE = tempfile.mkdtemp(prefix='attnlab-tests-xla-cache-')
atexit.register(shutil.rmtree, _COMPILATION_CACHE, ignore_errors=True)
os.environ.setdefault('JAX_COMPILATION_CACHE_DIR', _COMPILATION_CACHE)
# Every program, as attnlab's commands keep them (attnlab/runtime/compilation_cache.py): JAX's
# default keeps only those that took a second, and a smoke model's take less.
os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', '0')

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update('jax_numpy_rank_promotion', 'raise')


@pytest.fixture(scope='session')
def tiny_reverse_run(tmp_path_factory):
  """A reverse:smoke run (4 steps) trained once per session, for tests that read a trained
  run (decode, evaluate, explore); sources of 3-6 symbols, so one padded shape compiles. Read it
  only (re-evaluations go to its evaluations/ folder)."""
  # Imported on first use: tests that read no trained run do not load the training code.
  from support import smoke_runs

  return smoke_runs.train_tiny(tmp_path_factory.mktemp('tiny_reverse_run'))


@pytest.fixture(scope='session')
def tiny_transformer_run(tmp_path_factory):
  """The same with a 2-layer Transformer of 2 heads, trained once per session. Read it only."""
  from support import smoke_runs

  return smoke_runs.train_tiny(
    tmp_path_factory.mktemp('tiny_transformer_run'),
    **{
      'model.kind': 'transformer',
      'model.decoder_layers': 2,
      'model.transformer.num_heads': 2,
      'model.transformer.mlp_dim': 32,
    },
  )


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
    pytest.fail(
      f'the test process holds {count:,} memory mappings (vm.max_map_count '
      f'{limit:,}): compiled programs are being kept alive; XLA crashes at the limit'
    )
