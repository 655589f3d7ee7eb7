"""Data parallelism: pmap and jit(shard_map) over 8 devices train exactly like one device."""

import gc
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from attnlab import data
from attnlab.config import run as config_lib
from attnlab.models.factory import build_model
from attnlab.runtime.parallel import DataParallel
from attnlab.train import loop as train
from attnlab.train import start as train_start
from attnlab.train import steps
from configs import reverse

NUM_STEPS = 3


def smoke_setup(kind: str):
  c = reverse.get_config('smoke')
  with c.unlocked():
    c.model.dropout = 0.0  # dropout masks depend on the device split by design
    c.model.kind = kind
    if kind == 'transformer':
      c.model.transformer.num_heads = 2
      c.model.transformer.mlp_dim = 32
  cfg = config_lib.parse(c)
  task = data.load_task(cfg)
  model = build_model(cfg.model, task.source_vocab.size, task.target_vocab.size)
  # Plain SGD: Adam would blow float noise in exactly-zero gradients (e.g. attention key
  # biases, which softmax ignores) up to full-size updates and hide real differences.
  state = train_start.init_state(model, optax.sgd(0.5), cfg)
  batches = data.train_batches(task, cfg, process_index=0, process_count=1)
  return cfg, state, [next(batches) for _ in range(NUM_STEPS)]


def run_steps(mode: str, devices, state, batches):
  parallel = DataParallel(mode, devices=devices)
  step_fn = parallel.compile_train_step(steps.train_step)
  p_state = parallel.replicate(state)
  losses = []
  for batch in batches:
    p_state, sums = step_fn(p_state, parallel.shard_batch(batch), jax.random.key(0))
    losses.append(parallel.fetch_sums([sums])['loss_sum'])
  return parallel.fetch(p_state.params), np.array(losses)


@pytest.mark.slow
@pytest.mark.parametrize('kind', ['rnn', 'transformer'])
def test_eight_devices_equal_one_device(kind):
  assert jax.device_count() == 8, 'tests/conftest.py must force 8 CPU devices'
  _, state, batches = smoke_setup(kind)
  ref_params, ref_losses = run_steps('pmap', jax.devices()[:1], state, batches)
  assert np.all(np.isfinite(ref_losses)) and ref_losses[-1] != ref_losses[0]
  for mode in ('pmap', 'shard_map'):
    params, losses = run_steps(mode, None, state, batches)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5, err_msg=mode)
    flat_ref = jax.tree_util.tree_leaves_with_path(ref_params)
    for (path, a), b in zip(flat_ref, jax.tree.leaves(params), strict=True):
      np.testing.assert_allclose(b, a, rtol=2e-5, atol=2e-6,
                                 err_msg=f'{mode} {jax.tree_util.keystr(path)}')


def test_a_dropped_step_lets_go_of_its_compiled_programs():
  # A step that stayed alive after the caller dropped it would hold its executables' memory
  # mappings for the process's life (conftest's memory-mapping check says why that kills long
  # processes). shard_map, the default, lets go; pmap does not (attnlab/runtime/parallel.py).
  def sum_step(scale, batch, *, axis_name):
    return {'sum': jax.lax.psum(jnp.sum(batch['x']) * scale, axis_name)}

  alive = weakref.ref(sum_step)
  parallel = DataParallel('shard_map', devices=jax.devices()[:2])
  step = parallel.compile_eval_step(sum_step)
  sums = step(parallel.replicate(np.float32(0.5)), parallel.shard_batch({'x': np.ones((4, 3))}))
  assert parallel.fetch_sums([sums]) == {'sum': 6.0}
  del step, sum_step
  gc.collect()
  assert alive() is None


@pytest.mark.slow
def test_a_finished_run_leaves_no_compiled_step_alive(tmp_path, monkeypatch):
  """Train, evaluate and test in one process, as a notebook would, in the default mode:
  afterwards none of the functions the run handed to jax.shard_map (and so none of its
  programs) is still alive."""
  handed_over = []
  shard_map = jax.shard_map

  def recording_shard_map(fn, **kwargs):
    handed_over.append(weakref.ref(fn))
    return shard_map(fn, **kwargs)

  monkeypatch.setattr(jax, 'shard_map', recording_shard_map)
  config = reverse.get_config('smoke')
  assert config.parallel.mode == 'shard_map'
  train.train_and_evaluate(config, str(tmp_path / 'run'))
  gc.collect()
  assert len(handed_over) >= 2  # the train step and the eval step at least
  assert [ref for ref in handed_over if ref() is not None] == []


def test_batch_not_divisible_by_devices_is_rejected():
  with pytest.raises(ValueError, match='not divisible by the 8 devices'):
    DataParallel('pmap').check_batch_size(12)


def test_host_allocator_tuned_only_for_cpu_runs(monkeypatch):
  from attnlab.runtime import parallel

  calls = []

  class FakeLibc:
    def mallopt(self, param, value):
      calls.append((param, value))
      return 1

  monkeypatch.setattr(parallel.sys, 'platform', 'linux')
  monkeypatch.setattr(parallel.ctypes, 'CDLL', lambda name: FakeLibc())
  monkeypatch.setenv('JAX_PLATFORMS', 'cuda,cpu')
  assert parallel.tune_host_allocator() is False and not calls  # GPU first: left alone
  monkeypatch.setenv('JAX_PLATFORMS', 'cpu')
  assert parallel.tune_host_allocator() is True and len(calls) == 3
  monkeypatch.delenv('JAX_PLATFORMS')
  monkeypatch.setattr(parallel.importlib.util, 'find_spec', lambda name: name == 'libtpu' or None)
  assert parallel.will_run_on_cpu() is False  # a TPU plugin installed: JAX prefers the TPU
  monkeypatch.setattr(parallel.importlib.util, 'find_spec', lambda name: None)
  assert parallel.will_run_on_cpu() is True


def test_decoding_gets_one_cpu_device_per_core_unless_told_otherwise(monkeypatch):
  from attnlab.runtime import parallel

  monkeypatch.setenv('JAX_PLATFORMS', 'cpu')
  monkeypatch.setattr(parallel.os, 'sched_getaffinity', lambda pid: {0, 1})
  env = {'XLA_FLAGS': '--xla_cpu_multi_thread_eigen=true'}
  assert parallel.cpu_device_per_core(env) == 2
  assert env['XLA_FLAGS'] == ('--xla_cpu_multi_thread_eigen=true '
                              '--xla_force_host_platform_device_count=2')
  assert parallel.cpu_device_per_core(env) == 0  # a count named already stays
  monkeypatch.setattr(parallel.os, 'sched_getaffinity', lambda pid: set(range(64)))
  env = {}
  assert parallel.cpu_device_per_core(env) == parallel.MOST_CPU_DEVICES
  assert env == {'XLA_FLAGS': f'--xla_force_host_platform_device_count={parallel.MOST_CPU_DEVICES}'}
  monkeypatch.setattr(parallel.os, 'sched_getaffinity', lambda pid: {0})
  env = {}
  assert parallel.cpu_device_per_core(env) == 0 and env == {}  # one core: nothing to split
  monkeypatch.setenv('JAX_PLATFORMS', 'cuda')
  monkeypatch.setattr(parallel.os, 'sched_getaffinity', lambda pid: {0, 1})
  assert parallel.cpu_device_per_core(env) == 0 and env == {}  # a GPU decodes: left alone
