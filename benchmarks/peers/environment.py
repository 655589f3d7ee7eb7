"""The peers' own virtual environment: pinned OpenNMT-py and Joey NMT beside a CPU PyTorch.

Both toolkits ask for releases that cannot share one environment with the CPU wheel of
PyTorch this project benchmarks with: OpenNMT-py 3.5.1 pins torch<2.3 (on PyPI torch 2.2.2,
a CUDA build that brings its nvidia-* and triton wheels: about 2.7 GB), Joey NMT 2.3.0 pins
protobuf<3.21 and names its development tools (pylint, pytest, yapf, ...) as requirements. So
the toolkits install with `--no-deps` next to torch==2.13.0+cpu, and the packages their
training and translation code imports install with their own dependencies. `install` proves
every toolkit command starts; `benchmarks.peers --quick` proves they train and translate.

Two adaptations to torch 2.13, the toolkits' code unchanged: it loads checkpoints with
`weights_only=True` by default, and the toolkits save their options and vocabularies in them,
so their commands run with TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1; Joey NMT's command runs through
joey_main.py, which lets its plateau scheduler be built.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv

DEFAULT_VENV = os.path.expanduser('~/.cache/attnlab/peers-venv')
TORCH = 'torch==2.13.0'  # the CPU wheel (benchmarks/README.md, make bench-deps)
TOOLKITS = ('opennmt-py==3.5.1', 'joeynmt==2.3.0')  # installed without their requirements
# What their train / build_vocab / translate entry points import, as pip resolved it beside the
# CPU torch (OpenNMT-py imports every transform at start-up: spacy, fasttext, pyahocorasick,
# rapidfuzz, pyonmttok, sacrebleu, subword-nmt; Joey NMT plots and logs to TensorBoard).
IMPORTED = (
  'numpy==2.4.6',
  'pyyaml==6.0.4',
  'configargparse==1.9.0',
  'pyonmttok==1.38.1',
  'tensorboard==2.21.0',
  'spacy==3.8.18',
  'fasttext-wheel==0.9.2',
  'pyahocorasick==2.3.1',
  'rapidfuzz==3.14.6',
  'regex==2026.12.2',
  'sacrebleu==2.6.0',
  'subword-nmt==0.3.8',
  'sentencepiece==0.2.3',
  'matplotlib==3.11.2',
  'importlib-metadata==10.2.0',
)
# Joey NMT's command line, run through a script that adapts it to torch 2.13 (its docstring).
JOEY_MAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'joey_main.py')
# Each command once with --help / an import: what a missing requirement breaks first.
START_CHECKS = (
  ('onmt_build_vocab', '-h'),
  ('onmt_train', '-h'),
  ('onmt_translate', '-h'),
  ('python', JOEY_MAIN, '-h'),
  ('python', '-c', 'import joeynmt.training, joeynmt.prediction'),
)
VERSIONS_SCRIPT = (
  'import json, importlib.metadata as m; '
  "print(json.dumps({p: m.version(p) for p in ('torch', 'OpenNMT-py', 'joeynmt')}))"
)


class PeersError(RuntimeError):
  """The peers' environment could not be made or does not work (the message says which step)."""


def python(venv_dir: str) -> str:
  return os.path.join(venv_dir, 'bin', 'python')


def command(venv_dir: str, name: str) -> str:
  """The path of a console script (onmt_train, ...) or of the interpreter in the venv."""
  return os.path.join(venv_dir, 'bin', name)


def peer_environment() -> dict[str, str]:
  """The environment the toolkits' commands run in (see the module docstring)."""
  return dict(os.environ, TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD='1', PYTHONWARNINGS='ignore')


def _pip(venv_dir: str, *args: str) -> None:
  cmd = [python(venv_dir), '-m', 'pip', 'install', '-q', '--disable-pip-version-check', *args]
  done = subprocess.run(cmd, capture_output=True, text=True)
  if done.returncode:
    raise PeersError(f'{" ".join(cmd)} failed:\n{done.stderr[-2000:]}')


def installed(venv_dir: str) -> bool:
  """Whether the venv holds the pinned toolkits and every command starts."""
  try:
    return versions(venv_dir) == pinned_versions() and not start_failures(venv_dir)
  except (OSError, PeersError):
    return False


def pinned_versions() -> dict[str, str]:
  pins = dict(p.split('==') for p in (TORCH, *TOOLKITS))
  return {'torch': pins['torch'], 'OpenNMT-py': pins['opennmt-py'], 'joeynmt': pins['joeynmt']}


def versions(venv_dir: str) -> dict[str, str]:
  """The installed torch, OpenNMT-py and Joey NMT versions (torch without its +cpu tag)."""
  done = subprocess.run([python(venv_dir), '-c', VERSIONS_SCRIPT], capture_output=True, text=True)
  if done.returncode:
    raise PeersError(f'the peers venv {venv_dir} cannot report versions: {done.stderr[-500:]}')
  found = json.loads(done.stdout)
  found['torch'] = found['torch'].split('+')[0]
  return found


def start_failures(venv_dir: str) -> list[str]:
  """The start-up checks that fail, each with its last error line."""
  failures = []
  for name, *args in START_CHECKS:
    done = subprocess.run(
      [command(venv_dir, name), *args], capture_output=True, text=True, env=peer_environment()
    )
    if done.returncode:
      last = (done.stderr.strip().splitlines() or ['(no output)'])[-1]
      failures.append(f'{name} {" ".join(args)}: {last}')
  return failures


def install(venv_dir: str = DEFAULT_VENV) -> dict[str, str]:
  """Creates (or completes) the venv and returns the installed versions; raises PeersError."""
  if installed(venv_dir):
    return versions(venv_dir)
  print(f'installing the peers into {venv_dir} (about 1.5 GB)', file=sys.stderr, flush=True)
  if not os.path.exists(python(venv_dir)):
    venv.create(venv_dir, with_pip=True)
  _pip(venv_dir, TORCH)
  _pip(venv_dir, '--no-deps', *TOOLKITS)
  _pip(venv_dir, *IMPORTED)
  failures = start_failures(venv_dir)
  if failures:
    raise PeersError('the peers are installed but do not start:\n' + '\n'.join(failures))
  return versions(venv_dir)
