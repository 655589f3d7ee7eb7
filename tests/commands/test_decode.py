"""`python -m attnlab.decode`: a tiny trained run answers new inputs on the command line.

The session's tiny runs (conftest.py: reverse:smoke, 4 steps, an RNN and a Transformer). The
checks: decoding the eval sources reproduces the run's own predictions_eval.jsonl, each bad
input, flag, output path or damaged run gets its documented behaviour, the output file is
replaced only when complete, a terminal session is answered line by line, and every task family
decodes through the CLI.
"""

import io
import json
import os
import re
import select
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
from support import REPO
from support.smoke_runs import copy_run, predictions

import attnlab
from attnlab import decode
from attnlab.decoding import inference, runs
from attnlab.train import loop as train
from configs import reverse

ENV = {**os.environ, 'XLA_FLAGS': '--xla_force_host_platform_device_count=1'}


@pytest.fixture(scope='module')
def rnn_run(tiny_reverse_run):
  return tiny_reverse_run  # conftest.py: reverse:smoke, 4 steps, sources of 3-6 symbols


@pytest.fixture(scope='module')
def transformer_run(tiny_transformer_run):
  return tiny_transformer_run  # conftest.py: the same with a 2-layer, 2-head Transformer


def _cli(*args, stdin='', timeout=120):
  return subprocess.run([sys.executable, '-m', 'attnlab.decode', *args], cwd=REPO, input=stdin,
                        capture_output=True, text=True, timeout=timeout, env=ENV)


def _main(args, capsys):
  code = decode.main(list(args))
  out, err = capsys.readouterr()
  return code, out, err


@pytest.mark.slow
@pytest.mark.parametrize('kind', ['rnn', 'transformer'])
def test_cli_decoding_of_eval_inputs_reproduces_the_runs_predictions(kind, request, tmp_path):
  workdir = request.getfixturevalue(f'{kind}_run')
  rows = predictions(workdir)
  inputs = tmp_path / 'inputs.txt'
  inputs.write_text(''.join(r['source'] + '\n' for r in rows), encoding='utf-8')
  result = _cli(f'--workdir={workdir}', f'--input={inputs}')
  assert result.returncode == 0, result.stderr[-2000:]
  assert result.stdout.split('\n')[:-1] == [r['hypothesis'] for r in rows]


@pytest.mark.slow
def test_bad_inputs_keep_alignment_and_are_reported(rnn_run, tmp_path, capsys):
  lines = [b'abc', b'', b'ab?c!', b'a' * 30, b'\xff\xfeab', b'  bad  ']
  inputs = tmp_path / 'in.txt'
  inputs.write_bytes(b'\n'.join(lines) + b'\n')
  out_path = tmp_path / 'out.txt'
  code, _, err = _main([f'--workdir={rnn_run}', f'--input={inputs}', f'--output={out_path}'],
                       capsys)
  assert code == 0, err
  outputs = out_path.read_text(encoding='utf-8').split('\n')[:-1]
  assert len(outputs) == len(lines)
  assert outputs[1] == '' and outputs[3] == '' and outputs[4] == ''
  assert outputs[0] and outputs[2] and outputs[5]
  assert 'line 4: not decoded: 31 tokens (EOS included) exceed the limit of 24' in err
  assert 'line 5: not decoded: bytes' in err and 'not valid UTF-8' in err
  assert err.count('read as <unk>') == 1  # one warning for the whole file
  assert "2 input symbols in 1 lines are not in the source vocabulary" in err
  assert "'?'" in err and "'!'" in err
  # The limit is documented and can be lifted: the long line is decoded then.
  code, out, err = _main([f'--workdir={rnn_run}', '--max_input_length=0', '--format=jsonl',
                          f'--input={inputs}'], capsys)
  records = [json.loads(line) for line in out.splitlines()]
  assert [r['index'] for r in records] == list(range(6))
  assert records[3]['error'] is None and records[3]['output']
  assert records[2]['unknown'] == ['?', '!'] and records[4]['error'].startswith('bytes')
  assert records[5]['input'] == '  bad  ' and records[5]['source_tokens'][:3] == ['b', 'a', 'd']


def test_workdir_without_config_or_checkpoint_is_one_line_error(rnn_run, tmp_path, capsys):
  cases = {str(tmp_path / 'missing'): 'does not exist', str(tmp_path): 'has no config.json'}
  empty = tmp_path / 'no_ckpt'
  empty.mkdir()
  for name in ('config.json', 'source_vocab.json', 'target_vocab.json'):
    (empty / name).write_bytes(open(os.path.join(rnn_run, name), 'rb').read())
  cases[str(empty)] = 'has no checkpoint'
  for workdir, message in cases.items():
    code, out, err = _main([f'--workdir={workdir}'], capsys)
    assert code == 2 and out == ''
    assert err.startswith('error: ') and message in err and err.count('\n') == 1, err
  code, _, err = _main([f'--workdir={rnn_run}', '--checkpoint=3'], capsys)
  assert code == 2 and err.startswith('error: ') and "'3'" in err and '2, 4' in err, err


def test_output_is_never_the_input_and_is_replaced_only_when_complete(rnn_run, tmp_path, capsys,
                                                                      monkeypatch):
  inputs = tmp_path / 'in.txt'
  inputs.write_bytes(b'abc\nabcd\n')
  (tmp_path / 'link.txt').symlink_to('in.txt')
  monkeypatch.chdir(tmp_path)
  for output in ('in.txt', './in.txt', str(inputs), 'link.txt'):
    code, out, err = _main([f'--workdir={rnn_run}', '--input=in.txt', f'--output={output}'],
                           capsys)
    assert (code, out, err) == (2, '', f'error: --output={output} is the --input file: decoding '
                                        'would overwrite the inputs; choose another --output\n')
    assert inputs.read_bytes() == b'abc\nabcd\n'
  # Interrupted after the first line was written: the existing output is untouched.
  (tmp_path / 'out.txt').write_bytes(b'mine\n')
  write = decode.Writer.write

  def interrupted(writer, result):
    write(writer, result)
    raise KeyboardInterrupt

  monkeypatch.setattr(decode.Writer, 'write', interrupted)
  with pytest.raises(KeyboardInterrupt):
    decode.main([f'--workdir={rnn_run}', '--input=in.txt', '--output=out.txt'])
  assert (tmp_path / 'out.txt').read_bytes() == b'mine\n'
  assert sorted(os.listdir(tmp_path)) == ['in.txt', 'link.txt', 'out.txt'], 'no temporary file'
  # Complete: replaced as a whole, through a symbolic link that stays one.
  monkeypatch.setattr(decode.Writer, 'write', write)
  (tmp_path / 'out_link.txt').symlink_to('out.txt')
  code, _, err = _main([f'--workdir={rnn_run}', '--input=in.txt', '--output=out_link.txt'],
                       capsys)
  assert code == 0, err
  assert (tmp_path / 'out_link.txt').is_symlink()
  expected = [r.output for r in attnlab.load_run(rnn_run).decode(['abc', 'abcd'])]
  assert (tmp_path / 'out.txt').read_text().split('\n') == [*expected, '']


def test_bad_output_paths_and_flag_values_are_refused_before_the_run_is_read(tmp_path, capsys,
                                                                             monkeypatch):
  def load_run(*args):
    raise AssertionError('the run was read before the flags were checked')

  monkeypatch.setattr(runs, 'load_run', load_run)
  inputs, a_file = tmp_path / 'in.txt', tmp_path / 'a_file'
  inputs.write_text('abc\n')
  a_file.write_text('mine\n')
  cases = {
      f'--output={tmp_path}': f'--output={tmp_path} is a folder; name a file in it',
      f'--output={tmp_path}/missing/out.txt':
          f'--output={tmp_path}/missing/out.txt: folder {tmp_path}/missing does not exist',
      f'--attention_dir={a_file}': f'--attention_dir={a_file}: {a_file} is a file, not a folder',
      f'--attention_dir={a_file}/maps':
          f'--attention_dir={a_file}/maps: {a_file} is a file, not a folder',
      '--nbest=0': '--nbest=0 must be at least 1 (hypotheses per input)',
      '--length_penalty=nan': '--length_penalty=nan must be a finite number (GNMT alpha, e.g. 0.6)',
      '--length_penalty=-inf':
          '--length_penalty=-inf must be a finite number (GNMT alpha, e.g. 0.6)',
  }
  for flag, message in cases.items():
    code, out, err = _main(['--workdir=RUN', f'--input={inputs}', flag], capsys)
    assert (code, out, err) == (2, '', f'error: {message}\n'), flag
  assert sorted(os.listdir(tmp_path)) == ['a_file', 'in.txt'] and a_file.read_text() == 'mine\n'


@pytest.mark.slow
def test_damaged_checkpoint_is_one_line_naming_the_file_and_the_readable_ones(rnn_run, tmp_path):
  run = copy_run(rnn_run, tmp_path)
  manifest = run / 'checkpoints' / 'best' / '4' / 'state' / 'manifest.ocdbt'
  manifest.write_bytes(manifest.read_bytes()[:20])  # truncated
  result = _cli(f'--workdir={run}', stdin='abc\n')
  assert (result.returncode, result.stdout) == (2, '')
  # The whole stderr: orbax's own log lines and its abandoned reads' errors are not shown.
  assert re.fullmatch(
      rf'error: checkpoint {run}/checkpoints/best/4 cannot be read: state/manifest\.ocdbt is '
      r'damaged \(Error decoding manifest: Length in header \(\d+\) does not match actual length '
      r'\(20\); at byte 12\); these read: --checkpoint=4, --checkpoint=2\n', result.stderr), (
      result.stderr[-3000:])
  # Orbax's record of the save damaged, the parameters intact: decoded, with one note.
  shutil.copy(os.path.join(rnn_run, 'checkpoints', 'best', '4', 'state', 'manifest.ocdbt'),
              manifest)
  (run / 'checkpoints' / 'best' / '4' / '_CHECKPOINT_METADATA').write_text('garbage')
  result = _cli(f'--workdir={run}', stdin='abc\n')
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stderr == (f'note: {run}/checkpoints/best/4/_CHECKPOINT_METADATA is not JSON '
                           "(orbax's record of the save; the parameters read without it)\n")
  assert result.stdout == attnlab.load_run(rnn_run).decode(['abc'])[0].output + '\n'


def test_damaged_vocabulary_or_foreign_checkpoint_is_one_line(rnn_run, tmp_path, capsys):
  run = copy_run(rnn_run, tmp_path)
  vocab = run / 'target_vocab.json'
  good = vocab.read_bytes()
  why = {}
  for name, content in (('truncated', good[:30]), ('not_an_object', b'[]'),
                        ('duplicates', b'{"mode": "char", "symbols": ["a", "a"]}')):
    vocab.write_bytes(content)
    code, out, err = _main([f'--workdir={run}'], capsys)
    assert (code, out) == (2, ''), name
    assert err.startswith(f'error: vocabulary file {vocab} ') and err.count('\n') == 1, err
    assert err.endswith("; it is the run's tokenizer: restore it from a copy of the run\n"), err
    why[name] = err.split(f'{vocab} ', 1)[1].split(';')[0]
  with pytest.raises(json.JSONDecodeError) as bad_json:
    json.loads(good[:30])
  assert why['truncated'] == f'is not valid JSON ({bad_json.value})'
  assert why['not_an_object'] == "is not one attnlab wrote: no 'mode' key in a JSON object (it " \
                                 "holds list '[]')"
  assert why['duplicates'] == "is damaged: duplicate symbols: ['a']"
  # config.json of another model than the checkpoints (two trainings in one workdir).
  vocab.write_bytes(good)
  config = json.loads((run / 'config.json').read_text())
  config['model']['hidden_size'] *= 2
  (run / 'config.json').write_text(json.dumps(config))
  code, out, err = _main([f'--workdir={run}'], capsys)
  assert (code, out) == (2, '') and err.count('\n') == 1, err
  assert err.startswith(f'error: checkpoint step 4 in {run}/checkpoints: parameter ') and (
      'but the model of config.json needs' in err), err


def test_a_run_older_than_a_config_key_reads_with_its_default(rnn_run, tmp_path, capsys):
  import shutil

  old = tmp_path / 'old'
  shutil.copytree(rnn_run, old)
  config = json.loads((old / 'config.json').read_text())
  del config['eval']['num_samples']  # as if attnlab gained eval.num_samples after this run
  del config['train']['min_improvement']  # a training-only key: no note
  (old / 'config.json').write_text(json.dumps(config))
  run = runs.load_run(str(old))
  assert run.cfg.eval.num_samples == reverse.get_config().eval.num_samples
  assert run.cfg.train.min_improvement == 0.0
  assert run.note.endswith('config.json predates eval.num_samples: using their defaults from '
                           'configs/base.py')
  config['eval']['retired_key'] = 1  # a key this attnlab does not know: cannot be read
  (old / 'config.json').write_text(json.dumps(config))
  code, _, err = _main([f'--workdir={old}'], capsys)
  assert code == 2 and 'unknown config key eval.retired_key' in err and err.count('\n') == 1


@pytest.mark.slow
def test_interactive_session_answers_each_line_as_it_is_entered(rnn_run):
  proc = subprocess.Popen(
      [sys.executable, '-m', 'attnlab.decode', f'--workdir={rnn_run}', '--interactive'],
      cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
      text=True, env=ENV)
  try:
    answers = []
    for line in ('abc', 'abcdefg'):
      proc.stdin.write(line + '\n')
      proc.stdin.flush()  # stdin stays open: the answer must come before end of input
      deadline = time.monotonic() + 90
      ready = []
      while not ready and time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 1.0)
      assert ready, f'no answer to {line!r} while the input stayed open'
      answers.append(proc.stdout.readline())
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0
  finally:
    proc.kill()
  run = attnlab.load_run(rnn_run)
  assert answers == [r.output + '\n' for r in run.decode(['abc', 'abcdefg'])]


PAIRS = [('das haus ist klein', 'the house is small'), ('die katze schläft', 'the cat sleeps'),
         ('der hund bellt laut', 'the dog barks loudly'), ('das haus ist gross', 'the big house')]


def _family_runs(tmp_path, monkeypatch):
  """Tiny trained runs of the real-data families: (name, workdir, extra decode flags)."""
  from attnlab.data import cmudict_g2p, tasks
  from configs import dates, g2p, parallel_text

  monkeypatch.setitem(tasks.BUILDERS, 'cmudict_g2p',
                      lambda config: cmudict_g2p.build_task(config, max_words=2000))
  tsv = tmp_path / 'pairs.tsv'
  tsv.write_text(''.join(f'{s}\t{t}\n' for s, t in PAIRS), encoding='utf-8')
  common = {'parallel.num_devices': 1, 'eval.num_heatmaps': 0, 'task.data_dir': str(tmp_path)}
  families = {
      'g2p': (g2p.get_config('smoke'), {}),
      'dates': (dates.get_config('smoke'), {}),
      'parallel_text': (parallel_text.get_config('smoke'),
                        {f'task.{s}_files': (str(tsv),) for s in ('train', 'eval', 'test')}),
  }
  out = []
  for name, (config, updates) in families.items():
    workdir = tmp_path / name
    with config.unlocked():
      for key, value in {**common, **updates}.items():
        group, leaf = key.split('.')
        setattr(getattr(config, group), leaf, value)
    train.train_and_evaluate(config, str(workdir))
    # Evaluation decodes at least as long as the references' padded width (evaluate.py):
    # the same length here reproduces outputs that never ended.
    width = {'dates': 48}.get(name, 0)
    out.append((name, str(workdir), [f'--max_decode_length={width}'] if width else []))
  return out


@pytest.mark.slow  # three tiny trainings (about 40 s on 2 idle cores)
def test_every_task_family_decodes_through_the_cli(tmp_path, monkeypatch):
  runs_ = _family_runs(tmp_path, monkeypatch)
  procs = []
  for name, workdir, flags in runs_:  # decoded side by side: the machine has cores to spare
    rows = predictions(workdir)
    assert {'source', 'reference', 'hypothesis'} <= set(rows[0]), name
    inputs = tmp_path / f'{name}.txt'
    inputs.write_text(''.join(r['source'] + '\n' for r in rows), encoding='utf-8')
    procs.append((name, rows, subprocess.Popen(
        [sys.executable, '-m', 'attnlab.decode', f'--workdir={workdir}', f'--input={inputs}',
         *flags], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)))
  for name, rows, proc in procs:
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, f'{name}: {err[-2000:]}'
    assert out.split('\n')[:-1] == [decode.one_line(r['hypothesis']) for r in rows], name
  g2p_rows = predictions(runs_[0][1])
  assert all(r['reference'] in r['references'] for r in g2p_rows)  # every pronunciation kept


def test_text_outputs_keep_one_line_per_input_whatever_the_model_spells():
  # A subword model with byte fallback can emit a line break; the text file must still hold
  # line N for input N (the n-best form, one line per hypothesis); jsonl keeps the text as is.
  def hyp(text):
    return inference.Hypothesis(text, [5], ['x'], -1.0, -1.0, np.zeros((1, 1), np.float32))

  # Other characters str.splitlines breaks at (\x1d, \x85, \u2028) are no line ends to a file
  # reader and stay.
  spelled = 'In the\nbeginning\r\nGod\rcreated\u2028all\n'
  results = [inference.Decoded(0, 'a', ['a'], [hyp(spelled), hyp('x\x1dy\x85')], []),
             inference.Decoded(1, 'b', ['b'], [hyp('plain')], [])]
  assert decode.one_line(spelled) == 'In the beginning God created\u2028all '
  for fmt, nbest, expected in (
      ('text', 1, ['In the beginning God created\u2028all ', 'plain']),
      ('text', 2, ['0 ||| In the beginning God created\u2028all  ||| -1',
                   '0 ||| x\x1dy\x85 ||| -1', '1 ||| plain ||| -1'])):
    out = io.StringIO()
    writer = decode.Writer(out, fmt, nbest, None, False)
    for result in results:
      writer.write(result)
    assert out.getvalue().split('\n') == [*expected, '']
  out = io.StringIO()
  decode.Writer(out, 'jsonl', 1, None, False).write(results[0])
  assert json.loads(out.getvalue())['output'] == spelled
