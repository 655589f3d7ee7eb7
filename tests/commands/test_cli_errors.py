"""A user's mistake on the command line: one `error: ...` message, exit status 2, no traceback."""

import os

import pytest
from support.smoke_runs import one_error_line, run_cli

SMOKE = '--config=configs/reverse.py:smoke'


@pytest.mark.slow
def test_bad_value_is_one_line_before_anything_is_written(tmp_path):
  line = one_error_line(run_cli(SMOKE, f'--workdir={tmp_path}/run',
                                 '--config.model.attention.score=gneral'))
  assert line == ("error: model.attention.score='gneral' is not valid; choose from concat, dot, "
                  'general, location, scaled_dot')
  assert not os.path.exists(tmp_path / 'run')


@pytest.mark.slow
def test_misspelled_config_key(tmp_path):
  line = one_error_line(run_cli(SMOKE, f'--workdir={tmp_path}', '--config.train.num_stepz=3'))
  assert line.startswith('error: --config.train.num_stepz=3: config.train.num_stepz is not a '
                         "config key ('num_stepz' is unknown)")
  assert 'Did you mean "num_steps"' in line


@pytest.mark.parametrize(('config', 'message'), [
  ('configs/nothere.py', 'error: --config=configs/nothere.py: config file configs/nothere.py not '
   'found (run from the repository root?)'),
  ('configs/reverse.py:nope', "error: --config=configs/reverse.py:nope: unknown variant "
   "'nope' of configs/reverse.py; choose from smoke, bottleneck, transformer"),
])
@pytest.mark.slow
def test_config_file_that_does_not_load(tmp_path, config, message):
  assert one_error_line(run_cli(f'--config={config}', f'--workdir={tmp_path}')) == message


@pytest.mark.slow
def test_unknown_flag(tmp_path):
  line = one_error_line(run_cli(SMOKE, f'--workdirr={tmp_path}'))
  assert "Unknown command line flag 'workdirr'" in line


@pytest.mark.slow
def test_data_input_error(tmp_path):
  missing = tmp_path / 'missing.tsv'
  line = one_error_line(run_cli(
    '--config=configs/parallel_text.py:smoke', f'--workdir={tmp_path}/run',
    f"--config.task.train_files=('{missing}',)", f"--config.task.eval_files=('{missing}',)",
    f"--config.task.test_files=('{missing}',)"))
  assert str(missing) in line


@pytest.mark.slow
def test_diverging_run_stops_with_the_step_and_fitting_advice(tmp_path):
  result = run_cli(SMOKE, f'--workdir={tmp_path}/run', '--config.optim.learning_rate=1e4',
                   '--config.optim.warmup_steps=0', '--config.optim.clip_norm=0',
                   '--config.train.num_steps=8', '--config.train.log_every=1',
                   '--config.train.checkpoint_every=2', '--config.train.eval_every=8')
  line = one_error_line(result)
  assert line.startswith('error: training diverged at step ')
  assert 'above train.divergence_factor=10 times its lowest value' in line
  assert 'set optim.clip_norm' in line and 'None' not in line
  assert not os.path.exists(tmp_path / 'run' / 'final_metrics.json')


@pytest.mark.slow
@pytest.mark.parametrize('module', ['attnlab.sweep', 'attnlab.report', 'attnlab.run_report'])
def test_other_entry_points_report_usage_errors_in_one_line(module):
  line = one_error_line(run_cli(module=module))
  assert line.startswith('error: usage: python -m ')


@pytest.mark.parametrize('module, args, message', [
  ('attnlab.report', [], 'holds no sweep.json'),
  ('attnlab.run_report', ['--out={out}'], 'is not a finished run directory'),
  ('attnlab.sweep', ['experiments/nothing.py', '--workdir={out}'], 'nothing.py'),
  # 0 is the default (one trial locally); below it nothing could run
  ('attnlab.sweep', ['experiments/heads.py', '--workdir={out}', '--parallel=-1'],
   '--parallel=-1: -1 is not a non-negative integer'),
])
def test_other_entry_points_report_user_errors_in_one_line(tmp_path, module, args, message):
  """A sweep or run directory that is not one: the same one line and exit 2 as attnlab.main."""
  args = [a.format(out=tmp_path / 'out') for a in args]
  if module != 'attnlab.sweep':
    args = [str(tmp_path), *args]
  line = one_error_line(run_cli(*args, module=module))
  assert message in line
  assert not (tmp_path / 'out').exists()


@pytest.mark.parametrize('module, usage, flag', [
  ('attnlab.sweep', 'python -m attnlab.sweep experiments/score_timing.py', '--workdir'),
  ('attnlab.report', 'python -m attnlab.report runs/score_timing', '--metric'),
  ('attnlab.run_report', 'python -m attnlab.run_report', '--command'),
])
def test_entry_point_help_shows_the_commands_usage_and_flags(module, usage, flag):
  """Each command answers --help with its usage text and its own flags."""
  result = run_cli('--help', module=module)  # absl's --help exits with status 1
  assert 'Traceback' not in result.stderr, result.stderr[-3000:]
  assert usage in result.stdout and f'\n  {flag}' in result.stdout


@pytest.mark.parametrize(('body', 'returned'), [
  ('return 5', 'int 5'),
  ("return {'train': {'num_steps': 4}}", "dict {'train': {'num_steps': 4}}"),
])
def test_a_config_file_that_returns_no_config_dict(tmp_path, body, returned):
  path = tmp_path / 'mine.py'
  path.write_text(f'def get_config():\n  {body}\n')
  line = one_error_line(run_cli(f'--config={path}', f'--workdir={tmp_path}/run'))
  assert line == (f'error: --config={path}: get_config() in {path} returned {returned}, not an '
                  'ml_collections.ConfigDict; build the config as configs/base.py does '
                  '(ml_collections.ConfigDict())')
  assert not (tmp_path / 'run').exists()


@pytest.mark.parametrize(('workdir', 'problem'), [
  ('{tmp}/file', 'it is a file, not a folder; name a folder'),
  ('{tmp}/file/run', '{tmp}/file is a file, not a folder; name a folder'),
  ('/proc/nope', 'it cannot be created or written (No such file or directory); name a folder'),
])
def test_a_workdir_that_cannot_hold_a_run(tmp_path, workdir, problem):
  (tmp_path / 'file').write_text('mine\n')
  workdir = workdir.format(tmp=tmp_path)
  line = one_error_line(run_cli(SMOKE, f'--workdir={workdir}'))
  assert line == (f'error: --workdir={workdir}: {problem.format(tmp=tmp_path)} that training '
                  'can create or write its files in')
  assert (tmp_path / 'file').read_text() == 'mine\n'
  assert os.listdir(tmp_path) == ['file']


@pytest.mark.slow
def test_an_empty_workdir_flag():
  line = one_error_line(run_cli(SMOKE, '--workdir='))
  assert line == ('error: --workdir is empty; name the folder of the run, e.g. '
                  '--workdir=runs/reverse')
