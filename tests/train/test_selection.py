"""Model selection: the direction table, the best checkpoint, patience, and resume."""

import json
import os

import jax
import numpy as np
import pytest
from support.smoke_runs import Killed, die_before_step, script_eval_metric, smoke_config

from attnlab import errors
from attnlab.config import run as config
from attnlab.rundir import checkpoint, checkpoint_params
from attnlab.train import loop as train
from attnlab.train import selection
from configs import base

# Evaluated at every step with a scripted metric: a small eval split and no heatmaps (the tests
# select checkpoints; they draw nothing).
EVERY_STEP = {'train.eval_every': 1, 'task.num_eval_examples': 16, 'eval.num_heatmaps': 0}

# The eval metric peaks at step 3 of 6 (then a lower local maximum at 6).
PEAK_AT_3 = {1: 0.1, 2: 0.5, 3: 0.9, 4: 0.3, 5: 0.2, 6: 0.4}


def test_directions_and_task_defaults():
  assert selection.resolve_metric('auto', 'cmudict_g2p') == 'wer'
  assert selection.resolve_metric('auto', 'dates') == 'sequence_accuracy'  # exact match
  assert selection.resolve_metric('auto', 'reverse') == 'sequence_accuracy'
  for task in ('parallel_text', 'wmt14_translate', 'bible'):
    assert selection.resolve_metric('auto', task) == 'bleu'
  assert selection.resolve_metric('per', 'cmudict_g2p') == 'per'
  # Lower is better for error rates and losses, higher for accuracies and BLEU.
  assert selection.is_better('wer', 0.2, 0.3) and not selection.is_better('wer', 0.3, 0.2)
  assert selection.is_better('bleu', 30.0, 29.0) and not selection.is_better('loss', 2.0, 1.0)
  # Config validation reads the same table.
  c = base.get_config()
  c.train.select_metric = 'bleu_score'
  with pytest.raises(config.ConfigError, match="train.select_metric='bleu_score' is not valid; "
                     'choose from alignment_error_rate, auto, bleu, chrf, loss'):
    config.parse(c)


def test_selection_keeps_the_earliest_best_and_counts_patience():
  s = selection.Selection('wer', patience=2)
  assert s.update(1, {'wer': 0.5, 'loss': 2.0}) and s.update(2, {'wer': 0.4, 'loss': 1.5})
  assert not s.update(3, {'wer': 0.4, 'loss': 1.5})  # an exact tie: the earlier step stays
  assert not s.patience_exhausted
  assert not s.update(4, {'wer': 0.45, 'loss': 1.0}) and s.patience_exhausted
  assert (s.best_step, s.best_value, s.evals_since_best) == (2, 0.4, 2)
  # An equal metric with a lower eval loss is better (exact match stays 0 early in training).
  assert s.update(5, {'wer': 0.4, 'loss': 1.2}) and (s.best_step, s.evals_since_best) == (5, 0)
  resumed = selection.Selection('wer', patience=2)
  resumed.restore(json.loads(json.dumps(s.to_json())))
  assert resumed == s
  with pytest.raises(config.ConfigError, match="train.select_metric='wer' is not among the eval "
                     'metrics of this task; choose from loss'):
    s.update(5, {'loss': 1.0, 'by_length': []})


def test_plateau_cuts_after_its_patience_and_stops_after_train_patience():
  # Hand-derived: cuts after 2 evaluations without improvement (counted since the best or the
  # last cut); 5 without improvement end the run, and the stopping evaluation cuts nothing.
  s = selection.Selection('wer', patience=5, plateau_patience=2)
  due = []
  for step, wer in enumerate([0.5, 0.4, 0.45, 0.46, 0.41, 0.42, 0.43], start=1):
    s.update(step, {'wer': wer, 'loss': 1.0})
    due.append(s.lr_cut_due)
    if s.lr_cut_due:
      s.lr_cut_made()
  assert due == [False, False, False, True, False, True, False]
  assert s.patience_exhausted and (s.best_step, s.evals_since_best) == (2, 5)
  again = selection.Selection('wer', patience=5, plateau_patience=2)
  again.restore(json.loads(json.dumps(s.to_json())))
  assert again == s
  # A state saved before plateau cuts existed: no cut was ever made.
  old = {k: v for k, v in s.to_json().items() if k != 'evals_since_change'}
  again.restore(old)
  assert again.evals_since_change == again.evals_since_best == 5



def test_min_improvement_stops_a_run_that_creeps_and_still_selects_its_best():
  # Hand-derived, 0.5 BLEU points a gain: 20.0 (gain) 20.3 20.4 (improvements, no gain: cuts
  # due) 20.6 (+0.6 over 20.0: a gain) 20.9 21.0 21.05 (+0.45 over 20.6 at most): 3 evaluations
  # without a gain end the run at its best, step 7, which is the checkpoint selected.
  s = selection.Selection('bleu', patience=3, plateau_patience=1, min_improvement=0.5)
  due, best = [], []
  for step, bleu in enumerate([20.0, 20.3, 20.4, 20.6, 20.9, 21.0, 21.05], start=1):
    best.append(s.update(step, {'bleu': bleu, 'loss': 1.0}))
    due.append(s.lr_cut_due)
    if s.lr_cut_due:
      s.lr_cut_made()
  assert best == [True] * 7
  assert due == [False, True, True, False, True, True, False]
  assert s.patience_exhausted and (s.best_step, s.best_value, s.gain_value) == (7, 21.05, 20.6)
  again = selection.Selection('bleu', patience=3, plateau_patience=1, min_improvement=0.5)
  again.restore(json.loads(json.dumps(s.to_json())))
  assert again == s
  # A state saved before gains were tracked: its best was its last gain.
  again.restore({k: v for k, v in s.to_json().items() if k != 'gain_value'})
  assert again.gain_value == 21.05
  # Rates count in percentage points: 0.300 -> 0.295 WER is a gain of exactly 0.5 points.
  w = selection.Selection('wer', patience=2, min_improvement=0.5)
  assert w.update(1, {'wer': 0.300}) and w.update(2, {'wer': 0.295}) and w.evals_since_best == 0
  assert w.update(3, {'wer': 0.2901}) and w.evals_since_best == 1 and w.best_step == 3
  # Without min_improvement every improvement is a gain, ties won on the loss included.
  z = selection.Selection('wer', patience=2)
  z.update(1, {'wer': 0.3, 'loss': 2.0})
  assert z.update(2, {'wer': 0.3, 'loss': 1.0}) and z.evals_since_best == 0

def _final(workdir):
  with open(os.path.join(workdir, 'final_metrics.json')) as f:
    return json.load(f)


def _params(workdir, step, which_dir=''):
  with checkpoint.Checkpointer(os.path.join(workdir, 'checkpoints'), keep=10) as ckpt:
    params, got = checkpoint_params.restore(ckpt, step if not which_dir else which_dir)
  assert got == step
  return params


def _assert_same_params(a, b):
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
    np.testing.assert_array_equal(x, y)


@pytest.mark.slow
def test_the_test_split_uses_the_peak_checkpoint(tmp_path, monkeypatch):
  tested = {}
  script_eval_metric(monkeypatch, PEAK_AT_3, tested)
  workdir = str(tmp_path / 'run')
  config = smoke_config(**{'train.num_steps': 6, 'train.checkpoint_every': 1,
                           'train.keep_checkpoints': 10, **EVERY_STEP})
  final = train.train_and_evaluate(config, workdir)
  assert list(tested) == [3]  # the test split was evaluated once, at the selected step
  _assert_same_params(tested[3], _params(workdir, 3))  # from the rolling checkpoints
  _assert_same_params(tested[3], _params(workdir, 3, 'best'))
  with pytest.raises(AssertionError):  # the last step's params differ (the test can fail)
    _assert_same_params(tested[3], _params(workdir, 6))
  saved = _final(workdir)
  assert saved['step'] == 3 and saved['trained_steps'] == 6
  assert saved['selection'] == {'split': 'eval', 'metric': 'sequence_accuracy', 'mode': 'max',
                                'best_step': 3, 'best_value': 0.9, 'patience': 0,
                                'min_improvement': 0.0, 'stopped_early': False,
                                'ended_by': 'cap'}
  assert final['eval']['sequence_accuracy'] == 0.9 == saved['eval']['sequence_accuracy']
  events = [json.loads(line) for line in open(os.path.join(workdir, 'metrics.jsonl'))]
  assert [(e['step'], e['metric']) for e in events if e['split'] == 'selection'] == [
    (3, 'sequence_accuracy')]
  assert [e['step'] for e in events if e['split'] == 'test'] == [3]
  assert os.path.exists(os.path.join(workdir, 'samples', 'test_step0000003.txt'))
  # Only the best step is kept apart from the rolling latest ones.
  assert sorted(os.listdir(os.path.join(workdir, 'checkpoints', 'best'))) == ['3']


@pytest.mark.slow
def test_patience_stops_early_and_a_rerun_does_not_continue(tmp_path, monkeypatch):
  tested = {}
  script_eval_metric(monkeypatch, {1: 0.1, 2: 0.5, 3: 0.4, 4: 0.3, 5: 0.9, 6: 1.0}, tested)
  workdir = str(tmp_path / 'run')
  config = smoke_config(**{'train.num_steps': 6, 'train.log_every': 1,
                           'train.checkpoint_every': 3, 'train.patience': 2, **EVERY_STEP})
  train.train_and_evaluate(config, workdir)
  saved = _final(workdir)
  assert (saved['step'], saved['trained_steps']) == (2, 4)
  assert saved['selection']['stopped_early'] and saved['selection']['best_step'] == 2
  events = [json.loads(line) for line in open(os.path.join(workdir, 'metrics.jsonl'))]
  assert max(e['step'] for e in events if e['split'] == 'train') == 4
  assert checkpoint.Checkpointer(os.path.join(workdir, 'checkpoints'), keep=3).all_steps() == [3, 4]
  times = [json.loads(line) for line in open(os.path.join(workdir, train.RUN_TIMES))]
  assert times[-1]['outcome'] == 'stopped early' and times[-1]['last_step'] == 4

  train.train_and_evaluate(config, workdir)  # the same command again: nothing more to train
  events = [json.loads(line) for line in open(os.path.join(workdir, 'metrics.jsonl'))]
  assert max(e['step'] for e in events if e['split'] == 'train') == 4
  assert _final(workdir)['step'] == 2 and list(tested) == [2]


@pytest.mark.slow
def test_killed_and_resumed_selects_the_same_step(tmp_path, monkeypatch):
  overrides = {'train.num_steps': 6, 'train.checkpoint_every': 2,
               'train.keep_checkpoints': 10, **EVERY_STEP}
  tested_full, tested_resumed = {}, {}
  script_eval_metric(monkeypatch, PEAK_AT_3, tested_full)
  full = str(tmp_path / 'full')
  train.train_and_evaluate(smoke_config(**overrides), full)

  resumed = str(tmp_path / 'resumed')
  die_before_step(monkeypatch, 5)  # checkpoints 2 and 4 saved; step 3 is only in best/
  with pytest.raises(KeyboardInterrupt):
    train.train_and_evaluate(smoke_config(**overrides), resumed)
  monkeypatch.undo()
  script_eval_metric(monkeypatch, PEAK_AT_3, tested_resumed)
  train.train_and_evaluate(smoke_config(**overrides), resumed)  # evaluates 5 (0.2), 6 (0.4)

  assert _final(resumed)['step'] == _final(full)['step'] == 3
  assert list(tested_resumed) == list(tested_full) == [3]
  _assert_same_params(tested_resumed[3], tested_full[3])
  _assert_same_params(_params(resumed, 3, 'best'), _params(full, 3, 'best'))


@pytest.mark.slow
def test_plateau_cuts_the_learning_rate_and_a_resumed_run_keeps_the_cut(tmp_path, monkeypatch):
  # experiments/sizes.py's PLATEAU: accuracy peaks at step 2, each evaluation without
  # improvement halves the learning rate (after steps 3 and 4) and the third one (step 5)
  # stops the run.
  values = {1: 0.1, 2: 0.5, 3: 0.4, 4: 0.3, 5: 0.2, 6: 0.9}
  overrides = {'train.num_steps': 6, 'train.log_every': 1,
               'train.checkpoint_every': 1, 'train.keep_checkpoints': 10, 'train.patience': 3,
               'optim.schedule': 'plateau', 'optim.plateau_patience': 1,
               'optim.warmup_steps': 0, **EVERY_STEP}
  peak = smoke_config(**overrides).optim.learning_rate

  def learning_rates(workdir):
    events = [json.loads(line) for line in open(os.path.join(workdir, 'metrics.jsonl'))]
    return {e['step']: e['learning_rate'] for e in events if e['split'] == 'train'}

  script_eval_metric(monkeypatch, values, {})
  full = str(tmp_path / 'full')
  train.train_and_evaluate(smoke_config(**overrides), full)
  want = {1: 1, 2: 1, 3: 1, 4: 0.5, 5: 0.25}
  assert learning_rates(full) == pytest.approx({s: peak * f for s, f in want.items()})
  saved = _final(full)
  assert saved['trained_steps'] == 5 and saved['step'] == 2 and saved['selection']['stopped_early']

  resumed = str(tmp_path / 'resumed')
  die_before_step(monkeypatch, 5)  # checkpoint 4 holds both cuts
  with pytest.raises(KeyboardInterrupt):
    train.train_and_evaluate(smoke_config(**overrides), resumed)
  monkeypatch.undo()
  script_eval_metric(monkeypatch, values, {})
  train.train_and_evaluate(smoke_config(**overrides), resumed)
  assert learning_rates(resumed) == learning_rates(full)
  _assert_same_params(_params(resumed, 5), _params(full, 5))


@pytest.mark.slow
def test_a_cut_below_the_plateau_floor_ends_the_run_and_a_lower_floor_lets_it_go_on(
    tmp_path, monkeypatch):
  # No train.patience: cuts after steps 3 (x0.5) and 4 (x0.25); at step 5 the next cut
  # (x0.125) would fall below plateau_min_scale 0.25, so the run stops there, also when the
  # same command runs again. Resumed under floor 0.125 it makes that cut first (x0.125 from
  # step 6), gains at step 6 and stops at step 7, where x0.0625 would fall below the new floor:
  # the learning rates and parameters of a run under floor 0.125 from the start.
  values = {1: 0.1, 2: 0.5, 3: 0.4, 4: 0.3, 5: 0.2, 6: 0.9, 7: 0.8, 8: 0.9}
  overrides = {'train.num_steps': 8, 'train.log_every': 1,
               'train.checkpoint_every': 1, 'train.keep_checkpoints': 10, 'train.patience': 0,
               'optim.schedule': 'plateau', 'optim.plateau_patience': 1,
               'optim.plateau_min_scale': 0.25, 'optim.warmup_steps': 0, **EVERY_STEP}
  lower = {**overrides, 'optim.plateau_min_scale': 0.125}
  peak = smoke_config(**overrides).optim.learning_rate

  def learning_rates(workdir):
    events = [json.loads(line) for line in open(os.path.join(workdir, 'metrics.jsonl'))]
    return [e['learning_rate'] / peak for e in events if e['split'] == 'train']

  script_eval_metric(monkeypatch, values, {})
  workdir = str(tmp_path / 'run')
  train.train_and_evaluate(smoke_config(**overrides), workdir)
  saved = _final(workdir)
  assert saved['trained_steps'] == 5 and saved['step'] == 2 and saved['selection']['stopped_early']
  assert learning_rates(workdir) == pytest.approx([1, 1, 1, 0.5, 0.25])
  train.train_and_evaluate(smoke_config(**overrides), workdir)  # the same command again
  assert _final(workdir)['trained_steps'] == 5 and len(learning_rates(workdir)) == 5

  with pytest.raises(errors.UserError, match='optim.plateau_min_scale'):
    train.train_and_evaluate(smoke_config(**lower), workdir)  # a changed config is refused
  train.train_and_evaluate(smoke_config(**lower), workdir,
                           allow_config_change=('optim.plateau_min_scale',))
  full = str(tmp_path / 'full')
  train.train_and_evaluate(smoke_config(**lower), full)
  assert learning_rates(full) == pytest.approx([1, 1, 1, .5, .25, .125, .125])
  assert learning_rates(workdir) == learning_rates(full)
  assert _final(workdir)['trained_steps'] == _final(full)['trained_steps'] == 7
  assert _final(workdir)['step'] == _final(full)['step'] == 6
  _assert_same_params(_params(workdir, 7), _params(full, 7))


@pytest.mark.slow
def test_a_run_killed_before_its_first_checkpoint_starts_again_cleanly(tmp_path, monkeypatch):
  # eval every step, checkpoints only at the end: the killed attempt leaves best/1 and best/2
  # (pruned only by a latest save) and no latest step, so the rerun starts from step 0 and
  # must not trip over those best steps.
  overrides = {'train.num_steps': 4, 'train.log_every': 1,
               'train.checkpoint_every': 100, **EVERY_STEP}
  values = {1: 0.1, 2: 0.5, 3: 0.4, 4: 0.3}
  workdir = str(tmp_path / 'run')
  script_eval_metric(monkeypatch, values, {})
  die_before_step(monkeypatch, 3, killed=True)
  with pytest.raises(Killed):
    train.train_and_evaluate(smoke_config(**overrides), workdir)
  assert sorted(os.listdir(os.path.join(workdir, 'checkpoints', 'best'))) == ['1', '2']
  monkeypatch.undo()
  tested = {}
  script_eval_metric(monkeypatch, values, tested)
  train.train_and_evaluate(smoke_config(**overrides), workdir)
  assert _final(workdir)['step'] == 2 and list(tested) == [2]
  times = [json.loads(line) for line in open(os.path.join(workdir, train.RUN_TIMES))]
  # The simulated kill still reaches the run's `finally`, which records it; a real one leaves
  # run_time_current.json for the next start to record as 'killed'.
  assert [t['outcome'] for t in times] == ['failed: Killed', 'finished']
  assert times[-1]['first_step'] == 0


@pytest.mark.slow
def test_holding_the_rate_at_the_floor_leaves_the_stop_to_patience(tmp_path, monkeypatch):
  # Cuts after steps 3 (x0.5) and 4 (x0.25 = the floor); the cut due at step 5 is not made:
  # the rate stays at x0.25, the eval metric improves again at step 6 (which a stop at the
  # floor would have missed), and train.patience=4 ends the run after steps 7-10.
  # A run stopped at the floor under plateau_at_floor=stop and resumed under hold trains the
  # same learning rates and parameters.
  values = {1: 0.1, 2: 0.5, 3: 0.4, 4: 0.3, 5: 0.2, 6: 0.9, 7: 0.8, 8: 0.7, 9: 0.6, 10: 0.5,
            11: 1.0, 12: 1.0}
  overrides = {'train.num_steps': 12, 'train.log_every': 1,
               'train.checkpoint_every': 1, 'train.keep_checkpoints': 14, 'train.patience': 4,
               'optim.schedule': 'plateau', 'optim.plateau_patience': 1,
               'optim.plateau_min_scale': 0.25, 'optim.warmup_steps': 0, **EVERY_STEP}
  hold = {**overrides, 'optim.plateau_at_floor': 'hold'}
  peak = smoke_config(**overrides).optim.learning_rate

  def learning_rates(workdir):
    events = [json.loads(line) for line in open(os.path.join(workdir, 'metrics.jsonl'))]
    return [e['learning_rate'] / peak for e in events if e['split'] == 'train']

  script_eval_metric(monkeypatch, values, {})
  held = str(tmp_path / 'hold')
  train.train_and_evaluate(smoke_config(**hold), held)
  assert learning_rates(held) == pytest.approx([1, 1, 1, .5, .25, .25, .25, .25, .25, .25])
  final = _final(held)
  assert final['trained_steps'] == 10 and final['step'] == 6
  assert final['selection']['stopped_early'] and final['selection']['ended_by'] == 'patience'

  stopped = str(tmp_path / 'stop')
  train.train_and_evaluate(smoke_config(**overrides), stopped)
  assert _final(stopped)['trained_steps'] == 5 and _final(stopped)['step'] == 2
  assert _final(stopped)['selection']['ended_by'] == 'floor'
  train.train_and_evaluate(smoke_config(**hold), stopped,
                           allow_config_change=('optim.plateau_at_floor',))
  assert learning_rates(stopped) == learning_rates(held)
  assert _final(stopped)['trained_steps'] == 10 and _final(stopped)['step'] == 6
  _assert_same_params(_params(stopped, 10), _params(held, 10))
