"""benchmarks/xla_settings.py and the `python -m benchmarks.xla_options` entry point.

Timing is the benchmark's job; these check what a setting does to a compiled dot, when a
setting is ruled out before any compile, and that the command line lists its settings.
"""

import contextlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

from benchmarks import workloads, xla_settings


def _compiled_dot_summary(lowering: str = '') -> dict:
  a, b = jnp.ones((8, 16), jnp.float32), jnp.ones((16, 4), jnp.float32)
  with xla_settings.dot_lowering(lowering) if lowering else contextlib.nullcontext():
    lowered = jax.jit(lambda x, y: x @ y).lower(a, b)
  return xla_settings.hlo_summary(lowered.compile().as_text())


@pytest.mark.slow
def test_f32_in_bf16_rewrites_f32_dots_to_bf16_operands_and_is_undone_after():
  rewritten = _compiled_dot_summary('f32_in_bf16')
  assert rewritten['dots'] == {'bf16->f32': 1}
  assert rewritten['converts'] >= 2  # both operands rounded to bf16
  plain = _compiled_dot_summary()
  assert plain == {**rewritten, 'dots': {'f32->f32': 1}, 'converts': 0}, 'the rewrite leaked'


def test_an_unknown_lowering_is_refused():
  with pytest.raises(ValueError, match='f32_in_bf16'):
    with xla_settings.dot_lowering('bf16_acc_f32'):
      pass


def test_settings_that_cannot_apply_say_why_before_compiling():
  by_name = xla_settings.BY_NAME
  bf16 = next(w for w in workloads.all_workloads() if w.dtype == 'bfloat16')
  autocast = by_name['f32_matmuls_in_bf16']
  assert xla_settings.static_reason(autocast, bf16, {'avx512_bf16'}) == (
    'meant for model.dtype=float32 (this workload: bfloat16)'
  )
  headline = next(w for w in workloads.all_workloads() if w.headline)
  assert xla_settings.static_reason(autocast, headline, {'avx2'}) == (
    'this CPU has none of amx_bf16, avx512_bf16'
  )
  assert xla_settings.static_reason(autocast, headline, {'amx_bf16'}) == ''
  assert xla_settings.static_reason(by_name['baseline'], bf16, set()) == ''


def test_list_prints_every_setting_without_compiling():
  out = subprocess.run(
    [sys.executable, '-m', 'benchmarks.xla_options', '--list'],
    capture_output=True, text=True, timeout=120, check=True,
  ).stdout
  listed = [line.split(':', 1)[0] for line in out.splitlines() if not line.startswith(' ')]
  assert listed == [s.name for s in xla_settings.SETTINGS]
  assert listed[0] == 'baseline' and len(set(listed)) == len(listed)


def test_dot_types_reads_operand_types_within_each_computation():
  # Two computations reuse %p0 with different types; ROOT dots count too.
  text = '\n'.join([
    '%fused (p0: bf16[2,3], p1: bf16[3,4]) -> f32[2,4] {',
    '  %p0 = bf16[2,3]{1,0} parameter(0)',
    '  %p1 = bf16[3,4]{1,0} parameter(1)',
    '  ROOT %dot.1 = f32[2,4]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}',
    '}',
    'ENTRY %main (p0: f32[2,3], w: f32[3,3]) -> f32[2,3] {',
    '  %p0 = f32[2,3]{1,0} parameter(0)',
    '  %w = f32[3,3]{1,0} parameter(1)',
    '  %dot.2 = f32[2,3]{1,0} dot(%p0, %w), lhs_contracting_dims={1}',
    '  ROOT %dot.3 = f32[2,3]{1,0} dot(%dot.2, %w), lhs_contracting_dims={1}',
    '}',
  ])
  assert xla_settings.dot_types(text) == {'bf16->f32': 1, 'f32->f32': 2}


@pytest.mark.slow
def test_probe_child_runs_the_setting_from_any_working_directory(tmp_path, monkeypatch):
  # The probe compiles a setting in a child process; it must import `benchmarks` wherever the
  # parent was started (it once ran the file as a script and failed with ModuleNotFoundError).
  from benchmarks import workloads, xla_options

  monkeypatch.chdir(tmp_path)
  headline = next(w for w in workloads.all_workloads() if w.headline)
  assert xla_options.probe_in_child(xla_settings.BY_NAME['baseline'], headline) == ''
