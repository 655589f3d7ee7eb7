"""Convergence verdicts from hand-built metrics.jsonl rows, and how reports show them.

Every movement below is worked out by hand from the rows: the best-so-far dev value (in the
metric's direction) at the last evaluation, minus the one at the last evaluation at or before
0.75 x the last step, in points (x100 for fractions such as WER; BLEU as stored).
"""

import dataclasses
import json
import os

import pytest
from support.fake_sweep import make_sweep, trial_name

from attnlab import metrics
from attnlab.reporting import convergence, plots, sweep_results
from attnlab.reporting import sweep_report as report
from attnlab.reporting.convergence import (
  CONVERGED,
  EARLY_STOPPED,
  FLOOR,
  NOT_CONVERGED,
  PATIENCE,
  STEP_CAP,
  UNDECIDED,
  assess,
)


def _final(metric, best_step, last, *, tested=None, stopped_early=False, patience=0):
  chosen = {
    'split': 'eval',
    'metric': metric,
    'mode': metrics.DIRECTIONS[metric],
    'best_step': best_step,
    'best_value': None,
    'patience': patience,
    'stopped_early': stopped_early,
  }
  return {
    'step': best_step if tested is None else tested,
    'trained_steps': last,
    'selection': chosen,
  }


def _events(metric, curve, *, test_value=0.0):
  """Eval rows of `curve` {step: value}, plus train and test rows that must be ignored."""
  rows = [{'step': s, 'split': 'train', 'loss': 1.0, metric: test_value} for s in curve]
  rows += [{'step': s, 'split': 'eval', 'loss': 2.0, metric: v} for s, v in curve.items()]
  rows.append({'step': max(curve), 'split': 'test', metric: test_value})
  return rows


def test_a_plateaued_run_converged():
  # WER 0.40 -> 0.25 by step 6,000, then within 0.1 points: best-so-far 0.250 at step 7,000
  # (the last evaluation <= 7,500) and 0.249 at 10,000: |0.249 - 0.250| x 100 = 0.1 points.
  curve = {
    1000: 0.40,
    3000: 0.30,
    6000: 0.25,
    7000: 0.2505,
    8000: 0.251,
    9000: 0.249,
    10000: 0.2495,
  }
  c = assess(_final('wer', 9000, 10000), _events('wer', curve))
  assert c.verdict == CONVERGED and c.converged
  assert c.movement == pytest.approx(0.1)
  assert c.window == (7000, 10000) and c.evaluations_in_window == 3  # 8,000, 9,000, 10,000
  assert (c.selected_step, c.last_step, c.tested_step) == (9000, 10000, 9000)
  assert c.tested_on_best and not c.early_stopped
  assert c.reason == 'dev wer moved 0.10 points over the last quarter (steps 7,000-10,000)'
  assert (c.ended_by, c.evaluations_after_best, c.still_improving) == (STEP_CAP, 1, False)


def test_a_still_improving_run_did_not_converge():
  # The raw values at 7,500 (0.32) and 10,000 (0.295) differ by 2.5 points, but selection holds
  # the best so far: 0.30 (step 5,000) before the quarter, 0.29 (step 9,000) at the end:
  # |0.29 - 0.30| x 100 = 1.0 point >= 0.3.
  curve = {2500: 0.40, 5000: 0.30, 7500: 0.32, 8000: 0.31, 9000: 0.29, 10000: 0.295}
  c = assess(_final('wer', 9000, 10000), _events('wer', curve))
  assert c.verdict == NOT_CONVERGED and not c.converged and c.still_improving
  assert c.movement == pytest.approx(1.0)
  assert c.window == (7500, 10000) and c.evaluations_in_window == 4  # 7,500 counts: [7,500, ...]
  assert c.reason == (
    'dev wer moved 1.00 points over the last quarter (steps 7,500-10,000), not under 0.3: '
    'still improving'
  )


@pytest.mark.parametrize(
  'anchor, end, verdict',
  [(0.3, 0.297, NOT_CONVERGED), (0.102, 0.099, NOT_CONVERGED), (0.3, 0.2971, CONVERGED)],
  ids=['0.3_points', '0.3_points_float_noise_below', '0.29_points'],
)
def test_the_threshold_is_strict(anchor, end, verdict):
  # 0.300 -> 0.297 is 0.3 points (0.30000000000000027 in floats), and so is 0.102 -> 0.099
  # (0.2999999999999989 in floats): neither is under 0.3.
  c = assess(_final('wer', 4, 4), _events('wer', {1: 0.5, 3: anchor, 4: end}))
  assert c.verdict == verdict


def test_an_early_stop_on_a_flat_curve_is_convergence():
  # Best at 3,000; patience 3 stopped the run at 6,000 (no improvement at 4, 5 and 6 thousand).
  curve = {1000: 0.5, 2000: 0.4, 3000: 0.35, 4000: 0.36, 5000: 0.37, 6000: 0.355}
  final = _final('wer', 3000, 6000, stopped_early=True, patience=3)
  c = assess(final, _events('wer', curve))
  assert c.verdict == CONVERGED and c.converged and c.early_stopped
  assert (c.ended_by, c.evaluations_after_best) == (PATIENCE, 3)
  assert c.last_step == 6000 and c.window == (4000, 6000) and c.movement == 0.0
  assert c.reason == (
    'patience ended the run at step 6,000: 3 evaluations without a dev gain '
    '(train.patience=3); dev wer moved 0.00 points over the last quarter (steps 4,000-6,000)'
  )
  # Without the early stop the same curve is judged on its movement; with too coarse a curve
  # (one evaluation in the last quarter, [4,500, 6,000]) the early stop alone decides.
  final['selection']['stopped_early'] = False
  assert assess(final, _events('wer', curve)).verdict == CONVERGED
  final['selection']['stopped_early'] = True
  coarse = assess(final, _events('wer', {3000: 0.35, 3500: 0.36, 4000: 0.36, 6000: 0.36}))
  assert coarse.verdict == EARLY_STOPPED and coarse.movement is None
  assert coarse.reason == (
    'patience ended the run at step 6,000: 3 evaluations without a dev gain (train.patience=3)'
  )
  assert coarse.still_improving is None


def test_a_patience_stop_after_a_best_smaller_than_a_gain_says_so():
  # train.min_improvement 0.1 BLEU: 36.15 at 17,000 is the last gain; 36.21 at 20,000 is the
  # best (selected) but 0.06 over it, so 18, 19 and 20 thousand are 3 evaluations without a gain.
  curve = {15000: 35.81, 16000: 35.52, 17000: 36.15, 18000: 35.78, 19000: 36.10, 20000: 36.21}
  final = _final('bleu', 20000, 20000, stopped_early=True, patience=3)
  final['selection'].update(min_improvement=0.1, ended_by='patience')
  c = assess(final, _events('bleu', curve))
  assert (c.ended_by, c.evaluations_after_best) == (PATIENCE, 0)
  assert c.reason.startswith(
    'patience ended the run at step 20,000: train.patience=3 dev evaluations in a row without a '
    'gain of 0.1 points (train.min_improvement); the best, 0 evaluations before the end, '
    'improved by less; dev bleu moved'
  )
  final['selection']['best_step'] = 17000  # the best was the last gain: nothing to add
  assert assess(final, _events('bleu', {**curve, 20000: 36.0})).reason.startswith(
    'patience ended the run at step 20,000: train.patience=3 dev evaluations in a row without a '
    'gain of 0.1 points (train.min_improvement); dev bleu moved'
  )


def test_how_a_run_ended_is_read_from_the_evaluations_after_its_best():
  # Patience 3, plateau cuts after 1 evaluation without a gain: a stop with fewer than 3
  # evaluations after the best can only be the learning-rate floor (train/start.py checks the
  # floor while patience is not exhausted); 3 or more, patience; no early stop, the step cap.
  curve = {1000: 0.5, 2000: 0.4, 3000: 0.35, 4000: 0.36, 5000: 0.37, 6000: 0.355}
  ended = lambda best, last, early, patience=3: assess(
    _final('wer', best, last, stopped_early=early, patience=patience),
    _events('wer', {s: v for s, v in curve.items() if s <= last}),
  )
  floor = ended(3000, 5000, True)
  assert (floor.ended_by, floor.evaluations_after_best) == (FLOOR, 2)
  assert floor.reason.startswith(
    'the learning-rate floor ended the run at step 5,000, 2 evaluations after the best: the next '
    'plateau cut would go below optim.plateau_min_scale; dev wer moved'
  )
  cell = convergence.trial_row('v', 0, floor)[4]
  assert cell == 'learning-rate floor (2 evaluations after the best)'
  one = ended(3000, 4000, True)
  assert (one.ended_by, convergence.trial_row('v', 0, one)[4]) == (
    FLOOR,
    'learning-rate floor (1 evaluation after the best)',
  )
  assert ended(3000, 6000, True).ended_by == PATIENCE
  assert ended(3000, 6000, True, patience=0).ended_by == FLOOR  # patience off: only the floor
  cap = ended(3000, 6000, False)
  assert (cap.ended_by, convergence.trial_row('v', 0, cap)[4]) == (STEP_CAP, 'step cap')
  # Stopped early without a dev curve to count on: not told.
  unknown = assess(_final('wer', 3000, 6000, stopped_early=True, patience=3), [])
  assert unknown.ended_by is None and convergence.trial_row('v', 0, unknown)[4] == 'early stop'


def test_an_early_stop_while_still_improving_is_not_convergence():
  # The plateau floor stopped a slow learner one evaluation after its best: best-so-far
  # sequence accuracy 0.40 at 6,000 (the last evaluation at or before 0.75 x 8,000), 0.45 at
  # 8,000: 5 points moved. The stop proves no plateau: not converged, still improving.
  curve = {2000: 0.2, 4000: 0.3, 6000: 0.40, 7000: 0.45, 8000: 0.44}
  final = _final('sequence_accuracy', 7000, 8000, stopped_early=True, patience=3)
  c = assess(final, _events('sequence_accuracy', curve))
  assert c.verdict == NOT_CONVERGED and not c.converged and c.still_improving
  assert c.movement == pytest.approx(5.0) and c.ended_by == FLOOR
  assert c.reason.endswith('(steps 6,000-8,000), not under 0.3: still improving')
  row = convergence.trial_row('v', 0, c)
  assert row[4:] == [
    'learning-rate floor (1 evaluation after the best)',
    '5.00 (6,000-8,000)',
    'yes',
    'yes',
    'not converged',
  ]
  # 0.29 points is flat: converged, no mention.
  flat = {2000: 0.2, 4000: 0.3, 6000: 0.40, 7000: 0.4029, 8000: 0.4}
  c = assess(final, _events('sequence_accuracy', flat))
  assert c.still_improving is False and not c.reason.endswith('still improving')
  assert convergence.trial_row('v', 0, c)[6:] == ['no', 'yes', 'converged']


def test_too_few_evaluations_in_the_last_quarter_is_undecided():
  # Evaluations at 5,000 and 10,000: only one lies in [7,500, 10,000].
  c = assess(_final('wer', 10000, 10000), _events('wer', {5000: 0.4, 10000: 0.3}))
  assert c.verdict == UNDECIDED and not c.converged
  assert c.movement is None and c.evaluations_in_window == 1
  assert c.reason == (
    '1 evaluation(s) of dev wer in the last quarter (steps 7,500-10,000), 2 needed: evaluate '
    'more often (train.eval_every)'
  )
  # Every 2,500 steps: 7,500 and 10,000 are both in the (closed) last quarter.
  c = assess(_final('wer', 10000, 10000), _events('wer', {5000: 0.4, 7500: 0.3, 10000: 0.299}))
  assert c.verdict == CONVERGED and c.movement == pytest.approx(0.1)


def test_no_evaluation_before_the_last_quarter_is_undecided():
  c = assess(_final('wer', 9000, 10000), _events('wer', {8000: 0.4, 9000: 0.3, 10000: 0.31}))
  assert c.verdict == UNDECIDED and c.evaluations_in_window == 3
  assert c.reason == 'no evaluation of dev wer at or before step 7,500'


def test_bleu_is_higher_is_better_in_its_own_points():
  # Best-so-far BLEU 27.0 at step 6 (the last <= 6) and 27.2 at 8: 0.2 BLEU points.
  flat = {2: 20.0, 4: 25.0, 6: 27.0, 7: 26.0, 8: 27.2}
  c = assess(_final('bleu', 8, 8), _events('bleu', flat, test_value=99.0))
  assert c.verdict == CONVERGED and c.movement == pytest.approx(0.2)
  # 27.0 -> 28.0: 1 BLEU point (lower-is-better would see a flat 20.0 and call it converged).
  rising = {**flat, 8: 28.0}
  c = assess(_final('bleu', 8, 8), _events('bleu', rising, test_value=99.0))
  assert c.verdict == NOT_CONVERGED and c.movement == pytest.approx(1.0)


def test_sequence_accuracy_counts_percentage_points():
  c = assess(
    _final('sequence_accuracy', 8, 8),
    _events('sequence_accuracy', {2: 0.5, 6: 0.9, 8: 0.905}, test_value=1.0),
  )
  assert c.verdict == NOT_CONVERGED and c.movement == pytest.approx(0.5)


def test_without_model_selection_nothing_is_decided():
  # A final_metrics.json without `selection` (no eval split, or a run from before selection):
  # the test split came from the last step, not a selected checkpoint.
  c = assess({'step': 1000, 'num_params': 5}, _events('wer', {500: 0.3, 1000: 0.3}))
  assert c.verdict == UNDECIDED and not c.tested_on_best and c.selected_step is None
  assert c.reason == 'no model selection recorded in final_metrics.json: tested at the last step'
  assert convergence.run_line(c) == (
    'Converged: undecided - no model selection recorded in final_metrics.json: tested at the '
    'last step'
  )


def test_a_resumed_run_keeps_the_last_row_per_step():
  rows = _events('wer', {2: 0.5, 3: 0.3, 4: 0.3})
  rows.append({'step': 3, 'split': 'eval', 'wer': 0.2})  # the resumed run's re-evaluation
  rows.append({'step': 4, 'split': 'eval', 'wer': float('nan')})  # skipped, as selection does
  assert convergence.eval_curve(rows, 'wer') == [(2, 0.5), (3, 0.2), (4, 0.3)]


def test_every_selection_metric_has_a_point_scale():
  assert set(metrics.POINTS_PER_UNIT) == set(metrics.DIRECTIONS)


def test_run_line():
  curve = {5000: 0.25, 7500: 0.2012, 9000: 0.2, 10000: 0.2005}
  c = assess(_final('wer', 9000, 10000), _events('wer', curve))
  assert convergence.run_line(c) == (
    'Converged: yes - dev wer moved 0.12 points over the last quarter (steps 7,500-10,000); '
    'selected step 9,000'
  )
  c = assess(_final('wer', 9000, 10000, tested=10000), _events('wer', {**curve, 9000: 0.19}))
  assert convergence.run_line(c) == (
    'Converged: no - dev wer moved 1.12 points over the last quarter (steps 7,500-10,000), not '
    'under 0.3: still improving; selected step 9,000; tested at step 10,000, not with the '
    'selected checkpoint'
  )


def test_count_cell():
  good = assess(_final('wer', 4, 4), _events('wer', {2: 0.5, 3: 0.3, 4: 0.3}))
  bad = assess(_final('wer', 4, 4), _events('wer', {2: 0.5, 3: 0.3, 4: 0.2}))
  unsure = assess(_final('wer', 4, 4), _events('wer', {4: 0.2}))
  assert convergence.count_cell([good, good, good]) == '3/3'
  assert convergence.count_cell([good, good, unsure]) == '2/3 (1 undecided)'
  assert convergence.count_cell([good, bad, unsure]) == '1/3 (1 undecided)'
  assert convergence.count_cell([]) == '–'
  assert convergence.improving_cell([good, bad, unsure]) == '1/2'  # 'unsure' has no movement
  assert convergence.improving_cell([unsure]) == '–'


def _rewrite_eval(root, name, curve):
  """Replaces a fake trial's eval rows (test_report.make_sweep: selected step 4, 8 trained)."""
  path = os.path.join(root, name, 'metrics.jsonl')
  rows = [json.loads(line) for line in open(path)]
  rows = [r for r in rows if r['split'] != 'eval']
  rows += [{'step': s, 'split': 'eval', 'sequence_accuracy': v} for s, v in curve.items()]
  with open(path, 'w') as f:
    f.writelines(json.dumps(r) + '\n' for r in rows)


def test_the_report_marks_and_names_trials_that_did_not_converge(tmp_path):
  root = make_sweep(str(tmp_path))
  # bahdanau seed 1: best-so-far 0.50 at step 6, 0.75 at step 8: 25 points, still improving.
  _rewrite_eval(root, trial_name('bahdanau', 1), {2: 0.25, 4: 0.5, 6: 0.5, 8: 0.75})
  # luong seed 0: evaluated at 2 and 8 only: one evaluation in the last quarter [6, 8].
  _rewrite_eval(root, trial_name('luong', 0), {2: 0.5, 8: 1.0})
  text = open(report.write_report(root, plots=False)).read()
  lines = text.splitlines()
  assert lines[lines.index('## configs/reverse.py') + 4].startswith(
    '| variant | seeds | converged |'
  )
  assert '| timing=luong † | 2/2 | 1/2 (1 undecided) | 0/1 | 0.875 ± 0.177 | best |' in text
  assert '| timing=bahdanau † | 2/2 | 1/2 | 1/2 | 0.875 ± 0.177 |' in text
  assert '| timing=none | 1/2 (1 failed) | 1/1 | 0/1 | 0.000 |' in text
  # A comparison with a trial still improving says so beside its finding, in both tables.
  [main] = [line for line in lines if line.startswith('| timing=bahdanau † |')]
  [pair] = [line for line in lines if line.startswith('| timing | – | luong → bahdanau |')]
  assert '| 1.000 | 1.000 | not shown (still improving) |' in main
  assert (
    '| 0/1 → 1/2 | +0.000 [-0.761, +0.761] | 1.000 | 1.000 | not shown (still improving) |' in pair
  )
  flag = (
    '† Not all trials converged, so these test numbers may measure learning speed rather than a '
    'converged model: timing=luong: seed 0 (undecided: 1 evaluation(s) of dev sequence_accuracy '
    'in the last quarter (steps 6-8), 2 needed: evaluate more often (train.eval_every)); '
    'timing=bahdanau: seed 1 (not converged: dev sequence_accuracy moved 25.00 points over the '
    'last quarter (steps 6-8), not under 0.3: still improving).'
  )
  assert flag in lines
  assert lines.index(flag) < lines.index('### Convergence: configs/reverse.py')
  row = '| timing=bahdanau | 1 | 4 | 8 | step cap | 25.00 (6-8) | yes | yes | not converged |'
  assert row in lines
  assert '| timing=luong | 0 | 4 | 8 | step cap | – | – | yes | undecided: 1 evaluation(s)' in text
  csv_rows = open(os.path.join(root, 'results.csv')).read().splitlines()
  head = csv_rows[0].split(',')
  bahdanau = dict(zip(head, csv_rows[2].split(','), strict=True))
  assert (bahdanau['seeds_converged'], bahdanau['seeds_undecided']) == ('1', '0')
  assert bahdanau['seeds_still_improving'] == '1'
  assert float(bahdanau['max_movement_points']) == 25.0


def test_all_converged_has_no_flag(tmp_path):
  text = open(report.write_report(make_sweep(str(tmp_path)), plots=False)).read()
  assert '†' not in text
  assert '| timing=luong | 2/2 | 2/2 |' in text


def test_the_curves_plot_draws_every_trial_and_its_selected_step(tmp_path, monkeypatch):
  root = make_sweep(str(tmp_path))
  _rewrite_eval(root, trial_name('bahdanau', 1), {2: 0.25, 4: 0.6, 6: 0.5, 8: 0.55})
  _, groups = sweep_results.collect(root)
  (variants,) = groups.values()
  figures = []
  monkeypatch.setattr(plots, 'save_figure', lambda fig, path: figures.append(fig))
  assert plots.plot_curves(str(tmp_path / 'c.png'), variants, 'sequence_accuracy')
  (fig,) = figures
  loss_ax, dev_ax = fig.axes
  assert dev_ax.get_title() == (
    'dev sequence_accuracy, every trial (dot: selected step; shaded: last quarter)'
  )
  (shade,) = dev_ax.patches  # the last quarter: steps 6-8 of 8
  assert (shade.get_x(), shade.get_x() + shade.get_width()) == (6.0, 8.0)
  curves = [line for line in dev_ax.lines if line.get_marker() != 'o']
  dots = [line for line in dev_ax.lines if line.get_marker() == 'o']
  assert len(curves) == 5 and len(dots) == 5  # the five finished trials, not means over seeds
  by_colour = {}
  for line in curves:
    by_colour.setdefault(line.get_color(), []).append(list(line.get_ydata()))
  # One colour per variant: luong (seeds 0, 1), bahdanau (0, 1), none (0).
  assert sorted(len(v) for v in by_colour.values()) == [1, 2, 2]
  assert [0.25, 0.6, 0.5, 0.55] in by_colour[curves[3].get_color()]
  # Each dot sits at the trial's selected step (4) on its own curve.
  assert {float(d.get_xdata()[0]) for d in dots} == {4.0}
  assert sorted(float(d.get_ydata()[0]) for d in dots) == sorted([1.0, 0.75, 1.0, 0.6, 0.0])
  legend = [t.get_text() for t in dev_ax.get_legend().get_texts()]
  assert legend == ['timing=luong', 'timing=bahdanau', 'timing=none']
  assert len(loss_ax.lines) == 3  # training loss: one mean line per variant
  assert loss_ax.get_yscale() == 'log'


def test_one_run_curves_speak_of_one_run(tmp_path, monkeypatch):
  root = make_sweep(str(tmp_path))
  _, groups = sweep_results.collect(root)
  (variants,) = groups.values()
  one = dataclasses.replace(variants[0], results=variants[0].finished[:1])
  figures = []
  monkeypatch.setattr(plots, 'save_figure', lambda fig, path: figures.append(fig))
  assert plots.plot_curves(str(tmp_path / 'c.png'), [one], 'sequence_accuracy')
  loss_ax, dev_ax = figures[0].axes
  assert loss_ax.get_title() == 'training loss, log scale'
  assert dev_ax.get_title() == 'dev sequence_accuracy (dot: selected step; shaded: last quarter)'
