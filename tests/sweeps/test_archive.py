"""A sweep's archive (attnlab/sweeps/archive.py): finished trials kept without checkpoints, and a
sweep on another machine (a fresh --workdir) that restores them instead of training them again."""

import gzip
import io
import json
import lzma
import os
import re
import shutil

import pytest
from support.fake_sweep import make_sweep

from attnlab import sweep
from attnlab.reporting import sweep_report
from attnlab.rundir import layout
from attnlab.sweeps import archive as archive_lib
from attnlab.sweeps import runner as sweep_runner
from attnlab.sweeps import trial_dirs
from attnlab.sweeps import trials as trials_lib
from attnlab.sweeps.trials import MANIFEST, SweepError, Trial

SMOKE = 'configs/reverse.py:smoke'
EXPERIMENT = f"""
BASE = {SMOKE!r}
def sweep(add):
  for seed in (0, 1):
    add(**{{'seed': seed}})
"""


def _trials(*seeds):
  return [Trial(f'seed={s}', SMOKE, {'seed': s}, {}) for s in seeds]


def _files(directory):
  return sorted(
    os.path.relpath(os.path.join(root, name), directory)
    for root, _, names in os.walk(directory)
    for name in names
  )


def test_a_finished_trial_is_archived_without_checkpoints(tmp_path, fake_python):
  workdir, archive, out = str(tmp_path / 'sweep'), str(tmp_path / 'kept'), io.StringIO()
  runs = _trials(0, 13)  # seed 13 fails in the stand-in interpreter
  runner = sweep_runner.LocalRunner(
    workdir, {t.name: 4 for t in runs}, archive=archive, poll=0.02, python=fake_python, out=out
  )
  # What training also leaves: the archive keeps what the reports read, the test split's
  # predictions and the tested step's (4) attention weights, large text files compressed.
  written = (
    layout.LOG_FILE,
    'tensorboard/eval/events.out.tfevents.123.host',
    'source_vocab.json',
    'target_vocab.json',
    'predictions_eval.jsonl',
    'predictions_test.jsonl',
    'attention/eval_step0000002.npz',
    'attention/eval_step0000002_ex0.png',
    'attention/test_step0000002.npz',
    'attention/test_step0000002_ex0.png',
    'attention/test_step0000004.npz',
    'attention/test_step0000004_ex0.png',
    'samples/eval_step0000002.txt',
    'samples/test_step0000004.txt',
  )
  for name in ('seed=0', 'seed=13'):
    for path in written:
      os.makedirs(os.path.dirname(os.path.join(workdir, name, path)), exist_ok=True)
      with open(os.path.join(workdir, name, path), 'w') as f:
        f.write('output\n')
  assert runner.run(runs) == {'seed=0': 'finished', 'seed=13': 'failed'}
  kept = os.path.join(archive, 'seed=0')
  assert os.path.isdir(os.path.join(workdir, 'seed=0', 'checkpoints', '2'))
  assert _files(kept) == [
    'attention/test_step0000004.npz',
    'final_metrics.json',
    'metrics.jsonl.xz',
    'predictions_test.jsonl.xz',
    sweep_runner.LOG_FILE + '.xz',
    trial_dirs.STATUS_FILE,
  ]
  with layout.open_text(os.path.join(kept, 'predictions_test.jsonl')) as f:
    assert f.read() == 'output\n'
  assert list(trial_dirs.metric_events(kept)) == [{'step': 2, 'split': 'train'}]
  assert trial_dirs.read_status(kept)['status'] == 'finished'  # the final status, not 'running'
  assert not os.path.exists(os.path.join(archive, 'seed=13'))  # failed: nothing to keep
  assert f'[archived] seed=0 -> {kept}' in out.getvalue()
  assert not [n for n in os.listdir(archive) if n.endswith(('.tmp', '.old'))]


def test_a_new_machine_restores_finished_trials_and_runs_the_rest(tmp_path, fake_python):
  archive = str(tmp_path / 'kept')
  first = str(tmp_path / 'machine1')
  runs = _trials(0, 1)
  runner = sweep_runner.LocalRunner(
    first, {t.name: 4 for t in runs}, archive=archive, poll=0.02, python=fake_python,
    out=io.StringIO(),
  )
  assert runner.run(runs[:1]) == {'seed=0': 'finished'}

  # Machine 2: an empty workdir, except a partial run of seed 0 (to be replaced by the archive).
  second = str(tmp_path / 'machine2')
  os.makedirs(os.path.join(second, 'seed=0', 'checkpoints', '1'))
  assert archive_lib.sync(second, archive, runs) == (['seed=0'], [], [])
  assert trial_dirs.trial_state(os.path.join(second, 'seed=0')) == 'finished'
  assert not os.path.exists(os.path.join(second, 'seed=0', 'checkpoints'))
  with open(os.path.join(second, 'seed=0', 'final_metrics.json')) as f:
    assert json.load(f)['test'] == {'sequence_accuracy': 0.5}

  # A trial finished in the workdir before --archive was given is archived by the next sync.
  runner = sweep_runner.LocalRunner(
    second, {'seed=1': 4}, poll=0.02, python=fake_python, out=io.StringIO()
  )
  assert runner.run(runs[1:]) == {'seed=1': 'finished'}
  assert archive_lib.sync(second, archive, runs) == ([], ['seed=1'], [])
  assert archive_lib.sync(second, archive, runs) == ([], [], [])  # in agreement now
  assert trial_dirs.trial_state(os.path.join(archive, 'seed=1')) == 'finished'


def test_an_archived_trial_of_other_settings_is_refused(tmp_path):
  archive, workdir = str(tmp_path / 'kept'), str(tmp_path / 'sweep')
  [trial] = _trials(0)
  kept = trial_dirs.trial_dir(archive, trial)
  trial_dirs.write_status(kept, {'config': SMOKE, 'overrides': {'seed': 0}, 'status': 'finished'})
  with open(os.path.join(kept, 'final_metrics.json'), 'w') as f:
    json.dump({'step': 4}, f)
  changed = Trial(trial.name, SMOKE, {'seed': 0}, {'train.num_steps': 9})
  with pytest.raises(SweepError, match=r'kept/seed=0 was run with other settings .*num_steps'):
    archive_lib.sync(workdir, archive, [changed])
  assert not os.path.exists(workdir)  # nothing restored


def test_an_older_archive_of_gzip_files_is_read_and_restored_as_xz(tmp_path):
  """An archive written when archives held NAME.gz: the reports and a restore read it, and the
  restored trial holds NAME.xz, which the xz format itself decompresses to the same bytes."""
  archive, workdir = str(tmp_path / 'kept'), str(tmp_path / 'sweep')
  [trial] = _trials(0)
  kept = trial_dirs.trial_dir(archive, trial)
  trial_dirs.write_status(kept, {**trial_dirs.identity(trial), 'status': 'finished'})
  with open(os.path.join(kept, 'final_metrics.json'), 'w') as f:
    json.dump({'step': 4}, f)
  texts = {
    'metrics.jsonl': b'{"step": 2, "split": "train", "loss": 1.5}\n{"step": 4, "spl',
    'predictions_test.jsonl': '{"source": "d\u00e9but", "hypothesis": "fin"}\n'.encode(),
    trial_dirs.LOG_FILE: b'[start] seed=0\n\xff cut\n',
  }
  for name, data in texts.items():
    with open(os.path.join(kept, name + '.gz'), 'wb') as f:
      f.write(gzip.compress(data, mtime=0))
  with layout.open_text(os.path.join(kept, trial_dirs.LOG_FILE)) as f:
    assert f.read() == '[start] seed=0\n\ufffd cut\n'
  events = [{'step': 2, 'split': 'train', 'loss': 1.5}]  # the cut last line is skipped
  assert list(trial_dirs.metric_events(kept)) == events

  assert archive_lib.sync(workdir, archive, [trial]) == (['seed=0'], [], [])
  restored = trial_dirs.trial_dir(workdir, trial)
  assert _files(restored) == [
    'final_metrics.json',
    'metrics.jsonl.xz',
    'predictions_test.jsonl.xz',
    trial_dirs.LOG_FILE + '.xz',
    trial_dirs.STATUS_FILE,
  ]
  for name, data in texts.items():
    with open(os.path.join(restored, name + '.xz'), 'rb') as f:
      assert lzma.decompress(f.read(), format=lzma.FORMAT_XZ) == data
  assert list(trial_dirs.metric_events(restored)) == events
  # Beside a plain file, the plain file is the one read and archived.
  with open(os.path.join(restored, 'metrics.jsonl'), 'w') as f:
    f.write('{"step": 4, "split": "eval"}\n')
  assert list(trial_dirs.metric_events(restored)) == [{'step': 4, 'split': 'eval'}]
  archive_lib.replace_tree(restored, kept)
  assert not [n for n in _files(kept) if n.endswith('.gz') or n == 'metrics.jsonl']
  assert list(trial_dirs.metric_events(kept)) == [{'step': 4, 'split': 'eval'}]


def test_the_sweep_command_skips_what_the_archive_holds(tmp_path, fake_python):
  """`python -m attnlab.sweep EXP --workdir=NEW --archive=A` on a fresh machine (`make
  ablations` on a fresh checkout): the trials finished in A, by this experiment's sweep on an
  old machine, are restored and not run; A keeps the sweep's manifest for the report."""
  path = tmp_path / 'exp.py'
  path.write_text(EXPERIMENT)
  archive = str(tmp_path / 'kept')
  assert sweep.run_sweep(str(path), str(tmp_path / 'old'), archive=archive, report=False,
                         out=io.StringIO(), python=fake_python) == 0
  out, workdir = io.StringIO(), str(tmp_path / 'new')
  # The listing shows what the sweep would restore, read from the archive, and writes nothing.
  assert sweep.run_sweep(str(path), workdir, archive=archive, dry_run=True, out=out) == 0
  rows = [line.split(None, 4)[1:] for line in out.getvalue().splitlines()
          if line.strip()[:1].isdigit()]
  assert rows == [['archived', '2/4', 'seed=0', 'test sequence_accuracy 0.5000'],
                  ['archived', '2/4', 'seed=1', 'test wer 0.2500 (step 3 of 4, stopped early)']]
  assert not os.path.exists(workdir)
  out = io.StringIO()
  code = sweep.run_sweep(str(path), workdir, archive=archive, report=False, out=out)
  assert code == 0, out.getvalue()
  assert f'archive {archive}: 2 finished trials restored, 0 archived' in out.getvalue()
  assert '2 trials, 2 finished (skipped), 0 to run, 0 invalid' in out.getvalue()
  assert '[start]' not in out.getvalue()
  # Restored as the archive keeps them: compact, and finished.
  assert os.path.isfile(os.path.join(workdir, 'seed=1', 'metrics.jsonl.xz'))
  assert not os.path.exists(os.path.join(workdir, 'seed=1', 'metrics.jsonl'))
  with open(os.path.join(archive, MANIFEST)) as f:
    assert [t['name'] for t in json.load(f)['trials']] == ['seed=0', 'seed=1']


@pytest.mark.slow
def test_another_experiments_folder_is_refused_before_anything_is_written(tmp_path, fake_python):
  """A second experiment pointed at the first one's --archive or --workdir would write its
  manifest over the first's and mix two experiments' trials in one report: one error line
  naming whose folder it is, and the first experiment's files as they were."""
  first = tmp_path / 'first.py'
  first.write_text(EXPERIMENT)
  workdir, archive = str(tmp_path / 'runs' / 'first'), str(tmp_path / 'results' / 'first')
  assert sweep.run_sweep(str(first), workdir, archive=archive, report=False, out=io.StringIO(),
                         python=fake_python) == 0
  second = tmp_path / 'second.py'
  second.write_text(EXPERIMENT)
  before = {d: open(os.path.join(d, MANIFEST)).read() for d in (workdir, archive)}
  # (the second experiment's workdir, its archive, the flag that names the first's folder)
  mistakes = ((str(tmp_path / 'runs' / 'second'), archive, f'--archive={archive}'),
              (workdir, None, f'--workdir={workdir}'))
  for other_workdir, other_archive, flag in mistakes:
    for dry_run in (True, False):
      message = f'{flag} holds the sweep of {first}, not of {second}: give each experiment its own'
      with pytest.raises(SweepError, match=re.escape(message)):
        sweep.run_sweep(str(second), other_workdir, archive=other_archive, dry_run=dry_run,
                        report=False, out=io.StringIO(), python=fake_python)
  assert {d: open(os.path.join(d, MANIFEST)).read() for d in before} == before
  assert not os.path.exists(tmp_path / 'runs' / 'second')
  # Its own folders are fine, and a rerun of the first experiment on its own folders too.
  assert sweep.run_sweep(str(second), str(tmp_path / 'runs' / 'second'), report=False,
                         archive=str(tmp_path / 'results' / 'second'), out=io.StringIO(),
                         python=fake_python) == 0
  assert sweep.run_sweep(str(first), workdir, archive=archive, report=False, out=io.StringIO(),
                         python=fake_python) == 0


def _bytes(directory, names):
  out = {}
  for name in names:
    with open(os.path.join(directory, name), 'rb') as f:
      out[name] = f.read()
  return out


REPORT_FILES = ('results.md', 'results.csv', 'report.html', 'plots/reverse-attention.png')


def test_a_restored_archive_reports_as_the_trials_it_was_made_from(tmp_path):
  """A finished sweep archived (compact: xz-compressed text, no samples, vocabularies or
  heatmap PNGs), restored into a fresh workdir as `make ablations` does on a fresh checkout,
  and reported: the same results.md, results.csv, report.html and plots, from the archive and
  from the restored workdir, as from the trials themselves; archiving again changes no byte."""
  trained = make_sweep(str(tmp_path / 'trained'))
  _, trials = trials_lib.read_manifest(trained)
  # A failed trial is not archived: only the finished ones are compared.
  shutil.rmtree(os.path.join(trained, 'timing=none,seed=1'))
  finished = [t for t in trials if trial_dirs.trial_state(os.path.join(trained, t.name))
              == 'finished']
  for trial in finished:  # what the runner and training leave beside what make_sweep wrote
    directory = os.path.join(trained, trial.name)
    trial_dirs.write_status(directory, {**trial_dirs.read_status(directory),
                                        **trial_dirs.identity(trial)})
    attention = ('attention/test_step0000004_ex0.png', 'attention/test_step0000002.npz')
    for name in ('checkpoints/8/state', 'source_vocab.json', 'samples/test_step0000004.txt',
                 trial_dirs.LOG_FILE) + (attention * os.path.isdir(directory + '/attention')):
      os.makedirs(os.path.dirname(os.path.join(directory, name)), exist_ok=True)
      with open(os.path.join(directory, name), 'w', encoding='utf-8') as f:
        f.write('début\n')
  sweep_report.write_report(trained)
  expected = _bytes(trained, REPORT_FILES)

  archive = str(tmp_path / 'results' / 'toy')
  archive_lib.copy_manifest(trained, archive)
  for trial in finished:
    archive_lib.archive_trial(trained, archive, trial)
  kept = _files(archive)
  assert not [n for n in kept if n.endswith(('.png', '.txt', 'vocab.json', 'metrics.jsonl',
                                             'predictions_test.jsonl', 'step0000002.npz'))]
  assert 'timing=luong,seed=0/metrics.jsonl.xz' in kept
  assert 'timing=luong,seed=0/attention/test_step0000004.npz' in kept
  before = _bytes(archive, kept)
  for trial in finished:  # again, from the workdir and from the archive itself: the same bytes
    archive_lib.archive_trial(trained, archive, trial)
    archive_lib.replace_tree(os.path.join(archive, trial.name), os.path.join(archive, trial.name))
  assert _bytes(archive, _files(archive)) == before

  fresh = str(tmp_path / 'runs' / 'toy')
  assert archive_lib.sync(fresh, archive, trials) == ([t.name for t in finished], [], [])
  assert archive_lib.sync(fresh, archive, trials) == ([], [], [])  # finished: nothing to do
  archive_lib.copy_manifest(trained, fresh)  # the sweep writes its manifest into its workdir
  for directory in (archive, fresh):
    sweep_report.write_report(directory)
    assert _bytes(directory, REPORT_FILES) == expected, directory
