"""`attnlab.explore`: the JSON API and the page, through a real HTTP server on a free port, and
the `python -m attnlab.explore` command.

Two runs side by side (tests/explore/conftest.py): the session's tiny reverse run
(conftest.tiny_reverse_run, 4 steps) and an untrained 4-head RNN (random parameters, no
training) for the layer/head views. Every answer is compared with `TrainedRun.decode` on the
same input, the API the page is built on.
"""

import base64
import hashlib
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from support import REPO
from support.explorer import LABELS, request

from attnlab.config import run as config_lib
from attnlab.decoding import inference
from attnlab.explore import api
from configs import reverse


def cells(view_html):
  """The heatmap table's weights as floats, one list per output row."""
  rows = re.findall(r'<tr><th>.*?</th>(.*?)</tr>', view_html.split('<tbody>')[1])
  return [[float(w) for w in re.findall(r'data-w=([^ >]+)', row)] for row in rows]


def test_page_is_static_and_may_load_only_its_own_script_and_api(url):
  status, headers, page = request(url, '/')
  assert status == 200 and headers['Content-Type'] == 'text/html; charset=utf-8'
  assert headers['X-Content-Type-Options'] == 'nosniff'
  (script,) = re.findall(r'<script>(.*?)</script>', page, re.S)
  digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
  (policy,) = re.findall(r'Content-Security-Policy" content="([^"]+)"', page)
  assert f"script-src 'sha256-{digest}'" in policy and "connect-src 'self'" in policy
  assert "default-src 'none'" in policy
  # Nothing of the request reaches the page: it is the same bytes whatever the query says.
  assert request(url, '/?input=<script>alert(1)</script>')[2] == page


def test_runs_are_described_side_by_side(url, tiny_reverse_run):
  status, _, answer = request(url, '/api/runs')
  assert status == 200
  tiny, heads = answer['runs']
  assert (tiny['id'], tiny['label'], tiny['workdir'], tiny['step']) == (0, 'tiny',
                                                                        tiny_reverse_run, 4)
  assert tiny['model'] == 'LSTM 1+1 layers, H=16, luong timing, general score, input feeding'
  assert (tiny['search'], tiny['multi_head'], tiny['has_attention']) == ('greedy', False, True)
  assert heads['label'] == 'four heads' and heads['multi_head']
  assert heads['model'].endswith('scaled_dot score, input feeding, 4 heads')


@pytest.mark.slow
def test_decode_answers_as_the_decode_api_for_every_run(url, explorer):
  status, _, answer = request(url, '/api/decode', {'input': 'abcde', 'nbest': 1})
  assert status == 200 and answer['input'] == 'abcde' and answer['nbest'] == 1
  assert [r['label'] for r in answer['results']] == LABELS
  for run, result in zip(explorer.runs, answer['results'], strict=True):
    (expected,) = run.decode(['abcde'])
    assert {k: result[k] for k in inference.as_json(expected)} == json.loads(
      json.dumps(inference.as_json(expected)))
    assert result['search'] == 'greedy'
    assert result['source_tokens'] == ['a', 'b', 'c', 'd', 'e', '<eos>']
  (single,) = answer['results'][0]['attention'][0]  # one view: what search used
  (expected,) = explorer.runs[0].decode(['abcde'])
  assert (single['layer'], single['head']) == ('', '')
  np.testing.assert_array_equal(np.float32(single['weights']), expected.attention)
  assert np.float32(cells(single['html'])).tolist() == np.float32(single['weights']).tolist()


def test_multi_head_views_are_each_head_and_their_mean(url, explorer):
  _, _, answer = request(url, '/api/decode', {'input': 'abcdefg', 'runs': [1]})
  (result,) = answer['results']
  views = result['attention'][0]
  assert [(v['layer'], v['head']) for v in views] == [
    ('cross attention', h) for h in ('head 0', 'head 1', 'head 2', 'head 3', 'mean')]
  heads_NxTxS = np.float32([v['weights'] for v in views[:4]])
  T, S = len(result['output_tokens'][0]), len(result['source_tokens'])
  assert heads_NxTxS.shape == (4, T, S)
  np.testing.assert_allclose(heads_NxTxS.sum(-1), 1.0, atol=1e-5)  # each head a softmax
  mean_TxS = np.float32(views[4]['weights'])
  np.testing.assert_allclose(mean_TxS, (heads_NxTxS[0] + heads_NxTxS[1] + heads_NxTxS[2]
                                        + heads_NxTxS[3]) / 4, atol=1e-6)
  (expected,) = explorer.runs[1].decode(['abcdefg'])
  np.testing.assert_allclose(mean_TxS, expected.attention, atol=1e-5)  # what search used
  assert 'cross attention, mean' in views[4]['html']


@pytest.mark.slow
def test_nbest_lists_come_from_beam_search_with_each_hypothesis_attention(url, explorer):
  _, _, answer = request(url, '/api/decode', {'input': 'dcba', 'nbest': 3, 'runs': [0]})
  (result,) = answer['results']
  run = explorer.runs[0]
  assert result['search'] == f'beam {run.cfg.eval.beam_size}'  # 5: the run's beam width
  (expected,) = run.decode(['dcba'], nbest=3, search='beam', beam_size=run.cfg.eval.beam_size)
  assert result['outputs'] == [h.text for h in expected.hypotheses]
  assert len(result['outputs']) == 3 and result['scores'] == sorted(result['scores'])[::-1]
  for tokens, (view,), hyp in zip(result['output_tokens'], result['attention'],
                                  expected.hypotheses, strict=True):
    assert len(view['weights']) == len(tokens)
    np.testing.assert_array_equal(np.float32(view['weights']), hyp.attention)


def test_script_in_an_input_comes_back_as_data_and_escaped_html(url):
  status, _, answer = request(url, '/api/decode', {'input': '<script>', 'runs': [0]})
  assert status == 200 and answer['input'] == '<script>'
  (result,) = answer['results']
  assert result['unknown'] == ['<', '>']  # not in the vocabulary of a-t
  assert result['source_tokens'] == ['<unk>', 's', 'c', 'r', 'i', 'p', 't', '<unk>', '<eos>']
  html = result['attention'][0][0]['html']
  assert '<th>&lt;unk&gt;</th>' in html and '<unk>' not in html and '<script' not in html


def test_a_bug_is_a_500_and_the_server_keeps_serving(url, explorer, monkeypatch, capsys):
  def broken(request):
    raise RuntimeError('boom')

  monkeypatch.setattr(explorer, 'decode', broken)
  status, _, answer = request(url, '/api/decode', {'input': 'abc'})
  assert status == 500 and 'RuntimeError: boom' in answer['error']
  assert 'RuntimeError: boom' in capsys.readouterr().err  # the traceback, for the developer
  monkeypatch.undo()
  assert request(url, '/api/decode', {'input': 'abc'})[0] == 200


def test_examples_are_the_runs_eval_predictions(url, tiny_reverse_run):
  with open(os.path.join(tiny_reverse_run, 'predictions_eval.jsonl'), encoding='utf-8') as f:
    rows = [json.loads(line) for line in f]
  status, _, answer = request(url, '/api/examples?run=0')
  assert status == 200 and answer['note'] == '' and len(rows) == 48  # all of them (<= 100)
  assert answer['examples'] == [
    {k: r[k] for k in ('index', 'source', 'reference', 'hypothesis', 'correct')} for r in rows]
  status, _, answer = request(url, '/api/examples?run=1')
  assert status == 200 and answer['examples'] == []
  assert answer['note'].endswith('predictions_eval.jsonl not found: the run has not evaluated '
                                 'its eval split yet')


def test_labels_and_search_settings():
  assert api.run_labels(['runs/a/luong', 'runs/b/luong/', 'runs/c']) == [
    'runs/a/luong', 'runs/b/luong/', 'c']
  assert api.run_labels(['r/x', 'r/x']) == ['r/x (0)', 'r/x (1)']
  cfg = config_lib.parse(reverse.get_config('smoke'))  # greedy, beam_size 5
  assert api.search_settings(cfg, 1) == {}  # as python -m attnlab.decode
  assert api.search_settings(cfg, 3) == {'search': 'beam', 'beam_size': 5}
  assert api.search_settings(cfg, 8) == {'search': 'beam', 'beam_size': 8}


def _explore(*args):
  return subprocess.Popen([sys.executable, '-m', 'attnlab.explore', *args], cwd=REPO,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize('args, message', [
  (['--workdir=/nonexistent/run'], 'error: run directory /nonexistent/run does not exist'),
  ([], 'error: --workdir is required: the run directory to explore'),
  (['--workdir=a'] * 5, 'error: 5 --workdir flags; the page shows at most 4 runs'),
])
def test_the_command_refuses_a_bad_run_in_one_line(args, message):
  process = _explore(*args)
  out, err = process.communicate(timeout=120)
  assert process.returncode == 2 and out == ''
  assert err.strip().splitlines()[-1].startswith(message), err
  assert 'Traceback' not in err


@pytest.mark.slow
def test_the_command_prints_its_url_and_serves_two_runs(tiny_reverse_run):
  process = _explore(f'--workdir={tiny_reverse_run}', f'--workdir={tiny_reverse_run}',
                     '--port=0', '--checkpoint=latest')
  try:
    line = process.stdout.readline()
    match = re.fullmatch(r'attnlab explorer at (http://127\.0\.0\.1:\d+/) \(Ctrl-C to stop\)\n',
                         line)
    assert match, (line, process.stderr.read() if process.poll() is not None else '')
    status, _, answer = request(match.group(1), '/api/runs')
    assert status == 200
    assert [r['label'] for r in answer['runs']] == [f'{tiny_reverse_run} (0)',
                                                    f'{tiny_reverse_run} (1)']
    _, _, answer = request(match.group(1), '/api/decode', {'input': 'abc'})
    assert answer['results'][0]['outputs'] == answer['results'][1]['outputs']
  finally:
    process.terminate()
    process.communicate(timeout=60)
