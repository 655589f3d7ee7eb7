"""`python -m attnlab.evaluate` and what evaluation writes: predictions with text, a fixed random
sample of the split, progress lines for long decodes.

They read one tiny run (conftest.tiny_reverse_run: reverse:smoke, 4 steps).
"""

import json
import os
import re
import subprocess
import sys

import pytest
from support import REPO
from support.smoke_runs import copy_run, smoke_config

from attnlab import evaluate
from attnlab.config import run as config_lib
from attnlab.config.fields import ConfigError
from attnlab.data import load_task
from attnlab.decoding.runs import read_config
from attnlab.train import evaluation

ENV = {**os.environ, 'XLA_FLAGS': '--xla_force_host_platform_device_count=1'}


@pytest.fixture(scope='module')
def run_dir(tiny_reverse_run):
  return tiny_reverse_run  # conftest.py: reverse:smoke, 4 steps, 48 eval and test examples


def _read(path):
  with open(path, encoding='utf-8') as f:
    return f.read()


def test_reevaluation_equals_final_metrics_and_leaves_the_run_alone(run_dir):
  final = json.loads(_read(os.path.join(run_dir, 'final_metrics.json')))
  before = {name: _read(os.path.join(run_dir, name))
            for name in ('final_metrics.json', 'predictions_test.jsonl')}
  record, out_dir = evaluate.evaluate_checkpoint(run_dir, 'test')
  assert record['step'] == final['step'] == 4
  # The same numbers, through the same JSON writer.
  assert json.loads(json.dumps(record['test'], default=float)) == final['test']
  assert json.loads(_read(os.path.join(out_dir, 'metrics.json')))['test'] == final['test']
  assert out_dir.startswith(os.path.join(run_dir, 'evaluations', 'test_step0000004_greedy'))
  for name, text in before.items():
    assert _read(os.path.join(run_dir, name)) == text, f'{name} was rewritten'
  assert _read(os.path.join(out_dir, 'predictions_test.jsonl')) == before['predictions_test.jsonl']


def test_other_search_settings_go_to_their_own_directory(run_dir):
  record, out_dir = evaluate.evaluate_checkpoint(run_dir, 'eval', checkpoint='latest',
                                                 search='beam', beam_size=2, max_examples=8)
  assert os.path.basename(out_dir) == 'eval_step0000004_beam2_lp0.6_first8'
  assert record['settings']['search'] == 'beam' and record['settings']['beam_size'] == 2
  assert record['eval']['num_examples'] == 8


def test_predictions_hold_source_reference_and_hypothesis_text(run_dir):
  cfg, _, _ = read_config(run_dir)
  task = load_task(cfg)
  split = task.split('eval')
  rows = [json.loads(line) for line in _read(os.path.join(run_dir, 'predictions_eval.jsonl'))
          .splitlines()]
  assert [r['index'] for r in rows] == list(range(len(split)))
  for r in rows:
    example = split[r['index']]
    assert r['source'] == example['source'] and r['reference'] == example['target']
    assert r['source_length'] == len(example['source'])
    assert r['correct'] == (r['hypothesis'] == r['reference'])  # reverse: exact match
    assert set(r['hypothesis']) <= set(task.target_vocab.symbols) | set('<unk>')


def test_samples_are_a_fixed_random_subset_of_the_split(run_dir):
  text = _read(os.path.join(run_dir, 'samples', 'eval_step0000004.txt'))
  shown = [int(i) for i in re.findall(r'^(?:ok |ERR) #(\d+)$', text, flags=re.M)]
  expected = evaluation.sample_positions(48, 4, seed=0, split='eval')
  assert shown == expected and len(shown) == 4
  assert shown != [0, 1, 2, 3], 'a random subset, not the first lines'
  assert evaluation.sample_positions(48, 4, seed=0, split='eval') == expected  # fixed
  assert evaluation.sample_positions(48, 4, seed=0, split='test') != expected
  assert evaluation.sample_positions(3, 4, seed=0, split='eval') == [0, 1, 2]


def test_long_decoding_prints_progress_lines(run_dir, capsys):
  evaluate.evaluate_checkpoint(run_dir, 'test', progress_every_s=0.0)
  lines = [line for line in capsys.readouterr().err.splitlines() if 'decoding' in line]
  # 48 examples in batches of 16: a line after each batch but the last.
  assert len(lines) == 2 and lines[0].startswith('decoding test: 16/48 examples | ')
  assert 'ETA' in lines[0] and lines[1].startswith('decoding test: 32/48 examples')


@pytest.mark.slow
def test_cli_prints_metrics_and_refuses_bad_input_in_one_line(run_dir, tmp_path, capsys):
  env = {**os.environ, 'XLA_FLAGS': '--xla_force_host_platform_device_count=1'}
  cli = lambda *a: subprocess.run([sys.executable, '-m', 'attnlab.evaluate', *a], cwd=REPO,
                                  capture_output=True, text=True, timeout=180, env=env)
  ok = cli(f'--workdir={run_dir}', '--split=test', '--checkpoint=best')
  assert ok.returncode == 0, ok.stderr[-2000:]
  assert ok.stdout.startswith('test @ step 4 | ') and 'sequence_accuracy' in ok.stdout
  assert 'written to ' in ok.stdout
  for args, message in (((f'--workdir={tmp_path}',), 'has no config.json'),
                        ((f'--workdir={run_dir}', '--split=dev'), "--split='dev' is not valid"),
                        ((f'--workdir={run_dir}', '--beam_size=0'), 'eval.beam_size=0'),
                        ((f'--workdir={run_dir}', '--length_penalty=nan'),
                         'eval.length_penalty=nan must be a finite number')):
    code = evaluate.main(list(args))
    err = capsys.readouterr().err
    assert code == 2 and err.startswith('error: ') and message in err, err
  bad = cli(f'--workdir={run_dir}', '--checkpoint=7')
  assert bad.returncode == 2 and bad.stderr.startswith('error: ') and "'7'" in bad.stderr
  assert bad.stderr.count('\n') == 1, bad.stderr


def test_a_non_finite_length_penalty_is_a_config_error():
  for value in (float('nan'), float('inf')):
    with pytest.raises(ConfigError, match=rf'^eval\.length_penalty={value} must be a finite'):
      config_lib.parse(smoke_config(**{'eval.length_penalty': value}))


def _cli(*args, prefix=()):
  return subprocess.run([*prefix, sys.executable, '-m', 'attnlab.evaluate', *args], cwd=REPO,
                        capture_output=True, text=True, timeout=180, env=ENV)


@pytest.mark.slow
def test_damaged_checkpoint_is_one_line_naming_the_file_and_the_readable_ones(run_dir, tmp_path):
  run = copy_run(run_dir, tmp_path)
  for data in (run / 'checkpoints' / 'best' / '4' / 'state' / 'd').iterdir():
    data.write_bytes(b'xx')
  result = _cli(f'--workdir={run}')
  assert (result.returncode, result.stdout) == (2, '')
  assert re.fullmatch(
      rf'error: checkpoint {run}/checkpoints/best/4 cannot be read: state/d/\w+ is damaged '
      r'\(Requested byte range \[0, \d+\) is not valid for value of size 2\); these read: '
      r'--checkpoint=4, --checkpoint=2\n', result.stderr), result.stderr[-3000:]
  assert not (run / 'evaluations').exists()


def _read_only(run) -> list[str] | None:
  """A command prefix under which `run` is read-only: its permission bits for a user; for root,
  whom they do not stop, a read-only bind mount in a mount namespace of its own. None where
  neither is possible (root without mount namespaces)."""
  if os.geteuid() != 0:
    subprocess.run(['chmod', '-R', 'a-w', str(run)], check=True)
    return []
  prefix = ['unshare', '--mount', 'sh', '-c', 'mount --bind -o ro "$0" "$0" && exec "$@"', str(run)]
  try:
    probe = subprocess.run([*prefix, 'true'], capture_output=True, timeout=30)
  except FileNotFoundError:
    return None
  return prefix if probe.returncode == 0 else None


@pytest.mark.slow
def test_a_run_that_cannot_be_written_is_refused_before_decoding(run_dir, tmp_path, capsys):
  run = copy_run(run_dir, tmp_path)
  way_out = f'; evaluate a writable copy of the run (cp -r {run} COPY) or make {run} writable\n'
  (run / 'evaluations').write_text('mine\n')  # a file where the results go
  assert evaluate.main([f'--workdir={run}']) == 2
  assert capsys.readouterr().err == (f'error: evaluate writes its results to {run}/evaluations, '
                                     f'which cannot be written (Not a directory){way_out}')
  assert (run / 'evaluations').read_text() == 'mine\n'
  (run / 'evaluations').unlink()
  prefix = _read_only(run)
  if prefix is None:
    pytest.skip('root without mount namespaces: no way to make a folder read-only here')
  try:
    result = _cli(f'--workdir={run}', prefix=prefix)
  finally:
    subprocess.run(['chmod', '-R', 'u+w', str(run)], check=True)
  assert (result.returncode, result.stdout) == (2, '')
  reason = 'Permission denied' if os.geteuid() else 'Read-only file system'
  assert result.stderr == (f'error: evaluate writes its results to {run}/evaluations, which '
                           f'cannot be written ({reason}){way_out}')
  assert not (run / 'evaluations').exists()


def test_heatmap_titles_name_the_reference_of_a_wrong_output():
  assert evaluation.heatmap_title('test', 0, 24000, True, 'P AO R T EY L') == (
    'test #0 step 24000 (correct)'
  )
  assert evaluation.heatmap_title('test', 0, 24000, False, 'P AO R T EY L') == (
    'test #0 step 24000 (wrong)\nreference: P AO R T EY L'
  )
  long = evaluation.heatmap_title('eval', 3, 5, False, 'x' * 60, width=20)
  assert long == 'eval #3 step 5 (wrong)\nreference: ' + 'x' * 17 + '...'
