"""The report.html pages of a sweep and of a run: self-contained, escaped, sortable tables,
heatmap cells equal to saved weights, and no file inlined that a value in the data plants.

Built on the fake sweep of support/fake_sweep.py and the fake run of support/fake_run.py.
"""

import base64
import hashlib
import json
import os
import re

import numpy as np
from absl import flags
from absl.testing import flagsaver
from support import fake_run
from support.fake_sweep import FINAL_STEP, make_sweep, trial_name
from support.html_pages import css_colours, read_page

from attnlab import report as report_command
from attnlab.reporting import html_heatmaps, run_report
from attnlab.reporting import sweep_report as report

SCRIPT = '<script>alert(1)</script>'


def _heatmap(table) -> tuple[list[str], list[str], np.ndarray]:
  """(source tokens, target tokens, weights_TxS) that a heatmap table shows."""
  rows = [[text for text, _ in row] for row in table['rows']]
  weights = [[np.float32(float(a['data-w'])) for _, a in row[1:]] for row in table['rows']]
  return table['head'][1:], [row[0] for row in rows], np.array(weights, np.float32)


def _save_weights(trial_dir, examples):
  """attention/test_stepNNNNNNN.npz as evaluate.py writes it: index -> (weights, src, out)."""
  arrays = {}
  for index, (weights, source, output) in examples.items():
    arrays[f'weights_{index}'] = np.asarray(weights, np.float32)
    arrays[f'source_{index}'] = np.array(source, dtype=str)
    arrays[f'output_{index}'] = np.array(output, dtype=str)
  path = os.path.join(trial_dir, 'attention', f'test_step{FINAL_STEP:07d}.npz')
  np.savez_compressed(path, **arrays)


def _random_weights(seed, shape):
  weights = np.random.default_rng(seed).random(shape).astype(np.float32)
  return weights / weights.sum(axis=1, keepdims=True)


def test_sweep_page_is_self_contained(tmp_path):
  root = make_sweep(str(tmp_path))
  report.write_report(root)
  text, page = read_page(os.path.join(root, 'report.html'))
  assert 'http://' not in text and 'https://' not in text  # base64 has no ':', so no URL
  assert not [t for t, _ in page.tags if t in ('link', 'iframe', 'object', 'embed', 'base')]
  assert not [a for t, a in page.tags if t == 'script' and 'src' in a]
  assert all(not re.match(r'\s*(\w+:|//)', a['href']) for t, a in page.tags if 'href' in a)
  # The metric, by_length and curves PNGs, byte for byte; the attention PNG became HTML.
  plots = [
    os.path.join(root, 'plots', f'reverse-{k}.png') for k in ('metric', 'by_length', 'curves')
  ]
  prefix = 'data:image/png;base64,'
  assert all(src.startswith(prefix) for src in page.images())
  assert [base64.b64decode(src[len(prefix) :]) for src in page.images()] == [
    open(p, 'rb').read() for p in plots
  ]
  # The browser runs the one inline script only: its hash is the policy's script-src.
  (script,) = page.scripts
  (policy,) = [
    a['content'] for t, a in page.tags if a.get('http-equiv') == 'Content-Security-Policy'
  ]
  digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
  assert policy.startswith("default-src 'none'; img-src data:;")
  assert f"script-src 'sha256-{digest}'" in policy


def test_strings_from_data_are_escaped(tmp_path):
  root = make_sweep(str(tmp_path))
  luong = os.path.join(root, trial_name('luong', 0))
  _save_weights(
    luong, {0: (_random_weights(0, (3, 4)), [SCRIPT, 'b', '"&', '<eos>'], ['<b>', 'c', 'a'])}
  )
  with open(os.path.join(root, trial_name('none', 1), 'sweep_status.json'), 'w') as f:
    json.dump({'status': 'failed', 'wall_s': 5.0, 'error': f'ValueError: {SCRIPT}'}, f)
  report.write_report(root)
  text, page = read_page(os.path.join(root, 'report.html'))
  assert text.count('<script') == 1 and '<b>' not in text  # the page's own script only
  assert '&lt;script&gt;alert(1)&lt;/script&gt;' in text
  source, target, _ = _heatmap(page.of_class('heatmap')[0])
  assert source == [SCRIPT, 'b', '"&', '<eos>'] and target == ['<b>', 'c', 'a']
  assert f'timing=none,seed=1: ValueError: {SCRIPT}' in page.items


def test_tables_sort_numbers_as_numbers(tmp_path):
  root = make_sweep(str(tmp_path))
  report.write_report(root, plots=False)
  _, page = read_page(os.path.join(root, 'report.html'))
  table = page.of_class('sortable')[0]  # the variants; the per-trial convergence table follows
  assert table['head'] == [
    'variant',
    'seeds',
    'converged',
    'still improving',
    'sequence_accuracy',
    'Δ vs best [95% CI]',
    'p',
    'Holm p',
    'finding',
    'Δ test examples [95% CI]',
    'p test examples',
    'attention_entropy',
    'alignment_error_rate',
    'params',
    'tokens/s',
    'wall/trial',
    'CPU/trial',
  ]
  assert [row[0][0] for row in table['rows']] == ['timing=luong', 'timing=bahdanau', 'timing=none']
  none = {h: a.get('data-sort') for h, (_, a) in zip(table['head'], table['rows'][2], strict=True)}
  # '1/2 (1 failed)', '1/1', '0/1', '0.000', '–' x 4 (one seed), '-1.000 [...]', '< 0.001', '–',
  # '–', '800', '1,500', '0m30s', '–'
  assert none == {
    'variant': None,
    'seeds': '1.0',
    'converged': '1.0',
    'still improving': '0.0',
    'sequence_accuracy': '0.0',
    'Δ vs best [95% CI]': None,
    'p': None,
    'Holm p': None,
    'finding': None,
    'Δ test examples [95% CI]': '-1.0',
    'p test examples': '0.001',
    'attention_entropy': None,
    'alignment_error_rate': None,
    'params': '800.0',
    'tokens/s': '1500.0',
    'wall/trial': '30.0',
    'CPU/trial': None,
  }
  assert [a.get('data-sort') for _, a in table['rows'][0]][5] is None  # 'best'
  cpu_text, cpu_attrs = table['rows'][1][-1]  # bahdanau: one of two seeds recorded CPU time
  assert (cpu_text, cpu_attrs.get('data-sort')) == ('1m30s (1 of 2)', '90.0')


def test_heatmap_cells_are_the_saved_weights(tmp_path):
  root = make_sweep(str(tmp_path))
  saved = {}
  for k, timing in enumerate(('luong', 'bahdanau')):
    for seed in (0, 1):
      examples = {
        i: (
          _random_weights(10 * k + 3 * seed + i, (3 + i, 5)),
          ['x', 'y', 'z', 'w', '<eos>'],
          ['o', 'p', 'q', 'r'][: 3 + i],
        )
        for i in (0, 1, 2)
      }
      _save_weights(os.path.join(root, trial_name(timing, seed)), examples)
      saved[timing, seed] = examples
  report.write_report(root)
  text, page = read_page(os.path.join(root, 'report.html'))
  tables = page.of_class('heatmap')
  # Rows: the first MAX_EXAMPLES=2 shared examples; columns: variants, seed 0 (shared).
  assert [t['caption'] for t in tables] == [
    'timing=luong\n#0 (seed 0)',
    'timing=bahdanau\n#0 (seed 0)',
    'timing=luong\n#1 (seed 0)',
    'timing=bahdanau\n#1 (seed 0)',
  ]
  for table, (timing, index) in zip(
    tables, [('luong', 0), ('bahdanau', 0), ('luong', 1), ('bahdanau', 1)], strict=True
  ):
    weights, source, output = saved[timing, 0][index]
    shown_source, shown_target, shown = _heatmap(table)
    assert (shown_source, shown_target) == (source, output)
    np.testing.assert_array_equal(shown, weights)  # exact float32
    colours = [[css_colours(text)[a['class']] for _, a in row[1:]] for row in table['rows']]
    assert colours == html_heatmaps.colors(weights).tolist()


def test_saved_pngs_stand_in_without_weights(tmp_path):
  root = make_sweep(str(tmp_path), npz=False)
  report.write_report(root)
  _, page = read_page(os.path.join(root, 'report.html'))
  assert not page.of_class('heatmap')
  with open(os.path.join(root, 'plots', 'reverse-attention.png'), 'rb') as f:
    attention = base64.b64encode(f.read()).decode()
  assert page.images()[-1] == f'data:image/png;base64,{attention}'


def test_report_main_writes_and_prints_the_page(tmp_path, capsys):
  root = make_sweep(str(tmp_path))
  with flagsaver.flagsaver():
    report_command.main(flags.FLAGS(['report', root]))
  assert capsys.readouterr().out.split() == [
    os.path.join(root, 'results.md'),
    os.path.join(root, 'report.html'),
  ]
  assert os.path.isfile(os.path.join(root, 'report.html'))


def test_run_page(run_dir, tmp_path):
  weights = _random_weights(7, (3, 4))
  np.savez_compressed(
    run_dir / 'attention' / 'test_step0002000.npz',
    weights_0=weights,
    source_0=np.array(['a', SCRIPT, 'c', '<eos>']),
    output_0=np.array(['x', 'y', 'z']),
  )
  out = tmp_path / 'out'
  run_report.write_run_report(str(run_dir), str(out), command=fake_run.COMMAND)
  text, page = read_page(out / 'report.html')
  assert 'https://' not in text and text.count('<script') == 1
  (heatmap,) = page.of_class('heatmap')
  assert heatmap['caption'] == 'test #0 (step 2000)'
  source, target, shown = _heatmap(heatmap)
  assert (source, target) == (['a', SCRIPT, 'c', '<eos>'], ['x', 'y', 'z'])
  np.testing.assert_array_equal(shown, weights)
  metrics = page.of_class('sortable')[0]
  assert metrics['head'] == ['metric', 'eval', 'test']
  assert [(c, a.get('data-sort')) for c, a in metrics['rows'][1]] == [
    ('wer', None),
    ('70.00%', '70.0'),
    ('72.59%', '72.59'),
  ]
  assert f'<pre><code>{fake_run.COMMAND}</code></pre>' in text
  assert {a['href'] for t, a in page.tags if t == 'a'} == {'config.json', 'final_metrics.json'}
  assert len(page.images()) == 2  # by_length, learning_curve; the heatmap PNG became HTML


def test_run_page_without_weights_shows_the_png(run_dir, tmp_path):
  out = tmp_path / 'out'
  run_report.write_run_report(str(run_dir), str(out))
  _, page = read_page(out / 'report.html')
  assert not page.of_class('heatmap')
  png = (out / 'attention' / 'test_step0002000_ex0.png').read_bytes()
  assert page.images()[-1] == 'data:image/png;base64,' + base64.b64encode(png).decode()


def _planted(tmp_path):
  """A file outside the report folder (by absolute path, by '..') and the Markdown lines that
  would inline it; with /etc/hostname where this machine has one."""
  secret = tmp_path / 'secret.png'
  secret.write_bytes(b'\x89PNG not for the report')
  paths = [str(secret), '../secret.png']
  if os.path.isfile('/etc/hostname') and os.path.getsize('/etc/hostname'):
    paths.append('/etc/hostname')
  return paths, [f'![leak]({p})' for p in paths]


def _leaked(text: str, paths, base_dir) -> list[str]:
  """The planted files whose bytes are in `text` as base64."""
  leaked = []
  for p in paths:
    with open(os.path.join(base_dir, p), 'rb') as f:
      if base64.b64encode(f.read()).decode() in text:
        leaked.append(p)
  return leaked


def test_a_run_report_inlines_no_file_that_a_task_name_or_command_plants(run_dir, tmp_path):
  paths, planted = _planted(tmp_path)
  task = 'reverse\n' + '\n'.join(planted) + '\nx'
  (run_dir / 'config.json').write_text(json.dumps({'task': {'name': task}, 'seed': 0}))
  command = f'{fake_run.COMMAND}\n' + '\r\n'.join(planted) + '\x85\u2028\tend'
  out = tmp_path / 'out'
  run_report.write_run_report(str(run_dir), str(out), command=command)
  text, page = read_page(out / 'report.html')
  assert _leaked(text, paths, out) == []
  readme = (out / 'README.md').read_text()
  # Each value stays on its line: the heading, and the command in its code block.
  assert f'# reverse {" ".join(planted)} x: configs/g2p.py\n' in readme
  assert f'\n    {fake_run.COMMAND} {"  ".join(planted)}   end\n' in readme
  # The report's own plots are still inlined, byte for byte.
  pngs = [(out / name).read_bytes() for name in ('by_length.png', 'learning_curve.png',
                                                 'attention/test_step0002000_ex0.png')]
  assert [base64.b64decode(src.split(',', 1)[1]) for src in page.images()] == pngs


def test_a_sweep_report_inlines_no_file_that_its_values_plant(tmp_path):
  paths, planted = _planted(tmp_path)
  root = make_sweep(str(tmp_path / 'sweep'))
  manifest_path = os.path.join(root, 'sweep.json')
  with open(manifest_path) as f:
    manifest = json.load(f)
  manifest['name'] = 'toy\n' + '\n'.join(planted)
  with open(manifest_path, 'w') as f:
    json.dump(manifest, f)
  with open(os.path.join(root, trial_name('none', 1), 'sweep_status.json'), 'w') as f:
    json.dump({'status': 'failed', 'wall_s': 5.0, 'error': 'ValueError:\n' + '\n'.join(planted)},
              f)
  report.write_report(root)
  text, page = read_page(os.path.join(root, 'report.html'))
  assert _leaked(text, paths, root) == []
  with open(os.path.join(root, 'results.md')) as f:
    lines = f.read().splitlines()
  assert f'# toy {" ".join(planted)}' in lines
  assert f'- `timing=none,seed=1`: ValueError: {" ".join(planted)}' in lines
  plots = [os.path.join(root, 'plots', f'reverse-{k}.png') for k in ('metric', 'by_length',
                                                                     'curves')]
  assert [base64.b64decode(src.split(',', 1)[1]) for src in page.images()] == [
    open(p, 'rb').read() for p in plots]
