"""The persistent compilation cache of attnlab's commands (attnlab/runtime/compilation_cache.py):
one folder per CPU instruction set, the user's JAX_COMPILATION_CACHE_DIR first, programs on disk."""

import os
import subprocess
import sys

import pytest

from attnlab.runtime import compilation_cache

ZEN4 = 'processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx2 avx512f\n\n'


def write(path, text):
  path.write_text(text)
  return str(path)


def test_the_folder_follows_the_instruction_set_not_the_core_count(tmp_path):
  one_core = write(tmp_path / 'a', ZEN4)
  two_cores = write(tmp_path / 'b', ZEN4 + ZEN4.replace(': 0', ': 1'))
  reordered = write(tmp_path / 'c', ZEN4.replace('avx2 avx512f', 'avx512f avx2'))
  avx2_only = write(tmp_path / 'd', ZEN4.replace(' avx512f', ''))
  other_model = write(tmp_path / 'e', ZEN4.replace('AMD EPYC', 'Intel Xeon'))
  key = compilation_cache.host_key(one_core)
  assert key == compilation_cache.host_key(two_cores) == compilation_cache.host_key(reordered)
  assert key != compilation_cache.host_key(avx2_only)
  assert key != compilation_cache.host_key(other_model)
  assert compilation_cache.host_key(str(tmp_path / 'missing'))  # not Linux: still a name


def test_the_users_variable_wins_and_empty_turns_the_cache_off(monkeypatch, tmp_path):
  import jax

  updates = []
  monkeypatch.setattr(jax.config, 'update', lambda name, value: updates.append((name, value)))
  monkeypatch.delenv('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', raising=False)  # conftest's
  monkeypatch.setenv('JAX_COMPILATION_CACHE_DIR', '')
  assert compilation_cache.enable() is None
  assert updates == []
  monkeypatch.setenv('JAX_COMPILATION_CACHE_DIR', str(tmp_path / 'mine'))
  assert compilation_cache.enable() == str(tmp_path / 'mine')
  # JAX reads its variable itself; the small programs are kept in the user's folder too.
  assert updates == [('jax_persistent_cache_min_compile_time_secs', 0.0)]
  updates.clear()
  monkeypatch.delenv('JAX_COMPILATION_CACHE_DIR')
  monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path / 'xdg'))
  path = compilation_cache.enable()
  assert path == str(tmp_path / 'xdg' / 'attnlab' / 'xla' / compilation_cache.host_key())
  assert ('jax_compilation_cache_dir', path) in updates
  assert ('jax_persistent_cache_min_compile_time_secs', 0.0) in updates  # small programs too
  updates.clear()
  monkeypatch.setenv('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', '2')
  compilation_cache.enable()
  assert [name for name, _ in updates] == ['jax_compilation_cache_dir',
                                           'jax_compilation_cache_max_size']  # JAX reads it


@pytest.mark.slow
def test_a_command_keeps_its_programs_and_a_second_process_reads_them(tmp_path):
  # A program that compiles in milliseconds: kept all the same.
  env = {k: v for k, v in os.environ.items()
         if k not in ('JAX_COMPILATION_CACHE_DIR', 'JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS')}
  env.update(XDG_CACHE_HOME=str(tmp_path))
  program = (
    'import jax, jax.numpy as jnp\n'
    'from attnlab.runtime import compilation_cache\n'
    'hits = []\n'
    'jax.monitoring.register_event_listener(\n'
    '  lambda event, **_: hits.append(event) if event.endswith("/cache_hits") else None)\n'
    'print(compilation_cache.enable())\n'
    'jax.jit(lambda x: jnp.tanh(x @ x.T).sum())(jnp.ones((8, 8))).block_until_ready()\n'
    'print(len(hits))\n'
  )

  def run():
    done = subprocess.run(
      [sys.executable, '-c', program], env=env, capture_output=True, text=True, check=True
    )
    folder, hits = done.stdout.split()[-2:]
    return folder, int(hits)

  folder, hits = run()
  assert folder.startswith(str(tmp_path)) and hits == 0
  assert any('jit__lambda' in name for name in os.listdir(folder)), os.listdir(folder)
  again, hits = run()
  assert again == folder and hits >= 1  # the second process loads its programs, no compiling
