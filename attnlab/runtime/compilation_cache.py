"""XLA's persistent compilation cache for attnlab's commands.

On CPU, compiling is minutes of a short run (the Bible model's 16 padded shapes: ~3 min), and
the same programs come back: a resumed run, the seeds of one sweep variant, `evaluate` and
`decode` of a trained run. JAX can keep compiled programs on disk, keyed by the program, the
XLA flags, the JAX version and the devices; attnlab turns that on in a per-user folder.

The key does not name the host CPU's instruction set, so a folder shared by machines (a
network home) could hand an AVX-512 program to an AVX2 machine: each CPU model and feature set
gets a subfolder of its own.

JAX keeps only programs that took at least 1 s to compile; a command's small programs (a
decode's search for each padded shape) would then compile again in every process, about a second
of each `attnlab.decode` start, so attnlab keeps them all.

JAX_COMPILATION_CACHE_DIR (JAX's own variable) chooses another folder, which keeps small programs
too; set it empty to turn the cache off. JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS sets JAX's
threshold instead of 0.
"""

from __future__ import annotations

import hashlib
import os
import platform

from attnlab.runtime import machine

ENV = 'JAX_COMPILATION_CACHE_DIR'
MIN_COMPILE_ENV = 'JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS'
MAX_BYTES = 4 << 30  # least recently used programs go first beyond this


def host_key(cpuinfo: str = '/proc/cpuinfo') -> str:
  """A short name for this host's CPU: its architecture and a hash of the first core's model
  name and instruction-set flags (x86 `flags`, Arm `Features`)."""
  fields = machine.cpuinfo(cpuinfo)
  model = fields.get('model name') or fields.get('Model') or platform.processor()  # not Linux
  flags = ' '.join(sorted((fields.get('flags') or fields.get('Features', '')).split()))
  digest = hashlib.sha256(f'{model}\n{flags}'.encode()).hexdigest()[:12]
  return f'{platform.machine()}-{digest}'


def default_dir() -> str:
  base = os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
  return os.path.join(base, 'attnlab', 'xla', host_key())


def enable() -> str | None:
  """Turns the cache on (before the first compilation) unless JAX_COMPILATION_CACHE_DIR says
  otherwise; returns the folder in use, or None when it is off."""
  import jax

  if ENV in os.environ:  # the user's folder, or '' for none; JAX reads its variable itself
    path = os.environ[ENV] or None
  else:
    path = default_dir()
    jax.config.update('jax_compilation_cache_dir', path)
    jax.config.update('jax_compilation_cache_max_size', MAX_BYTES)
  if path and MIN_COMPILE_ENV not in os.environ:
    jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.0)
  return path
