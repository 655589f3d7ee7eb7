"""Run report: golden README.md lines of a fake finished run directory, plots, copies, errors."""

import json
import os
import re
import shlex

import jax
import numpy as np
import pytest
from absl import flags
from absl.testing import flagsaver
from support import REPO
from support.fake_run import COMMAND, FINAL, TEST
from support.files import file_tree, jsonl, write_file
from support.smoke_runs import one_error_line, run_cli

import attnlab
from attnlab import run_report as run_report_command
from attnlab.reporting import run_folder, run_report
from attnlab.rundir import layout, publish
from attnlab.train import loop as train

GOLDEN = [
  '# cmudict_g2p: configs/g2p.py',
  f'    {COMMAND}',
  '- Wall time: 1h02m03s (3,723 s, sum over 2 process run(s) in run_times.jsonl)',
  '- Parameters: 1,234,567',
  '- Training steps: 2,000',
  '- Training throughput: 500 tokens/s (median over logging windows after the first, which '
  'includes compilation)',
  '| metric | eval | test |',
  '| sequence_accuracy | 30.00% | 27.41% |',
  '| wer | 70.00% | 72.59% |',
  '| per | 12.34% | 12.34% |',
  '| loss | 0.4123 | 0.4123 |',
  '| num_examples | 500 | 1,200 |',
  'Converged: yes - dev wer moved 0.12 points over the last quarter (steps 1,500-2,000); '
  'selected step 2,000',
  '- Tested checkpoint: step 2,000, selected on eval wer',
  '## By source length: test',
  '| source length | examples | sequence_accuracy | wer |',
  '| 5-9 | 2 | 50.00% | 50.00% |',
  '| 10-14 | 4 | 25.00% | 75.00% |',
  '| locale | eval accuracy | test accuracy |',
  '| de_DE | 75.00% | 75.00% |',
  '| fr_FR | 50.00% | 50.00% |',
  '| format | eval accuracy | test accuracy |',
  '| long | 12.50% | 12.50% |',
  '![accuracy by source length](by_length.png)',
  '![training loss and eval wer](learning_curve.png)',
  '![test example 0](attention/test_step0002000_ex0.png)',
]


def test_report_of_a_finished_run(run_dir, tmp_path):
  out = tmp_path / 'results' / 'g2p'
  path = run_report.write_run_report(str(run_dir), str(out), command=COMMAND)
  lines = open(path).read().splitlines()
  for line in GOLDEN:
    assert line in lines
  assert lines.index('| de_DE | 75.00% | 75.00% |') < lines.index('| fr_FR | 50.00% | 50.00% |')
  converged = next(i for i, line in enumerate(lines) if line.startswith('Converged: '))
  assert lines[converged - 2] == '| num_examples | 500 | 1,200 |'  # under the final metrics
  assert not any(line.startswith('| 0-4 ') for line in lines)  # empty buckets are left out
  for name in ('by_length.png', 'learning_curve.png', 'attention/test_step0002000_ex0.png'):
    assert (out / name).read_bytes().startswith(b'\x89PNG')
  assert os.listdir(out / 'attention') == ['test_step0002000_ex0.png']  # final step only
  assert json.loads((out / 'final_metrics.json').read_text()) == FINAL
  assert json.loads((out / 'config.json').read_text())['task']['name'] == 'cmudict_g2p'


def test_main_with_flags_and_nothing_recorded(run_dir, tmp_path):
  out = tmp_path / 'out'
  with flagsaver.flagsaver():
    argv = flags.FLAGS(['run_report', str(run_dir), f'--out={out}', '--wall_s=90'])
    run_report_command.main(argv)
  text = (out / 'README.md').read_text()
  assert '- Wall time: 1m30s (90 s, from --wall_s)' in text
  assert '# cmudict_g2p: config file not recorded' in text
  assert '    (not recorded)' in text.splitlines()
  # Runs that recorded their CPU time: it is summed beside the wall time.
  runs = [{'wall_s': 3000.0, 'cpu_s': 2900.0}, {'wall_s': 723.0, 'cpu_s': 700.0}]
  write_file(run_dir / train.RUN_TIMES, jsonl(runs))
  run_report.write_run_report(str(run_dir), str(out))
  text = (out / 'README.md').read_text()
  assert '- Wall time: 1h02m03s (3,723 s, sum over 2 process run(s) in run_times.jsonl); ' \
         'CPU time 1h00m00s (3,600 s)\n' in text
  # ... and the machines they ran on, where they named them.
  runs = [{**runs[0], 'machine': 'intel-xeon-f6m167-amx-2cpu'},
          {**runs[1], 'machine': 'amd-epyc-f25m17-avx512-2cpu'}, runs[1]]
  write_file(run_dir / train.RUN_TIMES, jsonl(runs))
  run_report.write_run_report(str(run_dir), str(out))
  assert 'CPU time 1h11m40s (4,300 s); on amd-epyc-f25m17-avx512-2cpu, ' \
         'intel-xeon-f6m167-amx-2cpu\n' in (out / 'README.md').read_text()
  os.remove(run_dir / train.RUN_TIMES)
  os.remove(run_dir / 'metrics.jsonl')
  run_report.write_run_report(str(run_dir), str(out))
  text = (out / 'README.md').read_text()
  assert '- Wall time: not recorded' in text
  assert '- Training throughput: not recorded' in text


def test_missing_final_metrics_names_the_file(run_dir, tmp_path):
  os.remove(run_dir / 'final_metrics.json')
  out = tmp_path / 'out'
  with pytest.raises(ValueError, match=re.escape(str(run_dir / 'final_metrics.json'))):
    run_report.write_run_report(str(run_dir), str(out))
  with flagsaver.flagsaver(), pytest.raises(run_folder.RunReportError, match='json not found'):
    run_report_command.main(flags.FLAGS(['run_report', str(run_dir), f'--out={out}']))
  assert not out.exists()


def test_translation_reports_bleu_by_source_length_in_words(tmp_path):
  # bleu_by_length replaces the exact-match table: whole verses are never matched exactly.
  bleu = [
    {'bucket': '0-9', 'count': 66, 'bleu': 26.3324},
    {'bucket': '10-19', 'count': 0, 'bleu': 0.0},
    {'bucket': '50+', 'count': 19, 'bleu': 35.1945},
  ]
  test = {'bleu': 31.47, 'by_length': TEST['by_length'], 'bleu_by_length': bleu}
  assert run_report.length_table(test) == [
    '| source length (words) | examples | bleu |',
    '|---|---|---|',
    '| 0-9 | 66 | 26.33 |',
    '| 50+ | 19 | 35.19 |',
  ]
  # Runs evaluated since buckets hold chrF and BLEU's brevity penalty show both.
  parts = [{**b, 'chrf': 50.0 + i, 'brevity_penalty': 0.9 + i / 20, 'length_ratio': 0.9}
           for i, b in enumerate(bleu)]
  assert run_report.length_table({'bleu_by_length': parts}) == [
    '| source length (words) | examples | bleu | brevity_penalty | chrf |',
    '|---|---|---|---|---|',
    '| 0-9 | 66 | 26.33 | 0.900 | 50.00 |',
    '| 50+ | 19 | 35.19 | 1.000 | 52.00 |',
  ]
  lines, xlabel, ylabel = run_report._length_lines({'test': test, 'eval': test}, ['test', 'eval'])
  assert (xlabel, ylabel) == ('source length (words)', 'BLEU')
  assert [points for *_, points in lines] == [[('0-9', 26.3324), ('50+', 35.1945)]] * 2
  assert run_report.plot_run_by_length(str(tmp_path / 'b.png'), {'test': test}, ['test'])
  assert os.path.getsize(tmp_path / 'b.png') > 3000


@pytest.mark.slow
def test_out_that_would_overwrite_anything_is_refused_before_writing(run_dir, tmp_path):
  """--out=RUN (the run's own folder), a folder of the user's files, another run's report, a
  file: one line, exit 2, every file as it was."""
  mine = tmp_path / 'mine'
  write_file(mine / 'README.md', '# my notes\n')
  write_file(mine / 'config.json', '{"mine": true}\n')
  other = tmp_path / 'other'
  run_report.write_run_report(str(run_dir), str(other))
  readme = (other / 'README.md').read_text()
  (other / 'README.md').write_text(readme.replace(str(run_dir), str(tmp_path / 'another_run')))
  write_file(tmp_path / 'afile', 'data\n')
  before = file_tree(tmp_path)
  mistakes = {
    run_dir: f'--out={run_dir} is the run directory {run_dir} itself: the report would write '
             "over the run's config.json and among its files; give a folder of its own "
             '(e.g. --out=results/run)',
    mine: f'--out={mine} already holds files, not a report of {run_dir} by attnlab.run_report: '
          'the report would overwrite its README.md, config.json, final_metrics.json and plots; '
          f'give a new or empty folder (e.g. --out={mine}-2)',
    other: f'--out={other} already holds the report of {tmp_path / "another_run"}, not a report '
           f'of {run_dir}',
    tmp_path / 'afile': f'--out={tmp_path / "afile"} is a file, not a folder',
    tmp_path / 'afile' / 'x': f'--out={tmp_path / "afile" / "x"} is under {tmp_path / "afile"}, '
                              'which is a file, not a folder',
  }
  for out, message in mistakes.items():
    line = one_error_line(run_cli(str(run_dir), f'--out={out}', module='attnlab.run_report'))
    assert line.startswith(f'error: {message}')
  assert file_tree(tmp_path) == before


def test_its_own_report_and_an_empty_folder_are_written(run_dir, tmp_path, monkeypatch):
  """A rerun onto the report of the same run (its README.md names the run directory, however
  the path is spelled) writes it again; the user's other files there stay."""
  out = tmp_path / 'report'
  out.mkdir()  # empty: used
  run_report.write_run_report(str(run_dir), str(out), command=COMMAND)
  first = (out / 'README.md').read_text()
  (out / 'README.md').write_text(first + 'an edit of mine\n')
  write_file(out / 'notes.txt', 'kept\n')
  monkeypatch.chdir(tmp_path)
  run_report.write_run_report('run', str(out), command=COMMAND)  # the same run, relative
  assert (out / 'README.md').read_text() == first.replace(f'`{run_dir}`', '`run`')
  assert (out / 'notes.txt').read_text() == 'kept\n'
  assert run_folder.reported_run(str(out)) == 'run'
  # The reports published in results/ name their run the same way: a rerun rewrites them.
  for name in ('g2p', 'bible', 'dates'):
    published = os.path.join(REPO, 'results', name)
    assert run_folder.reported_run(published), name


def test_with_the_model_the_folder_opens_as_the_run(tiny_reverse_run, tmp_path):
  out = tmp_path / 'results' / 'reverse'
  path = run_report.write_run_report(tiny_reverse_run, str(out), model=True)
  trained, published = attnlab.load_run(tiny_reverse_run), attnlab.load_run(str(out))
  assert os.listdir(out / 'checkpoints') == ['best']  # parameters only: no optimizer state
  assert published.step == trained.step
  same = jax.tree.map(np.array_equal, trained.params, published.params)
  assert all(jax.tree.leaves(same))
  with open(os.path.join(tiny_reverse_run, 'predictions_test.jsonl')) as f:
    predictions = [json.loads(line) for line in f]
  assert not (out / 'predictions_test.jsonl').exists()  # compressed, as a sweep archive keeps it
  with layout.open_text(str(out / 'predictions_test.jsonl')) as f:
    assert [json.loads(line) for line in f] == predictions
  sources = [p['source'] for p in predictions[:8]]
  outputs = [d.output for d in trained.decode(sources)]
  assert [d.output for d in published.decode(sources)] == outputs
  example = shlex.quote(predictions[0]['source'])
  assert f'echo {example} | python -m attnlab.decode --workdir={out}' in open(path).read()


def test_a_run_without_a_best_checkpoint_is_refused_before_writing(run_dir, tmp_path):
  out = tmp_path / 'results' / 'g2p'
  with pytest.raises(publish.PublishError, match='has no best checkpoint in .*checkpoints/best'):
    run_report.write_run_report(str(run_dir), str(out), model=True)
  assert not out.exists()
