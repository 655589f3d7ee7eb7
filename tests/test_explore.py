"""`attnlab.explore`: the JSON API and the page, through a real HTTP server on a free port.

Two runs side by side: the session's tiny reverse run (conftest.tiny_reverse_run, 4 steps) and
an untrained 4-head RNN (random parameters, no training) for the layer/head views. Every
answer is compared with `TrainedRun.decode` on the same input, the API the page is built on.
"""

import base64
import contextlib
import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import types
import urllib.error
import urllib.request
from urllib.parse import urlsplit

import jax
import numpy as np
import pytest

from attnlab.config import run as config_lib
from attnlab.data import load_task
from attnlab.decoding import inference, runs
from attnlab.explore import api
from attnlab.explore import server as explore
from attnlab.models.factory import build_model
from configs import reverse

REPO = os.path.join(os.path.dirname(__file__), '..')
LABELS = ['tiny', 'four heads']


def random_run(config, workdir):
  """A TrainedRun of `config` with random parameters (the shapes of a real run, no training)."""
  cfg = config_lib.parse(config)
  task = load_task(cfg)
  model = build_model(cfg.model, task.source_vocab.size, task.target_vocab.size)
  leaves, tree = jax.tree.flatten(runs.abstract_params(model, cfg))
  keys = jax.random.split(jax.random.key(1), len(leaves))
  params = tree.unflatten(
    [jax.random.normal(k, p.shape, p.dtype) for k, p in zip(keys, leaves, strict=True)])
  return runs.TrainedRun(workdir=str(workdir), cfg=cfg, config_dict={}, model=model,
                         params=params, step=0, note='', source_vocab=task.source_vocab,
                         target_vocab=task.target_vocab)


@pytest.fixture(scope='module')
def explorer(tiny_reverse_run, tmp_path_factory):
  config = reverse.get_config('smoke')
  with config.unlocked():
    config.model.attention.num_heads = 4
    config.model.attention.score = 'scaled_dot'
  heads = random_run(config, tmp_path_factory.mktemp('four_heads'))  # no predictions there
  return api.Explorer([runs.load_run(tiny_reverse_run, 'latest'), heads], LABELS)


@contextlib.contextmanager
def serving(explorer, host='127.0.0.1'):
  """The URL of `explorer` served on a free port of `host` while the block runs."""
  server = explore.serve(explorer, host, 0)
  thread = threading.Thread(target=server.serve_forever, daemon=True)
  thread.start()
  try:
    yield server.url
  finally:
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture(scope='module')
def url(explorer):
  with serving(explorer) as served:
    yield served


def run_dir_only(workdir):
  """An Explorer over one run that has a directory and nothing else: /api/examples and the
  page work, decoding does not (for the tests that need no trained run)."""
  return api.Explorer([types.SimpleNamespace(workdir=str(workdir))], ['bare'])


def raw_request(url, data: bytes, *, timeout=20) -> tuple[int, bytes]:
  """(status, body) the server answers to the bytes `data`, sent as they are on one
  connection that this side keeps open for writing; a server that never answers is a
  socket.timeout after `timeout` seconds."""
  address = urlsplit(url)
  with socket.create_connection((address.hostname, address.port), timeout=timeout) as s:
    s.sendall(data)
    chunks = []
    while chunk := s.recv(65536):
      chunks.append(chunk)
  answer = b''.join(chunks)
  head, _, body = answer.partition(b'\r\n\r\n')
  return int(head.split(b' ', 2)[1]), body


def request(url, path, body=None, *, content_type='application/json', raw=None):
  """(status, headers, parsed JSON or text) of GET path, or POST of `body` as JSON / `raw`."""
  data = raw if raw is not None else None if body is None else json.dumps(body).encode()
  req = urllib.request.Request(url + path.lstrip('/'), data=data)
  if data is not None:
    req.add_header('Content-Type', content_type)
  try:
    response = urllib.request.urlopen(req, timeout=120)
  except urllib.error.HTTPError as e:
    response = e
  with response:
    text = response.read().decode('utf-8')
    kind = response.headers['Content-Type']
    return response.status, response.headers, json.loads(text) if 'json' in kind else text


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


@pytest.mark.parametrize('body, status, message', [
  (b'{"input": "abc"', 400, 'the request body is not JSON'),
  (b'["abc"]', 400, 'send a JSON object'),
  (b'{"nbest": 1}', 400, '"input" must be a string'),
  (json.dumps({'input': 'a' * 1001}).encode(), 400, 'the input is 1001 characters long; the '
                                                    'limit is 1000'),
  (b'{"input": " \\t "}', 400, 'type an input'),
  (b'{"input": "abc", "nbest": 0}', 400, '"nbest" must be a whole number from 1 to 10, not 0'),
  (b'{"input": "abc", "nbest": 11}', 400, 'not 11'),
  (b'{"input": "abc", "nbest": true}', 400, 'not true'),
  (b'{"input": "abc", "nbest": "2"}', 400, 'not "2"'),
  (b'{"input": "abc", "runs": []}', 400, '"runs" must be a non-empty list'),
  (b'{"input": "abc", "runs": [2]}', 404, 'unknown run 2; choose from 0 (tiny), 1 (four heads)'),
  (b'{"input": "abc", "runs": ["\xc2\xb2"]}', 404, "unknown run '\u00b2'; choose from"),
  (b'[' * 30000 + b']' * 30000, 400, 'the request body is nested deeper than'),
  (json.dumps({'input': 'a' * 30}).encode(), 400, 'tiny: the input is not decoded: 31 tokens '
                                                  '(EOS included) exceed the limit of 24'),
])
def test_a_bad_decode_request_is_an_error_message(url, body, status, message):
  got, headers, answer = request(url, '/api/decode', raw=body)
  assert got == status and headers['Content-Type'] == 'application/json; charset=utf-8'
  assert message in answer['error'], answer
  assert request(url, '/api/runs')[0] == 200  # still serving


def test_bad_requests_outside_decoding(url):
  status, _, answer = request(url, '/api/decode', raw=b'{"input": "abc"}',
                              content_type='text/plain')
  assert (status, answer['error']) == (400, 'send the request as JSON (Content-Type: '
                                            'application/json)')
  status, _, answer = request(url, '/api/decode', raw=b' ' * (explore.MAX_BODY_BYTES + 1))
  assert status == 413 and 'the limit is 65536' in answer['error']
  status, _, answer = request(url, '/api/nothing')
  assert status == 404 and answer['error'].startswith('no page /api/nothing; the API is')
  assert request(url, '/api/runs', {'input': 'abc'})[0] == 404  # POST to a GET endpoint
  # '²' and '١' (Arabic-Indic one) are digits to str.isdigit; a run id is ASCII digits only.
  for run in ('7', 'luong', '-1', '%C2%B2', '%D9%A1', '+1', '%201'):
    status, _, answer = request(url, f'/api/examples?run={run}')
    assert status == 404 and answer['error'].startswith('unknown run'), answer


@pytest.mark.parametrize('length', ['-1', '-16', '+16', '1_6', '0x10', '16.0'])
def test_a_content_length_that_is_not_a_decimal_number_is_refused_unread(url, length):
  # The body announced as 16 bytes is sent whole; this side never closes it, so a server that
  # reads "until the end" (read(-1)) would hang here until `timeout`.
  body = b'{"input": "abc"}'
  status, answer = raw_request(url, b'POST /api/decode HTTP/1.1\r\nHost: 127.0.0.1\r\n'
                               b'Content-Type: application/json\r\n'
                               b'Content-Length: ' + length.encode() + b'\r\n\r\n' + body)
  assert status == 400
  assert json.loads(answer) == {'error': f'Content-Length must be the body\'s size in bytes, '
                                         f'a decimal number, not {length!r}'}


def test_a_stalled_body_is_answered_408_after_the_socket_timeout(url, monkeypatch):
  assert 0 < explore.Handler.timeout <= 60  # the server's own bound, without the patch below
  monkeypatch.setattr(explore.Handler, 'timeout', 0.5)
  for length in (100, explore.MAX_BODY_BYTES + 1):  # under the limit and over it
    status, answer = raw_request(url, b'POST /api/decode HTTP/1.1\r\nHost: 127.0.0.1\r\n'
                                 b'Content-Type: application/json\r\nContent-Length: '
                                 + str(length).encode() + b'\r\n\r\n{"input": ', timeout=20)
    assert status == 408, answer
    assert json.loads(answer)['error'] == (
      f'the request announced {length} bytes, sent 10 and then nothing for 0.5 s; send the '
      'whole body')
  monkeypatch.undo()
  assert request(url, '/api/runs')[0] == 200


FORGED = ['evil.example', 'evil.example:{port}', 'localhost.evil.example:{port}',
          '127.0.0.1.nip.io:{port}', 'localhost:{port}@evil.example', '[::2]:{port}', '::1', '']


@pytest.mark.parametrize('host', FORGED + [None])
def test_a_request_for_another_host_name_is_refused(url, host):
  # A page on another site whose name now resolves to 127.0.0.1 (DNS rebinding) sends its
  # own name as Host: it must read nothing and decode nothing.
  port = urlsplit(url).port
  header = b'' if host is None else f'Host: {host.format(port=port)}\r\n'.encode()
  for request_line, body in ((b'GET /api/runs', b''), (b'GET /', b''),
                             (b'POST /api/decode', b'{"input": "abc"}')):
    status, answer = raw_request(url, request_line + b' HTTP/1.1\r\n' + header +
                                 b'Content-Type: application/json\r\nContent-Length: ' +
                                 str(len(body)).encode() + b'\r\n\r\n' + body)
    assert status == 403, (request_line, answer)
    error = json.loads(answer)['error']
    assert error.startswith('this explorer answers to 127.0.0.1, localhost, [::1]'), error
    assert 'runs' not in json.loads(answer) and b'results' not in answer


@pytest.mark.parametrize('host', ['127.0.0.1', '127.0.0.1:{port}', 'localhost',
                                  'localhost:{port}', 'LocalHost:{port}', '[::1]:{port}', '[::1]'])
def test_the_loopback_names_are_served(url, host):
  port = urlsplit(url).port
  status, answer = raw_request(url, f'GET /api/runs HTTP/1.1\r\nHost: '
                                    f'{host.format(port=port)}\r\n\r\n'.encode())
  assert status == 200 and [r['label'] for r in json.loads(answer)['runs']] == LABELS


def test_the_host_it_was_started_with_is_served(tmp_path):
  with serving(run_dir_only(tmp_path), host='127.0.0.2') as served:
    port = urlsplit(served).port
    for host, expected in ((f'127.0.0.2:{port}', 200), ('localhost', 200),
                           (f'127.0.0.3:{port}', 403)):
      status, _ = raw_request(served, f'GET / HTTP/1.1\r\nHost: {host}\r\n\r\n'.encode())
      assert status == expected, host


@pytest.mark.parametrize('content, line, reason', [
  (b'{"index": 0, "source": "ab"}\n{"index": 1, "sou', 2, 'not JSON'),
  (b'{"index": 0}\n\n{"index": 1}\n\xff\xfe\n', 4, 'not UTF-8'),
  (b'[0, 1]\n', 1, 'not a JSON object'),
])
def test_corrupt_eval_predictions_are_a_409_naming_the_file_and_line(tmp_path, content, line,
                                                                      reason):
  path = tmp_path / 'predictions_eval.jsonl'
  path.write_bytes(content)
  with serving(run_dir_only(tmp_path)) as served:
    status, _, answer = request(served, '/api/examples?run=0')
    assert status == 409, answer
    assert answer['error'].startswith(f'{path} line {line}: {reason}'), answer
    path.write_bytes(b'{"index": 0, "source": "ab", "correct": true}\n')  # mended: read anew
    status, _, answer = request(served, '/api/examples?run=0')
    assert status == 200 and answer['examples'] == [
      {'index': 0, 'source': 'ab', 'reference': None, 'hypothesis': None, 'correct': True}]


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
