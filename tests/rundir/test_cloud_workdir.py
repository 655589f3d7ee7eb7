"""A run directory in a bucket (--workdir=gs://bucket/run): training writes it, and decode,
evaluate, load_run and run_report read it, all through etils.epath (attnlab/storage.py).

No network: the `buckets` fixture routes gs:// to a local folder, STORE/BUCKET/KEY, at the
three places a gs:// path leaves Python's own file functions: etils.epath's fsspec backend (an
fsspec filesystem registered for gs://), and orbax's two calls into Google Cloud (the
tensorstore driver of the arrays, and the bucket's layout, asked when old checkpoints are
deleted). Like GCS, the stand-in needs no folders before a write and refuses to append to an
object (gcsfs would silently overwrite it instead). Everything else (orbax's commit files
instead of renamed folders, our uploads) runs as it would against a bucket. A plain open() or
os.makedirs on a gs:// path would fail, or make a `gs:` folder in the working directory, which
every test here keeps empty.
"""

import json
import logging
import os
import sys
import tempfile

import fsspec
import pytest
from etils.epath import backend as epath_backend
from fsspec.implementations.dirfs import DirFileSystem
from fsspec.implementations.local import LocalFileSystem
from orbax.checkpoint._src.path import gcs_utils
from support.smoke_runs import one_error_line, run_cli, smoke_config

from attnlab import decode, evaluate, storage, sweep
from attnlab.decoding import runs
from attnlab.errors import UserError
from attnlab.explore import api as explore_api
from attnlab.reporting import run_folder, run_report
from attnlab.rundir import layout, run_times, writers
from attnlab.runtime import logs
from attnlab.sweeps.trials import SweepError
from attnlab.train import loop as train

BUCKET = 'gs://bucket'


class _FolderBuckets(DirFileSystem):
  """gs://BUCKET/KEY as ROOT/BUCKET/KEY on the local disk, GCS's ways where our code meets them:
  writes need no folders, and an object cannot be appended to."""

  protocol = ('gs', 'gcs')
  cachable = False  # each test has its own ROOT
  root = ''

  def __init__(self, *args, **kwargs):  # epath passes gcsfs's options (finalize_on_close)
    super().__init__(path=self.root, fs=LocalFileSystem(auto_mkdir=True))

  def open(self, path, mode='rb', *args, **kwargs):
    if 'a' in mode or '+' in mode:
      raise OSError(f'{path}: an object cannot be appended to (mode {mode!r})')
    return super().open(path, mode, *args, **kwargs)


@pytest.fixture
def buckets(tmp_path, monkeypatch):
  """gs:// in STORE (returned); the working directory and the temporary folder are empty
  folders of their own, checked empty (the local copies removed) at the end."""
  store, cwd, tmp = tmp_path / 'store', tmp_path / 'cwd', tmp_path / 'tmp'
  for folder in (store, cwd, tmp):
    folder.mkdir()
  monkeypatch.setattr(_FolderBuckets, 'root', str(store))
  registry = sys.modules['fsspec.registry']._registry  # `fsspec.registry` is a read-only view
  for protocol in _FolderBuckets.protocol:
    monkeypatch.setitem(registry, protocol, _FolderBuckets)
  epath_backend.fsspec_backend._get_filesystem.cache_clear()
  monkeypatch.setattr(
    gcs_utils,
    'get_kvstore_for_gcs',
    lambda path: {'driver': 'file', 'path': os.path.join(store, path.removeprefix('gs://'))},
  )
  monkeypatch.setattr(gcs_utils, 'is_hierarchical_namespace_enabled', lambda path: False)
  monkeypatch.chdir(cwd)
  monkeypatch.setattr(tempfile, 'tempdir', str(tmp))
  yield store
  epath_backend.fsspec_backend._get_filesystem.cache_clear()
  assert os.listdir(cwd) == [], 'a gs:// path reached a plain file function'
  assert os.listdir(tmp) == [], 'local copies left behind'


def test_the_stand_in_is_reached_through_fsspec_and_refuses_appends(buckets):
  storage.write_text(f'{BUCKET}/a/b.txt', 'é\n')
  assert (buckets / 'bucket' / 'a' / 'b.txt').read_bytes() == 'é\n'.encode()
  with pytest.raises(OSError, match='cannot be appended'):
    fsspec.open(f'{BUCKET}/a/b.txt', 'ab').open()


def test_append_text_rewrites_an_object_whole(buckets):
  path = f'{BUCKET}/run/run_times.jsonl'
  storage.append_text(path, '{"a": 1}\n')
  storage.append_text(path, '{"b": 2}\n')
  assert (buckets / 'bucket/run/run_times.jsonl').read_text() == '{"a": 1}\n{"b": 2}\n'


def test_replace_whole_writes_a_bucket_object_in_place_and_a_local_file_by_rename(buckets):
  written = []

  def write(path):
    written.append(path)
    storage.write_text(path, 'new')

  storage.replace_whole(f'{BUCKET}/run/config.json', write)
  local = buckets.parent / 'local.json'
  storage.replace_whole(local, write)
  assert written == [f'{BUCKET}/run/config.json', f'{local}.{os.getpid()}.tmp']
  assert (buckets / 'bucket/run/config.json').read_text() == local.read_text() == 'new'
  assert sorted(os.listdir(buckets.parent)) == ['cwd', 'local.json', 'store', 'tmp']


def test_local_copies_upload_what_changed_at_most_every_few_seconds(buckets, monkeypatch):
  clock = [100.0]
  monkeypatch.setattr(storage.time, 'monotonic', lambda: clock[0])
  (buckets / 'bucket/run').mkdir(parents=True)
  (buckets / 'bucket/run/metrics.jsonl').write_text('1\n')  # an earlier process run's
  copies = storage.LocalCopies(f'{BUCKET}/run')
  with open(copies.path('metrics.jsonl', continued=True), 'a') as f:
    f.write('2\n')
  with open(copies.path('tensorboard/train/events'), 'w') as f:
    f.write('e')
  copies.upload()
  remote = buckets / 'bucket/run/metrics.jsonl'
  assert remote.read_text() == '1\n2\n'
  assert (buckets / 'bucket/run/tensorboard/train/events').read_text() == 'e'
  with open(copies.path('metrics.jsonl'), 'a') as f:
    f.write('3\n')
  clock[0] += storage.UPLOAD_EVERY_S - 1
  copies.upload()
  assert remote.read_text() == '1\n2\n'  # too soon
  clock[0] += 1
  copies.upload()
  assert remote.read_text() == '1\n2\n3\n'
  with open(copies.path('metrics.jsonl'), 'a') as f:
    f.write('4\n')
  copies.close()  # uploads now, and removes the copies
  assert remote.read_text() == '1\n2\n3\n4\n'


def test_local_copies_of_a_local_folder_are_its_files(tmp_path):
  copies = storage.LocalCopies(tmp_path / 'run')
  assert copies.path('metrics.jsonl') == str(tmp_path / 'run' / 'metrics.jsonl')
  assert os.path.isdir(tmp_path / 'run')
  copies.close()
  assert os.path.isdir(tmp_path / 'run')


def test_metric_writer_continues_the_buckets_metrics_and_uploads_tensorboard(buckets):
  for step in (1, 2):  # two process runs
    with writers.MetricWriter(f'{BUCKET}/run', enabled=True) as writer:
      writer.write(step, 'train', {'loss': 1.0 / step})
  lines = (buckets / 'bucket/run/metrics.jsonl').read_text().splitlines()
  assert [json.loads(line) for line in lines] == [
    {'step': 1, 'split': 'train', 'loss': 1.0},
    {'step': 2, 'split': 'train', 'loss': 0.5},
  ]
  events = os.listdir(buckets / 'bucket/run/tensorboard/train')
  assert len(events) == 2 and all(n.startswith('events.out.tfevents.') for n in events)


def test_the_log_file_continues_in_the_bucket(buckets):
  for message in ('first run', 'second run'):
    with logs.log_file(layout.log_path(f'{BUCKET}/run', 0)):
      logging.getLogger('attnlab.test').warning(message)
  text = (buckets / 'bucket/run/train.log').read_text()
  assert text.index('first run') < text.index('second run')


def test_run_times_in_a_bucket_recover_a_killed_run(buckets):
  record = run_times.RunTimeRecord(f'{BUCKET}/run', first_step=0, started=0.0, cpu_started=0.0)
  record.update(5)  # too soon after the first write: a bucket's object is written at most so often
  killed = run_times.recover_killed_run(f'{BUCKET}/run')
  assert killed['outcome'] == 'killed' and killed['last_step'] == 0
  assert not (buckets / 'bucket/run' / layout.RUN_IN_PROGRESS).exists()
  lines = (buckets / 'bucket/run' / layout.RUN_TIMES).read_text().splitlines()
  assert [json.loads(line)['outcome'] for line in lines] == ['killed']


def test_an_unknown_scheme_is_one_error_line(buckets):
  with pytest.raises(UserError, match=r'^--workdir=memory://run: memory:// is not a storage '):
    storage.check_reachable('memory://run', '--workdir')
  storage.check_reachable(f'{BUCKET}/run', '--workdir')
  storage.check_reachable('runs/a', '--workdir')


def _tree(root) -> dict[str, bytes]:
  """Every file under `root` by relative path (its bytes)."""
  out = {}
  for directory, _, names in os.walk(root):
    for name in names:
      path = os.path.join(directory, name)
      with open(path, 'rb') as f:
        out[os.path.relpath(path, root)] = f.read()
  return out


@pytest.mark.slow
def test_a_training_in_a_bucket_writes_what_a_local_one_does_and_reads_back(buckets, tmp_path):
  """The same tiny run trained into a local folder (the reference: plain file functions) and
  into the bucket: the same files with the same decodes, and every reader takes the bucket."""
  # keep_checkpoints=1: orbax deletes step 2's checkpoint, from the bucket too.
  config = smoke_config(
    **{'task.train_lengths': (3, 6), 'task.eval_lengths': (3, 6), 'train.keep_checkpoints': 1}
  )
  local = str(tmp_path / 'local')
  expected = train.train_and_evaluate(config, local)
  final = train.train_and_evaluate(config, f'{BUCKET}/run')
  assert final == expected
  in_bucket, in_folder = _tree(buckets / 'bucket' / 'run'), _tree(local)

  def names(tree, where):
    return {n for n in tree if n.startswith(where)}

  same = [
    'config.json',
    'source_vocab.json',
    'target_vocab.json',
    'predictions_eval.jsonl',
    'predictions_test.jsonl',
    *names(in_folder, 'samples/'),
    *names(in_folder, 'attention/'),
  ]
  assert names(in_folder, 'attention/') and names(in_folder, 'samples/')
  assert {n: in_bucket.get(n) for n in same} == {n: in_folder[n] for n in same}
  for name in (
    'metrics.jsonl',
    'final_metrics.json',
    'run_times.jsonl',
    'provenance.jsonl',
    '.lock',
  ):
    assert in_bucket[name], name
  assert 'train.log' in in_bucket  # empty: the test process logs below WARNING to no file
  assert layout.saved_steps(f'{BUCKET}/run') == layout.saved_steps(local) == [4]
  assert (buckets / 'bucket/run/checkpoints/4' / layout.ORBAX_COMMIT_FILE).is_file()
  events = [json.loads(line) for line in in_bucket['metrics.jsonl'].splitlines()]
  assert [(e['step'], e['split']) for e in events] == [
    (e['step'], e['split']) for e in map(json.loads, in_folder['metrics.jsonl'].splitlines())
  ]
  assert names(in_bucket, 'tensorboard/train/') and names(in_bucket, 'tensorboard/test/')
  assert not [n for n in in_bucket if n.endswith('.tmp')]

  run = runs.load_run(f'{BUCKET}/run')
  inputs = ['abc', 'dcba']
  assert [d.output for d in run.decode(inputs)] == [
    d.output for d in runs.load_run(local).decode(inputs)
  ]
  record, out_dir = evaluate.evaluate_checkpoint(f'{BUCKET}/run', 'test', progress_every_s=None)
  assert out_dir.startswith(f'{BUCKET}/run/evaluations/')
  assert record['test']['sequence_accuracy'] == final['test']['sequence_accuracy']
  written = buckets / out_dir.removeprefix('gs://') / 'metrics.json'
  assert json.loads(written.read_text())['test'] == json.loads(json.dumps(record['test']))

  readme = run_report.write_run_report(f'{BUCKET}/run', str(tmp_path / 'report'), model=True)
  with open(readme, encoding='utf-8') as f:
    assert f'Run directory `{BUCKET}/run`' in f.read()
  report = os.listdir(tmp_path / 'report')
  assert {'config.json', 'final_metrics.json', 'learning_curve.png', 'report.html'} <= set(report)
  assert {'metrics.jsonl.xz', 'predictions_test.jsonl.xz', 'run_times.jsonl'} <= set(report)
  assert os.listdir(tmp_path / 'report' / 'attention')
  published = runs.load_run(str(tmp_path / 'report'))  # the model, copied out of the bucket
  assert [d.output for d in published.decode(inputs)] == [d.output for d in run.decode(inputs)]


@pytest.mark.slow
def test_a_url_the_storage_cannot_take_is_one_error_line():
  result = run_cli('--config=configs/reverse.py:smoke', '--workdir=memory://run')
  assert one_error_line(result) == (
    'error: --workdir=memory://run: memory:// is not a storage attnlab reaches; give a local '
    'folder or a gs://, s3://, az://, hf:// URL'
  )


@pytest.mark.parametrize('flag', ['input', 'output', 'attention_dir'])
def test_decodes_own_files_stay_local_in_one_line(flag, capsys):
  assert decode.main(['--workdir=gs://bucket/run', f'--{flag}=gs://bucket/{flag}']) == 2
  assert capsys.readouterr().err == (
    f'error: --{flag}=gs://bucket/{flag}: decode reads and writes local files only (its '
    "--workdir may be a bucket's); name a local path and copy it from or to the bucket\n"
  )


def test_sweep_folders_and_report_folders_stay_local(tmp_path):
  for workdir, archive in (('gs://bucket/sweep', None), (str(tmp_path), 'gs://bucket/archive')):
    with pytest.raises(SweepError, match='a sweep keeps its trials in a local or shared folder'):
      sweep.check_folders(None, workdir, archive)
  with pytest.raises(run_folder.RunReportError, match='the report is written to a local folder'):
    run_folder.check_out('gs://bucket/run', 'gs://bucket/report')


def test_the_explorer_reads_a_buckets_eval_examples(buckets):
  storage.write_text(
    f'{BUCKET}/run/predictions_eval.jsonl',
    '{"index": 0, "source": "ab", "reference": "ba", "hypothesis": "ba", "correct": true}\n',
  )
  examples, note = explore_api.read_examples(f'{BUCKET}/run')
  assert (examples, note) == (
    [{'index': 0, 'source': 'ab', 'reference': 'ba', 'hypothesis': 'ba', 'correct': True}],
    '',
  )
