"""The training system end to end: resume, the divergence guard, logged values, the console."""

import glob
import json
import math
import os
import re
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from support.smoke_runs import Killed, die_before_step, run_cli, smoke_config

from attnlab.config import run as config
from attnlab.rundir import checkpoint, console, layout, run_times
from attnlab.runtime import machine
from attnlab.train import divergence, steps
from attnlab.train import loop as train
from attnlab.train import start as train_start
from attnlab.train.evaluation import Evaluator

LIBRARY_LOG_LINE = re.compile(r'^[IWEF]\d{4} \d\d:\d\d:\d\d', re.MULTILINE)  # absl's prefix


def restored_params(workdir, config):
  run, state, _, _ = train_start.setup(config, workdir)
  run.ckpt.close()
  return state.params


def _events(workdir):
  return [json.loads(line) for line in open(os.path.join(workdir, 'metrics.jsonl'))]


@pytest.mark.slow
def test_interrupted_run_resumes_to_the_same_result(tmp_path, monkeypatch):
  config = smoke_config(**{'train.num_steps': 6, 'train.checkpoint_every': 2,
                           'train.log_every': 1, 'train.eval_every': 6})
  full = train.train_and_evaluate(config, str(tmp_path / 'full'))

  die_before_step(monkeypatch, 4)
  workdir = str(tmp_path / 'interrupted')
  cpu_before = time.process_time()
  with pytest.raises(KeyboardInterrupt):
    train.train_and_evaluate(config, workdir)
  # The interrupted attempt saved the last step it finished, and records its wall time.
  assert checkpoint.Checkpointer(os.path.join(workdir, 'checkpoints'), keep=3).latest_step() == 3
  (killed,) = [json.loads(line) for line in open(os.path.join(workdir, train.RUN_TIMES))]
  assert (killed['first_step'], killed['last_step'], killed['outcome']) == (0, 3, 'interrupted')
  assert killed['wall_s'] > 0
  # Its CPU time too, counted from the run's start (not from the test process's).
  assert 0 < killed['cpu_s'] < time.process_time() - cpu_before
  monkeypatch.undo()
  resumed = train.train_and_evaluate(config, workdir)  # the same command again

  for split in ('eval', 'test'):
    for key in ('loss', 'token_accuracy', 'sequence_accuracy'):
      np.testing.assert_allclose(resumed[split][key], full[split][key], rtol=1e-6)
  a = restored_params(str(tmp_path / 'full'), config)
  b = restored_params(workdir, config)
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
    np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)
  events = _events(workdir)
  assert max(e['step'] for e in events if e['split'] == 'train') == 6
  assert {e['split'] for e in events} == {'train', 'eval', 'test', 'selection'}
  times = [json.loads(line) for line in open(os.path.join(workdir, train.RUN_TIMES))]
  assert [(t['first_step'], t['last_step'], t['outcome']) for t in times] == [
    (0, 3, 'interrupted'), (3, 6, 'finished')]
  # Each process run names its machine: times from different machines are not comparable.
  assert [t['machine'] for t in times] == [machine.machine_name()] * 2


def test_a_killed_process_keeps_its_wall_time(tmp_path, monkeypatch):
  """SIGKILL or a machine that goes away runs no `finally`: the run-time line the process
  kept current on disk is appended as 'killed' when the run is started again."""
  config = smoke_config(**{'train.num_steps': 6, 'train.checkpoint_every': 2,
                           'train.log_every': 1, 'train.eval_every': 6})
  workdir = str(tmp_path / 'run')
  die_before_step(monkeypatch, 4, killed=True)
  monkeypatch.setattr(run_times.RunTimeRecord, 'close', lambda self, step, outcome: None)
  with pytest.raises(Killed):
    train.train_and_evaluate(config, workdir)
  assert not os.path.exists(os.path.join(workdir, train.RUN_TIMES))
  with open(os.path.join(workdir, layout.RUN_IN_PROGRESS)) as f:
    left = json.load(f)
  # Step 3's log line is fetched only after step 4 is dispatched, which the kill prevented.
  assert (left['first_step'], left['last_step'], left['outcome']) == (0, 2, 'killed')
  assert left['wall_s'] > 0
  monkeypatch.undo()
  train.train_and_evaluate(config, workdir)
  times = [json.loads(line) for line in open(os.path.join(workdir, train.RUN_TIMES))]
  assert times[0] == left
  assert [(t['first_step'], t['last_step'], t['outcome']) for t in times] == [
    (0, 2, 'killed'), (2, 6, 'finished')]
  assert not os.path.exists(os.path.join(workdir, layout.RUN_IN_PROGRESS))


@pytest.mark.slow
def test_logged_learning_rate_is_the_one_the_update_used(tmp_path):
  """optax evaluates the schedule at the number of updates applied before this one, so the
  update that makes step k uses lr(k - 1): linear warmup over 4 steps to 1e-3 gives
  0, 2.5e-4, 5e-4, 7.5e-4 for steps 1-4."""
  config = smoke_config(**{'train.log_every': 1, 'optim.schedule': 'constant',
                           'optim.warmup_steps': 4, 'optim.learning_rate': 1e-3})
  workdir = str(tmp_path / 'run')
  train.train_and_evaluate(config, workdir)
  logged = [e['learning_rate'] for e in _events(workdir) if e['split'] == 'train']
  assert logged == pytest.approx([0.0, 2.5e-4, 5e-4, 7.5e-4], rel=1e-6)


def _poison_loss(monkeypatch, from_update: int, make_bad):
  """Training steps from the `from_update`-th update (0-based) on report make_bad(loss_sum)."""
  real_step = steps.train_step

  def poisoned(state, batch, key, *, axis_name, label_smoothing=0.0):
    new_state, sums = real_step(state, batch, key, axis_name=axis_name,
                                label_smoothing=label_smoothing)
    bad = state.step >= from_update
    return new_state, dict(sums, loss_sum=jnp.where(bad, make_bad(sums['loss_sum']),
                                                    sums['loss_sum']))

  monkeypatch.setattr(steps, 'train_step', poisoned)


@pytest.mark.slow
def test_non_finite_loss_stops_and_keeps_last_good_checkpoint(tmp_path, monkeypatch):
  _poison_loss(monkeypatch, 3, lambda loss: jnp.nan * loss)  # the 4th update onwards
  config = smoke_config(**{'train.num_steps': 8, 'train.checkpoint_every': 2,
                           'train.log_every': 1, 'train.eval_every': 8})
  workdir = str(tmp_path / 'nan')
  with pytest.raises(train.NonFiniteLossError,
                     match=r'training diverged at step 4: non-finite training loss \(nan\); the '
                           r'last good checkpoint \(step 2\)'):
    train.train_and_evaluate(config, workdir)
  assert checkpoint.Checkpointer(os.path.join(workdir, 'checkpoints'), keep=3).latest_step() == 2


@pytest.mark.slow
def test_a_runaway_finite_loss_stops_the_run(tmp_path, monkeypatch):
  _poison_loss(monkeypatch, 2, lambda loss: loss * 1e6)  # finite, e.g. 3e6 from step 3
  config = smoke_config(**{'train.num_steps': 8, 'train.checkpoint_every': 2,
                           'train.log_every': 1, 'train.eval_every': 8})
  workdir = str(tmp_path / 'run')
  with pytest.raises(divergence.DivergenceError) as stopped:
    train.train_and_evaluate(config, workdir)
  message = str(stopped.value)
  assert re.match(r'training diverged at step 3: training loss 3\.\d+e\+06 is above '
                  r'train\.divergence_factor=10 times its lowest value so far \(3\.\d+', message)
  assert 'the last good checkpoint (step 2)' in message
  # Clipping is on in this config: the advice says so instead of suggesting it.
  assert 'gradient clipping is on (optim.clip_norm=1)' in message
  assert 'set optim.clip_norm' not in message
  assert checkpoint.Checkpointer(os.path.join(workdir, 'checkpoints'), keep=3).latest_step() == 2


@pytest.mark.slow
def test_non_finite_eval_metric_stops_before_the_step_is_saved(tmp_path, monkeypatch):
  real = Evaluator.evaluate

  def exploding(self, params, split, step):
    result = real(self, params, split, step)
    return dict(result, perplexity=math.inf) if step == 4 else result

  monkeypatch.setattr(Evaluator, 'evaluate', exploding)
  config = smoke_config(**{'train.num_steps': 6, 'train.checkpoint_every': 2,
                           'train.eval_every': 2, 'task.num_eval_examples': 16})
  workdir = str(tmp_path / 'run')
  with pytest.raises(divergence.DivergenceError,
                     match=r'training diverged at step 4: eval perplexity is inf; the last good '
                           r'checkpoint \(step 2\)'):
    train.train_and_evaluate(config, workdir)
  assert checkpoint.Checkpointer(os.path.join(workdir, 'checkpoints'), keep=3).latest_step() == 2
  assert [e['perplexity'] for e in _events(workdir) if e['split'] == 'eval'][-1] == math.inf


@pytest.mark.slow
def test_divergence_before_the_first_checkpoint_names_no_step(tmp_path, monkeypatch):
  _poison_loss(monkeypatch, 0, lambda loss: jnp.inf * loss)
  config = smoke_config(**{'train.checkpoint_every': 2, 'train.log_every': 1,
                           'optim.clip_norm': 0.0})
  with pytest.raises(train.NonFiniteLossError) as stopped:
    train.train_and_evaluate(config, str(tmp_path / 'run'))
  message = str(stopped.value)
  assert 'at step 1:' in message and 'None' not in message
  assert 'no checkpoint was saved before it (the first is due at step 2)' in message
  assert 'set optim.clip_norm (e.g. 1.0; now 0 = off)' in message


def test_loss_guard_threshold():
  guard = divergence.LossGuard(10.0)
  assert guard.problem(3.0) is None and guard.problem(0.5) is None
  assert guard.lowest == 0.5
  assert guard.problem(9.9) is None  # the lowest is floored at 1 nat: threshold 10
  assert 'above train.divergence_factor=10' in guard.problem(10.5)
  assert divergence.LossGuard(0.0).problem(1e30) is None  # off
  assert 'non-finite' in divergence.LossGuard(0.0).problem(math.nan)


def test_validation_rejects_a_divergence_factor_that_always_fires():
  c = smoke_config(**{'train.divergence_factor': 0.5})
  with pytest.raises(config.ConfigError, match='train.divergence_factor=0.5 must be 0 '):
    config.parse(c)


def test_warmup_longer_than_the_run_is_a_warning(tmp_path, caplog):
  cfg = config.parse(smoke_config(**{'optim.warmup_steps': 1000, 'train.num_steps': 4}))
  (warning,) = train_start.config_warnings(cfg)
  # At the last update the learning rate is 0.003 * 3 / 1000.
  assert warning == ('optim.warmup_steps=1000 >= train.num_steps=4: the learning rate never '
                     'reaches optim.learning_rate=0.003 (at most 9e-06); shorten the warmup')
  assert train_start.config_warnings(config.parse(smoke_config(**{'optim.warmup_steps': 3}))) == []
  run, *_ = train_start.setup(smoke_config(**{'optim.warmup_steps': 1000}), str(tmp_path))
  run.ckpt.close()
  assert warning in caplog.text


def test_start_summary_names_the_regularisation():
  def first_two_lines(**overrides):
    cfg = config.parse(smoke_config(**overrides))
    lines = console.start_summary(cfg, num_params=1234, num_devices=2, workdir='w', log='w/l',
                                  selection=None, start_step=0, filtered=0)
    return lines[:2]

  plain, plan = first_two_lines(**{'model.dropout': 0.0, 'train.label_smoothing': 0.0})
  assert plain.endswith(', no dropout; 1,234 parameters on 2 device(s)'), plain
  smoothed, _ = first_two_lines(**{'model.dropout': 0.3, 'train.label_smoothing': 0.1})
  assert ', dropout 0.3, label smoothing 0.1; 1,234 parameters' in smoothed, smoothed
  assert 'no model selection' in plan


@pytest.mark.slow
def test_cli_console_is_quiet_and_a_bad_checkpoint_is_one_warning(tmp_path):
  workdir = str(tmp_path / 'cli')
  first = run_cli('--config=configs/reverse.py:smoke', f'--workdir={workdir}')
  assert first.returncode == 0, first.stderr[-3000:]
  for name in ('config.json', 'metrics.jsonl', 'final_metrics.json', 'source_vocab.json',
               'checkpoints', 'samples', 'attention', 'tensorboard', 'train.log'):
    assert os.path.exists(os.path.join(workdir, name)), name
  assert any(f.endswith('.png') for f in os.listdir(os.path.join(workdir, 'attention')))
  # No library INFO line on the console; they are all in the log file.
  console = first.stdout + first.stderr
  assert not [line for line in LIBRARY_LOG_LINE.findall(console) if line.startswith('I')]
  log = open(os.path.join(workdir, 'train.log')).read()
  assert len(re.findall(r'^I\d{4} .*(checkpoint_manager|atomicity)\.py', log, re.M)) > 10
  assert 'process 0 of 1; 2 local devices' in log  # logged before the workdir was known
  # The summaries: the run, the test metrics of the selected step, where the files are.
  assert 'reverse: rnn lstm 1+1 layers' in first.stdout
  assert 'test @ step 4 (selected on eval sequence_accuracy: best 0 at step 4)' in first.stdout
  assert f'files in {workdir}: final_metrics.json' in first.stdout

  # Damage the newest checkpoint's arrays: the rerun falls back with one clear warning.
  for path in glob.glob(os.path.join(workdir, 'checkpoints', '4', 'state', '**', 'd', '*'),
                        recursive=True):
    with open(path, 'wb') as f:
      f.write(b'\0garbage')
  second = run_cli('--config=configs/reverse.py:smoke', f'--workdir={workdir}')
  assert second.returncode == 0, second.stderr[-3000:]
  assert 'resumed from step 2' in second.stdout
  assert 'Traceback' not in second.stderr and 'never retrieved' not in second.stderr
  warnings = [line for line in second.stderr.splitlines() if line.startswith('W')]
  (fallback,) = [line for line in warnings if 'checkpoint step 4' in line]
  assert re.search(r'checkpoint step 4 in \S+ is unreadable \(\w+: .{10,}\); moved to '
                   r'\S+/4\.unreadable; using step 2 instead \(details in the log file\)$',
                   fallback), fallback
  assert 'reading checkpoint step 4' in open(os.path.join(workdir, 'train.log')).read()

  # absl's --verbosity brings the library logs back to the console.
  third = run_cli('--config=configs/reverse.py:smoke', f'--workdir={workdir}', '--verbosity=0')
  assert third.returncode == 0, third.stderr[-3000:]
  assert len([x for x in LIBRARY_LOG_LINE.findall(third.stderr) if x.startswith('I')]) > 5
