"""`attnlab.explore`'s server against requests it must refuse or survive: bad bodies, a
Content-Length that is no size, a stalled body, a Host header of another name (DNS rebinding),
and corrupt eval predictions. Served as in test_server.py (tests/explore/conftest.py).
"""

import json
import socket
import types
from urllib.parse import urlsplit

import pytest
from support.explorer import LABELS, request, serving

from attnlab.explore import api
from attnlab.explore import server as explore


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
