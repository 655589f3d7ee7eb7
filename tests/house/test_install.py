"""What a fresh machine and CI get: the Makefile's install steps, the tests that need a part from
outside (skipped outside CI, failed under CI=true), and the hang guard.

The Makefile runs under a real make on a copy of it and pyproject.toml, with a stand-in
interpreter, so nothing is downloaded or installed: the stand-in answers `--version` with the
version it is given, makes `-m venv DIR` a folder whose bin/python is a copy of itself
(reporting 3.11), and logs every call.
"""

import os
import re
import shutil
import subprocess
import sys
import tomllib

import pytest
from support import REPO

FAKE_PYTHON = """\
#!/bin/sh
echo "$(basename "$0") $*" >> {log}
case "$1" in
  --version) echo "Python {version}" >&{stream} ;;
  -m) if [ "$2" = venv ]; then
        mkdir -p "$3/bin" && sed 's/{version}/3.11.9/' "$0" > "$3/bin/python"
        chmod +x "$3/bin/python"
      fi ;;
esac
"""
HINT = '(Ubuntu 22.04: sudo apt install python3.11 python3.11-venv)'


@pytest.fixture
def checkout(tmp_path):
  """A folder with the repository's Makefile and pyproject.toml, and `fake(version)`: the path
  of a stand-in interpreter of that version; `calls()` lists what it was asked."""
  root = tmp_path / 'checkout'
  root.mkdir()
  for name in ('Makefile', 'pyproject.toml'):
    shutil.copy(REPO / name, root / name)
  log = tmp_path / 'calls.log'

  def fake(version, name='python3.10'):
    path = tmp_path / name
    # Python 2 printed its version on stderr.
    stream = 2 if version.startswith('2.') else 1
    path.write_text(FAKE_PYTHON.format(log=log, version=version, stream=stream))
    path.chmod(0o755)
    return path

  def calls():
    return log.read_text().splitlines() if log.exists() else []

  return root, fake, calls


def make(root, *args):
  """make in `root`, with none of an outer make's or a user's settings in the environment."""
  env = {k: v for k, v in os.environ.items()
         if k not in ('MAKEFLAGS', 'MFLAGS', 'MAKELEVEL', 'PYTHON', 'VENV')}
  env['LC_ALL'] = 'C'  # make's own messages in English
  return subprocess.run(['make', *args], cwd=root, env=env, capture_output=True, text=True,
                        timeout=60)


@pytest.mark.parametrize('version', ['3.10.12', '3.9.18', '2.7.18'])
@pytest.mark.parametrize('goal', ['demo', 'test'])
def test_an_older_python_is_refused_in_one_line_before_a_venv_is_made(checkout, version, goal):
  root, fake, calls = checkout
  python = fake(version)
  result = make(root, goal, f'PYTHON={python}')
  assert result.returncode == 2 and result.stdout == ''
  error, *rest = result.stderr.splitlines()
  assert error == (
    f'error: attnlab needs Python >= 3.11; PYTHON={python} is {version[:version.rindex(".")]}; '
    f'pass another: make {goal} PYTHON=python3.11 {HINT}'
  )
  (status,) = rest  # make's own line
  assert re.fullmatch(r'make: \*\*\* \[Makefile:\d+: \.venv/\.installed\] Error 2', status)
  assert calls() == ['python3.10 --version'] and not (root / '.venv').exists()


def test_a_missing_python_is_named(checkout):
  root, _, _ = checkout
  result = make(root, 'demo', 'PYTHON=python3.999')
  assert result.returncode == 2
  assert result.stderr.splitlines()[0] == (
    'error: attnlab needs Python >= 3.11; PYTHON=python3.999 is not found; '
    f'pass another: make demo PYTHON=python3.11 {HINT}'
  )
  assert not (root / '.venv').exists()


def test_a_venv_of_an_older_python_is_refused_with_the_way_out(checkout):
  root, fake, calls = checkout
  (root / '.venv' / 'bin').mkdir(parents=True)
  shutil.copy(fake('3.10.12'), root / '.venv' / 'bin' / 'python')
  result = make(root, 'test', f'PYTHON={fake("3.12.3", name="python3.12")}')
  assert result.returncode == 2
  assert result.stderr.splitlines()[0] == (
    'error: attnlab needs Python >= 3.11; .venv/bin/python is 3.10; '
    f'make clean-venv; then make test PYTHON=python3.11 {HINT}'
  )
  assert calls() == ['python --version']  # nothing installed into it


@pytest.mark.parametrize('version', ['3.11.0', '3.12.3', '3.13.1', '3.20.0'])
def test_demo_installs_attnlab_alone_and_test_adds_the_test_extra(checkout, version):
  root, fake, calls = checkout
  python = fake(version, name='python3')
  result = make(root, 'demo', f'PYTHON={python}')
  assert result.returncode == 0, result.stderr
  assert calls() == [
    'python3 --version',
    'python3 -m venv .venv',
    'python -m pip install -q --upgrade pip',
    'python -m pip install -q -e .',  # no pytest, ruff or selenium for the demo
    'python -m attnlab.main --config=configs/reverse.py --workdir=runs/demo',
  ]
  result = make(root, 'test', f'PYTHON={python}')
  assert result.returncode == 0, result.stderr
  assert calls()[5:] == [
    'python -m pip install -q -e .[test]',  # added to the demo's .venv
    'python -m ruff check .',
    'python -m pytest -q -rs -x -n 2 --durations=15',
  ]
  result = make(root, 'test', f'PYTHON={python}')  # installed: nothing again
  assert calls()[8:] == ['python -m ruff check .', 'python -m pytest -q -rs -x -n 2 --durations=15']


# Each outside part hidden from a pytest run of the tests that need it: chromium, chromedriver
# and shellcheck by an empty PATH, PyTorch and the SWORD modules by stand-in packages first on
# sys.path (a torch whose import fails as a missing one does; a pysword that finds no module).
NEEDS_A_PART = {
  'tests/reporting/test_browser.py': 'chromium',
  'tests/explore/test_browser.py': 'chromium',
  'tests/house/test_launch.py::test_shellcheck': 'shellcheck',
  'tests/data/test_bible.py::test_installed_modules_read_known_verses': 'the SWORD modules',
  'tests/house/test_benchmarks.py::test_torch_reference_equals_attnlab[luong-dot]': 'PyTorch',
  'tests/house/test_benchmarks.py::test_torch_autocast_reference_rounds_like_bf16_matmuls':
    'PyTorch',
}
SWORD = 'the SWORD modules spaRV1909eb, engWEB2015eb, engKJV2006eb'
SWORD_INSTALL = 'apt-get install sword-text-sparv sword-text-web sword-text-kjv'
TORCH = 'torch (the PyTorch reference of benchmarks/)'


def pytest_without_the_parts(tmp_path, ci):
  hidden = tmp_path / 'hidden'
  (hidden / 'pysword').mkdir(parents=True)
  (hidden / 'pysword' / '__init__.py').write_text('')
  (hidden / 'pysword' / 'modules.py').write_text(
    'class SwordModules:\n'
    '  def __init__(self, path):\n'
    '    pass\n'
    '  def parse_modules(self):\n'
    '    return {}\n'
  )
  (hidden / 'torch.py').write_text("raise ModuleNotFoundError('hidden', name='torch')\n")
  (tmp_path / 'empty_bin').mkdir()
  env = {k: v for k, v in os.environ.items() if k != 'CI' and not k.startswith('PYTEST_')}
  # COLUMNS: summary lines whole.
  env.update(PATH=str(tmp_path / 'empty_bin'), PYTHONPATH=str(hidden), COLUMNS='1000')
  if ci:
    env['CI'] = 'true'
  return subprocess.run(
    [sys.executable, '-m', 'pytest', '-q', '-rsfE', '-p', 'no:cacheprovider', '-n', '0',
     '--continue-on-collection-errors', *NEEDS_A_PART],
    cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
  )


@pytest.mark.slow
def test_a_missing_part_skips_naming_its_install_command(tmp_path):
  result = pytest_without_the_parts(tmp_path, ci=False)
  assert result.returncode == 0, result.stdout[-3000:]
  assert result.stdout.splitlines()[-1].startswith('6 skipped in ')  # and nothing else
  skips = re.findall(r'^SKIPPED \[(\d)\] (\S+?):\d+: (.*)$', result.stdout, re.M)
  assert sorted(skips) == [
    ('1', 'tests/data/test_bible.py', f'{SWORD} not found: {SWORD_INSTALL}'),
    ('1', 'tests/house/test_launch.py', 'shellcheck not found: apt-get install shellcheck'),
    ('2', 'tests/house/test_benchmarks.py', f'{TORCH} not found: make bench-deps'),
    ('2', 'tests/support/headless_chromium.py', 'chromium not found: apt-get install chromium'),
  ]


@pytest.mark.slow
def test_a_missing_part_fails_under_ci(tmp_path):
  result = pytest_without_the_parts(tmp_path, ci=True)
  assert result.returncode == 1, result.stdout[-3000:]
  ci = '; under CI (CI=true) its tests fail, not skip'
  summary = [line for line in result.stdout.splitlines() if line.startswith(('ERROR', 'FAILED'))]
  assert sorted(summary) == [
    'ERROR tests/data/test_bible.py::test_installed_modules_read_known_verses - Failed: '
    f'{SWORD} not found: {SWORD_INSTALL}{ci}',
    'ERROR tests/explore/test_browser.py - Failed: chromium not found: apt-get install '
    f'chromium{ci}',
    'ERROR tests/reporting/test_browser.py - Failed: chromium not found: apt-get install '
    f'chromium{ci}',
    'FAILED tests/house/test_benchmarks.py::test_torch_autocast_reference_rounds_like_bf16_matmuls'
    f' - Failed: {TORCH} not found: make bench-deps{ci}',
    'FAILED tests/house/test_benchmarks.py::test_torch_reference_equals_attnlab[luong-dot] - '
    f'Failed: {TORCH} not found: make bench-deps{ci}',
    'FAILED tests/house/test_launch.py::test_shellcheck - Failed: shellcheck not found: apt-get '
    f'install shellcheck{ci}',
  ]


def test_a_hung_test_is_stopped_with_every_threads_stack(tmp_path):
  """pytest-timeout is installed and pyproject.toml's method holds (the 15-minute limit cut to
  2 s here): a hung test ends the run, showing where it hung, instead of holding CI."""
  (tmp_path / 'test_hang.py').write_text('import time\n\ndef test_hangs():\n  time.sleep(60)\n')
  env = {k: v for k, v in os.environ.items() if not k.startswith('PYTEST_')}
  result = subprocess.run(
    [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', '-c',
     str(REPO / 'pyproject.toml'), '-o', 'timeout=2', str(tmp_path / 'test_hang.py')],
    env=env, capture_output=True, text=True, timeout=50,
  )
  output = result.stdout + result.stderr
  assert result.returncode != 0 and ' Timeout +' in output, output[-3000:]
  assert 'Stack of MainThread' in output and 'time.sleep(60)' in output  # the thread method


def test_accelerator_extras_ask_for_jaxs_backend_within_attnlabs_jax_range():
  with open(REPO / 'pyproject.toml', 'rb') as f:
    project = tomllib.load(f)['project']
  [jax_range] = [d.removeprefix('jax') for d in project['dependencies'] if d.startswith('jax>')]
  extras = project['optional-dependencies']
  for backend in ('cuda12', 'cuda13', 'tpu'):
    assert extras[backend] == [f'jax[{backend}]{jax_range}'], backend
