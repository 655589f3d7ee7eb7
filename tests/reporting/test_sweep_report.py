"""Report: golden results.md / results.csv of fake run directories, plots, bootstrap statistics."""

import csv
import json
import os
import shutil

import numpy as np
import pytest
from support.fake_sweep import FINAL_STEP, make_sweep, trial_name
from support.files import write_file

from attnlab.reporting import sweep_report as report
from attnlab.sweeps.trials import SweepError

GOLDEN_MD = """\
# toy

`python -m attnlab.sweep experiments/toy.py --workdir=DIR`: 6 trials, 5 finished, 1 failed, \
0 not finished.

Test split. Metrics: mean ± std over finished seeds.

Across seeds (the unit of evidence: one test metric per trained model): Δ vs best is the \
variant's mean minus the best's in the table's metric, with a 95% interval and two-sided p from \
Welch's t-test over all finished seeds of each (Welch–Satterthwaite degrees of freedom; '–' with \
one seed on a side). Holm p: p corrected by Holm's step-down method over this report's family, \
every pair of variants of a group with two or more finished seeds on each side (1 test(s)), \
whichever variant came out best: a group's tables print its variants against the best, the \
one-setting-at-a-time pairs, then the family's other pairs. Finding: 'beyond seeds' where the \
Holm p is at most 0.05, else 'not shown'; '(still improving)' where a trial of either variant \
was still improving (Convergence below), so the gap may measure learning speed.

Test examples (test-set noise: the same models on other test examples, not training variance): \
Δ is exact-match accuracy minus the best variant's (on G2P 1 - WER, so a negative Δ is that many \
more words wrong; corpus BLEU minus the best's where variants are ranked by BLEU), with a 95% \
interval and two-sided p from a paired bootstrap (2000 resamples of test examples, paired by \
seed and example; p is twice the smaller share of resampled differences on a side of zero, so it \
resolves to 0.001).

Ended by: patience (train.patience dev evaluations in a row without a gain), the learning-rate \
floor (the next plateau cut would go below optim.plateau_min_scale) or the step cap \
(train.num_steps). Still improving: the best-so-far dev selection metric moved at least 0.3 \
points (percentage points for rates, BLEU/chrF points) over the last 25% of training, however \
the run ended. Converged: not still improving (where too few evaluations fall in that part to \
tell: stopped by patience or the learning-rate floor). Tested on best: the test split was \
evaluated with the trial's best dev checkpoint.

Compute: 5 finished trial(s), 6m20s of trial wall time, 3m30s of CPU time (1m10s per trial; 3 \
of them recorded it). Wall/trial and CPU/trial below are means over finished seeds. Machines: \
amd-epyc-f25m17-avx512-2cpu (2 process run(s)), intel-xeon-f6m167-amx-2cpu (1 process run(s)), \
not recorded (2: runs from before run_times.jsonl named it).

## configs/reverse.py

Best by test sequence_accuracy (higher is better).

| variant | seeds | converged | still improving | sequence_accuracy | Δ vs best [95% CI] | p | \
Holm p | finding | Δ test examples [95% CI] | p test examples | attention_entropy | \
alignment_error_rate | params | tokens/s | wall/trial | CPU/trial |
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
| timing=luong | 2/2 | 2/2 | 0/2 | 0.875 ± 0.177 | best |  |  |  |  |  | 0.600 ± 0.141 | \
0.150 ± 0.071 | 1,200 | 500 | 1m10s | 1m00s |
| timing=bahdanau | 2/2 | 2/2 | 0/2 | 0.875 ± 0.177 | +0.000 [-0.761, +0.761] | 1.000 | 1.000 \
| not shown | +0.000 [+0.000, +0.000] | 1.000 | 1.100 ± 0.141 | 0.400 ± 0.141 | 1,100 | 300 | \
1m45s | 1m30s (1 of 2) |
| timing=none | 1/2 (1 failed) | 1/1 | 0/1 | 0.000 | – | – | – | – | -1.000 [-1.000, -1.000] \
| < 0.001 | – | – | 800 | 1,500 | 0m30s | – |

One setting at a time (pairs of variants that differ in that setting alone, the others held; \
test sequence_accuracy; Δ: the second minus the first, across seeds and, measured as in the main \
table, over the test examples of the seeds both finished):

| setting | held | first → second | sequence_accuracy | still improving | Δ [95% CI] | p | Holm p \
| finding | Δ test examples [95% CI] | p test examples |
|---|---|---|---|---|---|---|---|---|---|---|
| timing | – | luong → bahdanau | 0.875 ± 0.177 → 0.875 ± 0.177 | 0/2 → 0/2 | +0.000 [-0.761, \
+0.761] | 1.000 | 1.000 | not shown | +0.000 [+0.000, +0.000] | 1.000 |
| timing | – | luong → none | 0.875 ± 0.177 → 0.000 | 0/2 → 0/1 | – | – | – | – | -1.000 \
[-1.000, -1.000] | < 0.001 |
| timing | – | bahdanau → none | 0.875 ± 0.177 → 0.000 | 0/2 → 0/1 | – | – | – | – | -1.000 \
[-1.000, -1.000] | < 0.001 |

Test sequence accuracy by source length in tokens (Bahdanau et al. 2015, Fig. 2):

| variant | 5-9 | 10-14 |
|---|---|---|
| timing=luong | 1.000 ± 0.000 | 0.750 ± 0.354 |
| timing=bahdanau | 1.000 ± 0.000 | 0.750 ± 0.354 |
| timing=none | 0.000 | 0.000 |

![metric](plots/reverse-metric.png)

![by_length](plots/reverse-by_length.png)

![curves](plots/reverse-curves.png)

![attention](plots/reverse-attention.png)

### Convergence: configs/reverse.py

| variant | seed | selected step | last step | ended by | last-quarter movement (points) | \
still improving | tested on best | verdict |
|---|---|---|---|---|---|---|---|---|
| timing=luong | 0 | 4 | 8 | step cap | 0.00 (6-8) | no | yes | converged |
| timing=luong | 1 | 4 | 8 | step cap | 0.00 (6-8) | no | yes | converged |
| timing=bahdanau | 0 | 4 | 8 | step cap | 0.00 (6-8) | no | yes | converged |
| timing=bahdanau | 1 | 4 | 8 | step cap | 0.00 (6-8) | no | yes | converged |
| timing=none | 0 | 4 | 8 | step cap | 0.00 (6-8) | no | yes | converged |

## Failed trials

- `timing=none,seed=1`: ValueError: boom
"""


def test_golden_results_md(tmp_path):
  root = make_sweep(str(tmp_path))
  path = report.write_report(root)
  with open(path) as f:
    text = f.read()
  # Long table rows are wrapped in GOLDEN_MD with a backslash for line length only. Across
  # seeds, bahdanau (1, 0.75) against luong (1, 0.75): Δ 0, se = sqrt(2 x 0.03125 / 2) = 0.177,
  # df = 2, t_0.975 = 4.303: ±0.761, p = 1; the family's only test (none has one seed).
  assert text == GOLDEN_MD


def test_a_metric_no_trial_reports_is_refused_before_the_report_is_rewritten(tmp_path):
  root = make_sweep(str(tmp_path))
  path = report.write_report(root, plots=False)
  before = {name: open(os.path.join(root, name)).read() for name in ('results.md', 'results.csv')}
  with pytest.raises(SweepError, match=r'--metric=wre: no finished trial reports that test '
                     r'metric; choose from auto, alignment_error_rate, .*sequence_accuracy'):
    report.write_report(root, 'wre', plots=False)
  assert {name: open(os.path.join(root, name)).read() for name in before} == before
  assert report.write_report(root, 'loss', plots=False) == path  # any reported number ranks


def test_golden_results_csv(tmp_path):
  root = make_sweep(str(tmp_path))
  report.write_report(root, plots=False)
  with open(os.path.join(root, 'results.csv')) as f:
    rows = list(csv.DictReader(f))
  assert [r['variant'] for r in rows] == ['timing=luong', 'timing=bahdanau', 'timing=none']
  luong, bahdanau, none = rows
  assert luong['ranked_by'] == 'sequence_accuracy'
  assert (luong['seeds_finished'], luong['seeds_failed']) == ('2', '0')
  assert (none['seeds_finished'], none['seeds_failed']) == ('1', '1')
  # mean and sample std of (1, 0.75); of entropies (0.5, 0.7); a single seed has no std.
  assert float(luong['sequence_accuracy_mean']) == pytest.approx(0.875)
  assert float(luong['sequence_accuracy_std']) == pytest.approx(0.25 / np.sqrt(2), rel=1e-5)
  assert float(luong['attention_entropy_mean']) == pytest.approx(0.6)
  assert float(luong['loss_mean']) == pytest.approx(1 - 0.875 / 2)
  assert none['sequence_accuracy_std'] == '' and none['attention_entropy_mean'] == ''
  assert float(luong['tokens_per_sec']) == 500.0  # median of 400, 500, 900
  assert float(none['tokens_per_sec']) == 1500.0  # median of 1000, 2000
  assert float(bahdanau['wall_s']) == 105.0 and float(luong['num_params']) == 1200.0
  # CPU seconds: luong (30 + 40, 50), bahdanau only seed 0's 90 (seed 1 recorded none).
  assert (float(luong['cpu_s']), float(bahdanau['cpu_s']), none['cpu_s']) == (60.0, 90.0, '')
  assert luong['delta_vs_best'] == '' and float(bahdanau['p_value']) == 1.0
  assert float(none['delta_vs_best']) == -1.0 and float(none['ci_high']) == -1.0
  assert float(none['p_value']) == 0.0
  assert (luong['seeds_converged'], luong['seeds_undecided']) == ('2', '0')
  assert (none['seeds_converged'], none['seeds_tested_on_best']) == ('1', '1')
  assert float(luong['max_movement_points']) == 0.0
  # The best itself, and a variant with one seed: no test across seeds.
  assert {luong['seed_p_value'], luong['finding'], none['seed_p_value'], none['finding']} == {''}
  assert float(bahdanau['seed_delta_vs_best']) == 0.0 and bahdanau['finding'] == 'not shown'
  assert float(bahdanau['seed_ci_high']) == pytest.approx(4.3027 * 0.25 / np.sqrt(2), abs=1e-4)
  assert float(bahdanau['seed_p_value']) == float(bahdanau['seed_holm_p_value']) == 1.0
  assert bahdanau['seeds_still_improving'] == '0'


def _assert_png(path):
  with open(path, 'rb') as f:
    data = f.read()
  assert data[:8] == b'\x89PNG\r\n\x1a\n', path
  assert len(data) > 3000, f'{path}: {len(data)} bytes'


@pytest.mark.slow
@pytest.mark.parametrize('npz', [True, False], ids=['weights_npz', 'heatmap_pngs'])
def test_plots_are_written(tmp_path, npz):
  root = make_sweep(str(tmp_path), npz=npz)
  report.write_report(root)
  for kind in ('metric', 'by_length', 'curves', 'attention'):
    _assert_png(os.path.join(root, 'plots', f'reverse-{kind}.png'))


def test_attention_grid_is_skipped_without_attention(tmp_path):
  root = make_sweep(str(tmp_path))
  for timing in ('luong', 'bahdanau'):
    for seed in (0, 1):
      os.remove(
        os.path.join(root, trial_name(timing, seed), 'attention', f'test_step{FINAL_STEP:07d}.npz')
      )
  text = open(report.write_report(root)).read()
  assert 'plots/reverse-attention.png' not in text
  assert not os.path.exists(os.path.join(root, 'plots', 'reverse-attention.png'))


def test_missing_predictions_are_reported(tmp_path):
  root = make_sweep(str(tmp_path))
  os.remove(os.path.join(root, trial_name('none', 0), 'predictions_test.jsonl'))
  text = open(report.write_report(root, plots=False)).read()
  assert '| timing=none | 1/2 (1 failed) | 1/1 | 0/1 | 0.000 | – | – | – | – | – |' in text
  assert 'No predictions_test.jsonl in 1 finished trial(s)' in text


def test_labels_from_the_experiment_name_rows_and_keep_the_settings_beside(tmp_path):
  root = make_sweep(str(tmp_path))
  path = os.path.join(root, 'sweep.json')
  manifest = json.load(open(path))
  for trial in manifest['trials']:
    if trial['overrides']['model.attention.timing'] == 'none':
      trial['label'] = 'no attention'
  write_file(path, json.dumps(manifest))
  text = open(report.write_report(root, plots=False)).read()
  assert '| no attention | 1/2 (1 failed) | 1/1 | 0/1 | 0.000 | – | – | – | – | -1.000 ' in text
  assert '| timing=none |' not in text
  assert 'Variants: no attention: `timing=none`.' in text
  with open(os.path.join(root, 'results.csv')) as f:
    rows = list(csv.DictReader(f))
  assert [(r['variant'], r['settings']) for r in rows] == [
    ('timing=luong', 'timing=luong'), ('timing=bahdanau', 'timing=bahdanau'),
    ('no attention', 'timing=none')]


def test_trials_without_a_directory_are_listed_as_new_with_what_that_means(tmp_path):
  root = make_sweep(str(tmp_path))
  # No folder, as an archive holds a running trial:
  shutil.rmtree(os.path.join(root, trial_name('bahdanau', 1)))
  text = open(report.write_report(root, plots=False)).read()
  section = text[text.index('## Not finished'):]
  assert 'New: no run of it in this directory.' in section
  assert f'- `{trial_name("bahdanau", 1)}`: new' in section


def test_report_needs_a_sweep_directory(tmp_path):
  with pytest.raises(SweepError, match='no sweep.json'):
    report.write_report(str(tmp_path))


def test_compute_line_names_the_trials_copied_from_another_experiment(tmp_path):
  root = make_sweep(str(tmp_path))
  for seed in (0, 1):
    path = os.path.join(root, trial_name('luong', seed), 'sweep_status.json')
    with open(path) as f:
      status = json.load(f)
    status['copied_from'] = f'bottleneck/bible,timing=luong,seed={seed}'
    write_file(path, json.dumps(status))
  with open(report.write_report(root)) as f:
    text = f.read()
  assert ('Compute: 5 finished trial(s), 6m20s of trial wall time, 3m30s of CPU time (1m10s per '
          'trial; 3 of them recorded it); 2 of them trained once for another experiment '
          '(bottleneck: the same config) and copied, their compute counted in both.') in text
