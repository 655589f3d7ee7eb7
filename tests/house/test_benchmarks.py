"""The benchmark harness and the optimisations it measures.

* `python -m benchmarks.run --quick` runs end to end and writes its JSON and Markdown (no
  timing assertions: the CI machine's speed is not under test).
* The PyTorch reference loaded with attnlab's parameters gives the same logits (RNN and
  Transformer), so every ratio compares the same network; skipped without torch, failed under
  CI (support.parts.require).
* The jaxpr FLOP counter against hand-counted matmuls, loops multiplied out.
"""

import json
import os
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from support.config_builders import parse_command_line
from support.parts import require

from attnlab.config import run as run_config
from attnlab.data import batching
from attnlab.models.factory import build_model
from attnlab.tokens import PAD_ID
from attnlab.train.steps import decoder_input
from benchmarks import cores, device_check, flops, workloads

TORCH = 'torch (the PyTorch reference of benchmarks/)'
TORCH_INSTALL = 'make bench-deps'


def require_torch():
  """The torch module; without it the test skips (fails under CI)."""
  try:
    import torch
  except ImportError:
    torch = None
  require(TORCH, torch is not None, TORCH_INSTALL)
  return torch


@pytest.mark.slow
def test_quick_run_writes_results(tmp_path):
  from benchmarks import run

  result = run.main(['--quick', f'--out={tmp_path}', '--machine=ci'])
  (row,) = result['rows']
  assert row['workload'] == 'luong-general-feed' and row['train_jax_tok_s'] > 0
  assert row['greedy_jax_seq_s'] > 0 and row['beam_jax_seq_s'] > 0
  assert row['train_traces'] == 1 and row['donated'] is True  # no retrace, state donated
  assert row['train_gflop_per_step'] > 0
  d = result['default_config']
  assert d['train_traces'] == len(d['batch_shapes'])  # one compilation per padded shape
  saved = json.loads((tmp_path / 'ci.json').read_text())
  assert saved['rows'][0]['workload'] == 'luong-general-feed'
  assert '| luong-general-feed (16x16) |' in (tmp_path / 'ci.md').read_text()
  # Last, so that a skip comes after every check that needs no torch has passed.
  require('torch (the PyTorch columns)', result['versions']['torch'] is not None, TORCH_INSTALL)
  assert row['max_logit_diff'] < 1e-4 and row['train_ratio'] > 0
  assert row['greedy_agreement'] == 1.0  # same network, same search: the same tokens


@pytest.mark.slow
def test_bf16_matmul_row_runs_against_torch_autocast_and_the_bf16_peak(tmp_path):
  from benchmarks import run

  name = 'luong-general-feed-bf16-matmuls'
  result = run.main(['--quick', f'--only={name}', '--no-memory', f'--out={tmp_path}',
                     '--machine=ci'])
  (row,) = result['rows']
  assert row['workload'] == name and row['dtype'] == 'bfloat16_matmuls'
  assert 'default_config' not in result  # --only: the chosen rows, not the compilation check
  assert set(result['matmul_gflops_bf16']) == {'jax', 'torch'}  # its MFU's peak, measured
  assert 'Bfloat16 operands summed in float32' in (tmp_path / 'ci.md').read_text()
  require('torch (the PyTorch columns)', result['versions']['torch'] is not None, TORCH_INSTALL)
  # Both sides round the same weight matmuls' operands to bf16: close, not equal.
  assert 0 < row['max_logit_diff'] < 0.05 and row['train_ratio'] > 0


def test_a_peak_is_the_best_call_and_a_slow_one_stops_at_the_budget(monkeypatch):
  from benchmarks import measure

  durations = iter([0.3, 0.1, 0.2, 0.4, 0.05] + [0.5] * 10)
  clock = {'now': 0.0}

  def call():  # a call that takes the next duration of a fake clock
    clock['now'] += next(durations)

  monkeypatch.setattr(measure.time, 'perf_counter', lambda: clock['now'])
  monkeypatch.setattr(measure, 'PEAK_BUDGET_S', 0.5)
  # 0.6 s have passed after the third call: the budget stops it at PEAK_MIN_REPS = 3.
  assert measure.best_seconds(call) == pytest.approx(0.1) and clock['now'] == pytest.approx(0.6)
  monkeypatch.setattr(measure, 'PEAK_BUDGET_S', 100.0)
  assert measure.best_seconds(call, reps=3) == pytest.approx(0.05)  # within the budget: 3 calls
  assert next(durations) == 0.5


@pytest.mark.slow
def test_torch_autocast_reference_rounds_like_bf16_matmuls():
  torch = require_torch()
  from benchmarks import jax_side, torch_side
  from benchmarks.torch_reference import precision

  workload = next(w for w in workloads.all_workloads()
                  if w.name == 'luong-general-feed-bf16-matmuls')
  assert not workload.jax_only and workload.matmul_dtype == 'bfloat16'
  jr = jax_side.JaxRunner(workload, quick=True)
  tr = torch_side.TorchRunner(workload, quick=True, params=jax.device_get(jr.params))
  assert tr.autocast
  (batch,), _ = workloads.make_batches(1, 8, bucket_size=8)
  diff = jax_side.check_same_logits(jr, tr.model, batch, autocast=True)
  assert diff < 0.05
  tgt_in = torch.tensor(np.array(decoder_input(batch['target']))).long()
  source = torch.tensor(np.array(batch['source'])).long()
  with torch.inference_mode():
    full = tr.model(source, tgt_in)
    with precision(True):
      mixed = tr.model(source, tgt_in).float()
  assert float((full - mixed).abs().max()) > 1e-5  # autocast took effect on the reference


def test_token_batched_rows_are_grouped_and_padded_as_token_batching_does():
  """The -tokens workloads: every row of a batch is one that token batching puts in that
  batch's shape (one of 8 fit to the length histogram), PyTorch gets the same rows trimmed."""
  padded, trimmed = workloads.make_batches(6, 64, 8, token_buckets=8)
  rng = np.random.default_rng(0)  # make_batches draws its pool of lengths first, same seed
  src, tgt = workloads._lengths(rng, 64 * 6 * 64)
  shapes = batching.choose_shapes(src, tgt, 8)
  for pad, trim in zip(padded, trimmed, strict=True):
    row_src, row_tgt = (np.sum(pad[k] != PAD_ID, axis=1) for k in ('source', 'target'))
    (shape,) = set(batching.assign_shapes(row_src, row_tgt, shapes).tolist())
    assert (pad['source'].shape[1], pad['target'].shape[1]) == tuple(shapes[shape])
    for side in ('source', 'target'):
      width = trim[side].shape[1]
      assert (trim[side][:, -1] != PAD_ID).any()  # trimmed to the longest row
      assert np.array_equal(pad[side][:, :width], trim[side]) and not pad[side][:, width:].any()
  work = lambda bs: sum(b['source'].size + b['target'].size for b in bs)
  real = lambda bs: sum(int(np.sum(b['source'] != PAD_ID) + np.sum(b['target'] != PAD_ID))
                        for b in bs)
  assert work(padded) / real(padded) < 1.05  # token batching pads < 5% here
  bucket8, _ = workloads.make_batches(6, 64, 8)
  assert work(bucket8) / real(bucket8) > 1.3  # buckets of 8: 16x16 for ~11x10


@pytest.mark.parametrize(
  'name', ['luong-general-feed', 'bahdanau-concat', 'luong-dot', 'transformer']
)
@pytest.mark.slow
def test_torch_reference_equals_attnlab(name):
  torch = require_torch()
  from benchmarks import torch_side

  workload = next(w for w in workloads.all_workloads() if w.name == name)
  cfg = workloads.run_config(workload, quick=True)
  model = build_model(cfg.model, workloads.SOURCE_VOCAB, workloads.TARGET_VOCAB)
  (batch,), _ = workloads.make_batches(1, 4, bucket_size=8)
  tgt_in = np.asarray(decoder_input(batch['target']))
  params = model.init(jax.random.key(3), batch['source'], tgt_in)['params']
  ours = np.asarray(model.apply({'params': params}, batch['source'], tgt_in))
  reference = torch_side.TorchRunner(workload, quick=True, params=jax.device_get(params)).model
  reference.eval()
  with torch.inference_mode():
    source, target = (torch.tensor(np.array(x)).long() for x in (batch['source'], tgt_in))
    theirs = reference(source, target)
  valid = batch['target'] != 0
  np.testing.assert_allclose(ours[valid], theirs.numpy()[valid], atol=1e-5)


def test_flop_counter_multiplies_scan_bodies():
  B, T, H = 3, 5, 4

  def rnn(w_HxH, x_TxBxH):
    step = lambda h, x: (jnp.tanh(h @ w_HxH + x), h)
    return lax.scan(step, jnp.zeros((B, H)), x_TxBxH)[1].sum()

  args = (jnp.ones((H, H)), jnp.ones((T, B, H)))
  assert flops.matmul_flops(rnn, *args) == T * 2 * B * H * H
  # Reverse mode: per step dh = g W^T and dW += h^T g, plus the forward: 3x.
  assert flops.matmul_flops(jax.grad(rnn), *args) == 3 * T * 2 * B * H * H
  batched = lambda a, b: jnp.einsum('bts,bsh->bth', a, b)
  assert flops.matmul_flops(batched, jnp.ones((2, 3, 5)), jnp.ones((2, 5, 7))) == 2 * 2 * 3 * 5 * 7


def test_machine_name_tells_cpu_kinds_apart():
  from attnlab.runtime.machine import machine_name

  def cpu(name, family, model, flags):
    return {'model name': name, 'cpu family': family, 'model': model, 'flags': flags}

  zen3 = cpu('AMD EPYC', '25', '1', 'fpu sse2 avx avx2 fma')
  zen4 = cpu('AMD EPYC', '25', '17', 'fpu sse2 avx avx2 avx512f avx512_bf16')
  spr = cpu('Intel(R) Xeon(R) Processor', '6', '143', 'avx2 avx512f amx_bf16 amx_tile')
  assert machine_name(zen3, 2) == 'amd-epyc-f25m1-avx2-2cpu'
  assert machine_name(zen4, 2) == 'amd-epyc-f25m17-avx512-2cpu'
  assert machine_name(spr, 2) == 'intel-xeon-f6m143-amx-2cpu'
  assert machine_name({'model name': 'Apple M2'}, 8) == 'apple-m2-8cpu'  # no family/flags


HLO = """\
HloModule jit_step

%fused_dot (p0: f32[4,8], p1: f32[8,2]) -> f32[4,2] {
  %p0 = f32[4,8]{1,0} parameter(0)
  %p1 = f32[8,2]{1,0} parameter(1)
  ROOT %dot.1 = f32[4,2]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%fused_tanh (p0: f32[4,2]) -> f32[4,2] {
  %p0 = f32[4,2]{1,0} parameter(0)
  ROOT %tanh.1 = f32[4,2]{1,0} tanh(%p0)
}

ENTRY %main (a: f32[4,8], b: f32[8,2]) -> f32[4,2] {
  %a = f32[4,8]{1,0} parameter(0)
  %b = f32[8,2]{1,0} parameter(1)
  %ynn_fusion.3 = f32[4,2]{1,0} fusion(%a, %b), kind=kCustom, calls=%fused_dot
  %dot.7 = f32[4,2]{1,0} dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %copy.2 = f32[4,2]{1,0} copy(%dot.7)
  %while.1 = (s32[]) while(%t), condition=%cond, body=%body
  ROOT %tanh_fusion = f32[4,2]{1,0} fusion(%ynn_fusion.3), kind=kLoop, calls=%fused_tanh
}
"""


def test_profile_kinds_come_from_the_hlo_and_nested_time_counts_once():
  from benchmarks import profile_ops

  kinds = profile_ops.hlo_kinds(HLO)
  assert kinds['ynn_fusion.3'] == 'matmul' and kinds['dot.7'] == 'matmul'  # a fused dot, a dot
  assert kinds['tanh_fusion'] == 'elementwise' and kinds['copy.2'] == 'copy'
  assert kinds['while.1'] == 'loop'
  event = lambda op, ts, dur, tid=1: {'ph': 'X', 'ts': ts, 'dur': dur, 'tid': tid, 'pid': 7,
                                      'name': op, 'args': {'hlo_op': op}}
  events = [
    event('while.1', 0, 100),  # a loop of two body ops: 100 - 30 - 50 = 20 of its own
    event('dot.7', 10, 30),
    event('copy.2', 50, 50),
    event('dot.7', 0, 40, tid=2),  # the other core, at the same time
    {'ph': 'X', 'ts': 0, 'dur': 500, 'tid': 1, 'pid': 7, 'name': 'PjitFunction'},  # not an op
  ]
  assert profile_ops.op_self_times(events) == {'while.1': 20.0, 'dot.7': 70.0, 'copy.2': 50.0}


@pytest.mark.slow
def test_profile_runs_on_a_real_search():
  from benchmarks import profile_ops

  headline = workloads.quick_workloads()[0]
  result = profile_ops.profile(headline, 'greedy', calls=2, quick=True)
  by_kind = result['by_kind_ms_per_call']
  assert by_kind['matmul'] > 0 and sum(by_kind.values()) > 0
  assert result['wall_ms_per_call'] > 0
  assert '| matmul |' in profile_ops.markdown(result, top=5)


def test_profile_of_a_trained_runs_search_on_its_test_sources(tiny_reverse_run, tmp_path):
  from benchmarks import profile_ops

  for what in ('greedy', 'beam'):
    out = tmp_path / f'{what}.md'
    result = profile_ops.main([f'--workdir={tiny_reverse_run}', f'--what={what}', '--calls=2',
                               f'--out={out}'])
    assert result['workload'] == str(tiny_reverse_run) and result['what'] == what
    rows, width = map(int, result['padded_shape'].split(' sources x '))
    assert 1 <= rows <= 64 and width % 8 == 0  # one batch of the run's commonest bucket
    assert result['by_kind_ms_per_call']['matmul'] > 0
    assert out.read_text().startswith(
      f'Command: `python -m benchmarks.profile_ops --workdir={tiny_reverse_run} --what={what} '
      '--calls=2` on ')
  with pytest.raises(SystemExit):
    profile_ops.main([f'--workdir={tiny_reverse_run}', '--what=train'])


@pytest.mark.slow
def test_device_check_trains_both_modes_alike_and_decodes_as_the_run_did(tmp_path):
  """benchmarks/device_check.py on this machine's devices (8 simulated CPU devices here): the
  script a GPU or TPU machine runs when one is lent."""
  # One shipped model: tests/house/test_shipped_models.py decodes every one of them.
  code = device_check.main(['--config=configs/reverse.py:smoke', '--steps=4', '--no-benchmark',
                            '--shipped=dates', f'--out={tmp_path}'])
  [name] = os.listdir(tmp_path)
  text = (tmp_path / name).read_text()
  assert code == 0, text
  assert f'{len(jax.devices())} x ' in text
  assert '| shard_map vs pmap, 4 logged steps | agree: ' in text
  assert re.search(r'\| load_run decodes the eval split as the run did \| (\d+) of \1 equal', text)
  shipped = re.search(
    r'\| results/dates \(shipped\) decodes its test inputs as archived \| (\d+) of 16', text
  )
  assert shipped and int(shipped.group(1)) >= 15, text


def test_device_check_refuses_an_unknown_shipped_model_before_training(tmp_path, capsys):
  assert device_check.main(['--shipped=dates,nope', f'--out={tmp_path}']) == 2
  assert capsys.readouterr().err == (
    'error: --shipped=nope: no shipped model of that name in results/; choose from '
    f'{", ".join(device_check.shipped_names())}\n')
  assert 'dates' in device_check.shipped_names() and not os.listdir(tmp_path)


def test_cores_settings_train_the_matched_network_on_their_devices():
  task = cores.tasks.TASKS['g2p']
  for name, (flags, devices) in cores.SETTINGS.items():
    command = cores._command(task, '/tmp/run', 600, devices or 2)
    argv = command[command.index('attnlab.main') + 1:]
    cfg = run_config.parse(parse_command_line([a for a in argv if a.startswith('--config')]))
    assert cfg.parallel.num_devices == (1 if name == 'threads' else 2)
    assert (cfg.train.num_steps, cfg.train.log_every, cfg.eval.max_examples) == (600, 50, 64)
    assert cfg.data.global_batch_size == 64 and cfg.model.dtype == 'float32'
    single = '--xla_cpu_multi_thread_eigen=false' in flags
    assert single == (name == 'devices')
    assert ('device_count={n}' in flags) == (name != 'threads')


# Stands in for one `attnlab.main` training: logs a rate that says which CPUs it may use.
FAKE_TRAINING = """
import json, os, sys, time
os.makedirs(sys.argv[1])
time.sleep(0.5)  # pinned as it starts, as attnlab.main is long before JAX makes its threads
cpus = sorted(os.sched_getaffinity(0))
assert os.environ['XLA_FLAGS'] == '--xla_cpu_multi_thread_eigen=false', os.environ['XLA_FLAGS']
with open(os.path.join(sys.argv[1], 'metrics.jsonl'), 'w') as f:
  for step in (50, 100, 150):
    f.write(json.dumps({'split': 'train', 'step': step, 'tokens_per_sec': 1000 + cpus[0]}) + '\\n')
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason='two halves of the CPUs need 2')
def test_side_by_side_settings_run_two_trainings_pinned_or_not(monkeypatch):
  monkeypatch.setattr(cores, '_command', lambda task, workdir, steps, devices: [
      sys.executable, '-c', FAKE_TRAINING, workdir])
  task = cores.tasks.TASKS['g2p']
  cpus = sorted(os.sched_getaffinity(0))
  first_of_second_half = cpus[len(cpus) // 2]
  pinned = cores.run_setting(task, 'pinned_side_by_side', 150, len(cpus))
  assert pinned['each'] == [1000 + cpus[0], 1000 + first_of_second_half]
  assert pinned['tokens_per_s'] == sum(pinned['each'])
  placed = cores.run_setting(task, 'side_by_side', 150, len(cpus))
  assert placed['each'] == [1000 + cpus[0]] * 2  # both may use every CPU
