"""The folders a sweep and its report write into: a --workdir or --archive that is a file, or an
existing folder that is not this experiment's own sweep, is refused in one line before anything
is written (a sweep writes results.md, results.csv, report.html and plots/ there and replaces
trial folders wholesale); an experiment file that is not Python is one line naming where."""

import io
import json
import os

import pytest
from support.experiment_files import write_experiment
from support.files import file_tree
from support.smoke_runs import one_error_line, run_cli

from attnlab import sweep
from attnlab.sweeps import trial_dirs, trials
from attnlab.sweeps.trials import MANIFEST, SweepError

EXPERIMENT = """
BASE = 'configs/reverse.py:smoke'
def sweep(add):
  for seed in (0, 1):
    add(**{'model.attention.score': 'dot', 'seed': seed})
"""
# What the probe's folder held: files named as a sweep's, and a folder named as one of its trials.
USER_FILES = {
  'results.md': b'# my results\n',
  'results.csv': b'a,b\n1,2\n',
  'report.html': b'<p>mine</p>\n',
  'notes.txt': b'notes\n',
  'plots/mine.png': b'\x89PNG not really\n',
  'score=dot,seed=0/important.txt': b'do not delete\n',
}


def _user_folder(path) -> str:
  for name, data in USER_FILES.items():
    os.makedirs(os.path.dirname(os.path.join(path, name)), exist_ok=True)
    with open(os.path.join(path, name), 'wb') as f:
      f.write(data)
  return str(path)


@pytest.mark.parametrize('flag', ['--workdir', '--archive'])
def test_a_folder_that_is_not_a_sweep_is_refused_and_left_as_it_was(tmp_path, fake_python, flag):
  path = write_experiment(tmp_path, EXPERIMENT)
  mine = _user_folder(tmp_path / 'mine')
  workdir, archive = (mine, None) if flag == '--workdir' else (str(tmp_path / 'runs'), mine)
  before = file_tree(tmp_path)
  message = (f'{flag}={mine} already holds files and no {MANIFEST}, so it is not a sweep of '
             f'{path}: the sweep would write its results.md, results.csv, report.html and trial '
             f'folders over what is there; give a new or empty folder (e.g. {flag}=')
  with pytest.raises(SweepError) as refused:  # the whole run, trials and report included
    sweep.run_sweep(path, workdir, archive=archive, out=io.StringIO(), python=fake_python)
  assert str(refused.value).startswith(message)
  args = [path, f'--workdir={workdir}'] + ([f'--archive={archive}'] if archive else [])
  line = one_error_line(run_cli(*args, '--dry_run', module='attnlab.sweep'))
  assert line == f'error: {refused.value}'
  assert line.endswith(f'(e.g. {flag}={tmp_path / "exp"})')  # a folder it may use
  assert file_tree(tmp_path) == before  # byte for byte; no sweep.json, claims or trial folder


def test_new_empty_and_its_own_folders_are_used(tmp_path, fake_python):
  path = write_experiment(tmp_path, EXPERIMENT)
  workdir, archive = tmp_path / 'runs' / 'exp', tmp_path / 'results' / 'exp'
  os.makedirs(workdir)  # empty: used
  run = lambda **kw: sweep.run_sweep(path, str(workdir), archive=str(archive), report=False,
                                     out=io.StringIO(), python=fake_python, **kw)
  assert run(only='score=dot,seed=0') == 0  # one trial (a SLURM task) on new folders
  for folder in (workdir, archive):  # ... names the experiment in both, so they are its own
    with open(folder / MANIFEST) as f:
      assert json.load(f)['name'] == 'exp'
  assert run() == 0  # the rest of the sweep, on its own folders
  for folder in (workdir, archive):
    assert trial_dirs.trial_state(str(folder / 'score=dot,seed=1')) == 'finished'
  # A fresh workdir restores both from the archive (make ablations on a fresh checkout).
  out = io.StringIO()
  assert sweep.run_sweep(path, str(tmp_path / 'new'), archive=str(archive), report=False,
                         out=out, python=fake_python) == 0
  assert f'archive {archive}: 2 finished trials restored' in out.getvalue()


@pytest.mark.slow
def test_a_broken_manifest_or_the_workdir_as_archive_is_refused(tmp_path, fake_python):
  path = write_experiment(tmp_path, EXPERIMENT)
  workdir = tmp_path / 'sweep'
  assert sweep.run_sweep(path, str(workdir), report=False, out=io.StringIO(),
                         python=fake_python) == 0
  # The archive is a copy without checkpoints: archiving onto the workdir would drop them.
  before = file_tree(tmp_path)
  with pytest.raises(SweepError, match=f'--archive={workdir} is the --workdir: the archive is '):
    sweep.run_sweep(path, str(workdir), archive=str(workdir), report=False, out=io.StringIO(),
                    python=fake_python)
  assert file_tree(tmp_path) == before
  (workdir / MANIFEST).write_text('{"name": ')  # cut short
  before = file_tree(tmp_path)
  with pytest.raises(SweepError, match=f'--workdir={workdir}: {workdir / MANIFEST} is not a '
                                       'readable sweep manifest'):
    sweep.run_sweep(path, str(workdir), report=False, out=io.StringIO(), python=fake_python)
  # The report writes where a sweep's manifest is, and names a broken one in one line.
  line = one_error_line(run_cli(str(workdir), module='attnlab.report'))
  assert line.startswith(f'error: {workdir / MANIFEST} is not a readable sweep manifest '
                         '(JSONDecodeError: ')
  mine = _user_folder(tmp_path / 'mine')
  line = one_error_line(run_cli(mine, module='attnlab.report'))
  assert line.startswith(f'error: {mine} holds no {MANIFEST}; run `python -m attnlab.sweep')
  assert file_tree(tmp_path) == {**before, **{f'mine/{k}': v for k, v in USER_FILES.items()},
                             'mine': None, 'mine/plots': None, 'mine/score=dot,seed=0': None}


@pytest.mark.slow
@pytest.mark.parametrize('flag', ['--workdir', '--archive'])
def test_a_file_as_workdir_or_archive_is_one_line(tmp_path, flag):
  path = write_experiment(tmp_path, EXPERIMENT)
  (tmp_path / 'afile').write_bytes(b'my data\n')
  folders = {'--workdir': str(tmp_path / 'runs'), '--archive': str(tmp_path / 'kept')}
  before = file_tree(tmp_path)
  for given, message in ((tmp_path / 'afile', 'is a file, not a folder; give a new or empty '
                                              f'folder (e.g. {flag}={tmp_path / "exp"})'),
                         (tmp_path / 'afile' / 'sub', f'is under {tmp_path / "afile"}, which is '
                                                      'a file, not a folder')):
    args = {**folders, flag: str(given)}
    line = one_error_line(run_cli(path, *(f'{k}={v}' for k, v in args.items()),
                                   module='attnlab.sweep'))
    assert line.startswith(f'error: {flag}={given} {message}')
  assert file_tree(tmp_path) == before


@pytest.mark.slow
def test_an_experiment_file_that_is_not_python_is_one_line(tmp_path):
  syntax = write_experiment(tmp_path, EXPERIMENT.replace('def sweep(add):', 'def sweep(add)'),
                            name='syntax.py')
  line = one_error_line(run_cli(syntax, f'--workdir={tmp_path / "runs"}',
                                 module='attnlab.sweep'))
  assert line == f"error: {syntax}:3: expected ':'"
  nul = tmp_path / 'nul.py'
  nul.write_bytes(b"BASE = 'configs/reverse.py:smoke'\n\x00def sweep(add):\n  pass\n")
  line = one_error_line(run_cli(str(nul), f'--workdir={tmp_path / "runs"}',
                                 module='attnlab.sweep'))
  assert line.startswith(f'error: {nul}: NUL byte at byte offset 34 (line 2); ')
  assert not (tmp_path / 'runs').exists()
  with pytest.raises(SweepError, match=f'{syntax}:3: expected'):  # the dry run too
    trials.load_experiment(syntax)


def test_a_folder_another_process_is_creating_is_checked_again_under_the_lock(
  tmp_path, fake_python, monkeypatch
):
  """Two sweep processes started together on a new folder (make ablations' workers): one may
  find only the other's manifest being written, and goes on; the check is repeated under the
  sweep's lock before anything is written, so a second experiment is still refused."""
  path = write_experiment(tmp_path, EXPERIMENT)
  workdir = tmp_path / 'runs' / 'exp'
  os.makedirs(workdir)
  (workdir / f'{MANIFEST}.99999.tmp').write_text('{"name": ')  # the other process's, half
  assert sweep.run_sweep(path, str(workdir), report=False, out=io.StringIO(),
                         python=fake_python) == 0

  other = write_experiment(tmp_path, EXPERIMENT, name='other.py')
  new = tmp_path / 'runs' / 'new'
  real_lock = sweep.claims.sweep_lock

  def lock_after_the_first_sweep_wrote(folder):  # the first experiment got there first
    trials.write_manifest(str(new), trials.load_experiment(path), 'local')
    return real_lock(folder)

  monkeypatch.setattr(sweep.claims, 'sweep_lock', lock_after_the_first_sweep_wrote)
  with pytest.raises(SweepError, match=f'--workdir={new} holds the sweep of {path}, not of '):
    sweep.run_sweep(other, str(new), report=False, out=io.StringIO(), python=fake_python)
  assert os.listdir(new) == [MANIFEST]


def test_another_experiment_file_of_the_same_name_is_another_experiment(tmp_path, fake_python):
  """experiments/learning_speed/local_global.py and experiments/local_global.py are both
  'local_global': the manifest's file tells them apart where it resolves."""
  os.makedirs(tmp_path / 'speed')
  first = write_experiment(tmp_path, EXPERIMENT)
  second = write_experiment(tmp_path / 'speed', EXPERIMENT)
  workdir = str(tmp_path / 'runs' / 'exp')
  assert sweep.run_sweep(first, workdir, report=False, out=io.StringIO(),
                         python=fake_python) == 0
  before = file_tree(tmp_path / 'runs')
  with pytest.raises(SweepError, match=f'--workdir={workdir} holds the sweep of {first}, not of '
                                       f'{second}: give each experiment its own folder'):
    sweep.run_sweep(second, workdir, report=False, out=io.StringIO(), python=fake_python)
  assert file_tree(tmp_path / 'runs') == before
  # The same file under another spelling is the same experiment.
  assert sweep.run_sweep(os.path.relpath(first), workdir, report=False, out=io.StringIO(),
                         python=fake_python) == 0
