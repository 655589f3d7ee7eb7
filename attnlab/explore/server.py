"""`python -m attnlab.explore --workdir=RUN`: a local web page over trained runs.

    python -m attnlab.explore --workdir=runs/demo        # prints http://127.0.0.1:8000/
    python -m attnlab.explore --workdir=runs/rev --workdir=runs/demo --port=0

Type an input (or pick one of the first run's eval examples): every run answers it side by
side with its n-best outputs and scores and an interactive heatmap of the chosen output's
attention (hover a cell: source token, target token, weight). Multi-head and Transformer
models get a layer and head selector, with the mean over heads (what search used for an RNN
and for a Transformer's last layer).

The server answers GET / with the page (attnlab/explore/page.py; static: no user text is ever
written into it) and routes /api/ to the JSON API of attnlab/explore/api.py, which the page and
the tests use. A bad request gets a JSON {"error": message} that the page shows: the API's own
refusals (api.RequestError), and 400 for a body that is not JSON (or is nested too deep to
read) or a Content-Length that is not a decimal number; 403 for a Host header that is not this
server's (below); 404 for an unknown path; 408 for a body that stops arriving for
SOCKET_TIMEOUT_S; 413 for a body over MAX_BODY_BYTES. Anything else is a bug: a 500 with its
message, the traceback on stderr, and the server keeps serving. A --workdir that is not a run
is one `error: ...` line at start.

Binds to 127.0.0.1 by default: only this machine can connect. The page's script may fetch
from its own origin only (Content-Security-Policy), and /api/decode takes JSON only, so
another web site cannot post to it with a plain form. A request must name this server in its
Host header (127.0.0.1, localhost, [::1] or the --host given, any port): a web site whose
name its owner points at 127.0.0.1 (DNS rebinding) sends its own name and is refused.
"""

from __future__ import annotations

import http
import json
import re
import sys
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from attnlab import cli
from attnlab.decoding import runs
from attnlab.errors import UserError
from attnlab.explore import page as explore_page
from attnlab.explore.api import MAX_INPUT_CHARS, MAX_NBEST, Explorer, RequestError
from attnlab.reporting import html
from attnlab.runtime import compilation_cache

MAX_BODY_BYTES = 64 * 1024
MAX_RUNS = 4  # side by side
LOOPBACK = ('127.0.0.1', 'localhost', '::1')
SOCKET_TIMEOUT_S = 30  # a client silent this long mid-request is answered 408 or dropped
# A Host header: a name or IPv4 address, or an IPv6 address in brackets; then maybe a port.
_HOST = re.compile(r'(?:\[([0-9a-f:.]+)\]|([^:\[\]@/\s]+))(?::[0-9]+)?')


class Handler(BaseHTTPRequestHandler):
  """Routes the requests of the module docstring to `self.server.explorer`."""

  server_version = 'attnlab-explore'
  timeout = SOCKET_TIMEOUT_S  # on every read and write of the connection (socketserver)

  def log_message(self, format, *args):  # noqa: A002 (the base class's name)
    pass  # no line per request; errors go to stderr below

  def handle_one_request(self):
    try:
      super().handle_one_request()
    except TimeoutError:  # a client silent in the middle of its request line or headers
      self.close_connection = True

  def do_GET(self):
    self._respond(self._get)

  def do_POST(self):
    self._respond(self._post)

  def _get(self):
    url = urlsplit(self.path)
    explorer = self.server.explorer
    if url.path in ('/', '/index.html'):
      return self.server.page
    if url.path == '/api/runs':
      return explorer.describe_runs()
    if url.path == '/api/examples':
      return explorer.examples(parse_qs(url.query).get('run', ['0'])[0])
    raise RequestError(404, f'no page {url.path}; the API is GET /api/runs, '
                            'GET /api/examples?run=ID, POST /api/decode')

  def _post(self):
    if urlsplit(self.path).path != '/api/decode':
      raise RequestError(404, f'no endpoint POST {urlsplit(self.path).path}; use /api/decode')
    kind = self.headers.get('Content-Type', '').split(';')[0].strip()
    if kind != 'application/json':
      raise RequestError(400, 'send the request as JSON (Content-Type: application/json)')
    length = self.headers.get('Content-Length')
    if length is None:
      raise RequestError(400, 'the request has no Content-Length')
    # ASCII digits only: int() would take '-1' (read to the end of the stream), '+16', '1_6'.
    if not re.fullmatch('[0-9]{1,20}', length):
      raise RequestError(400, f'Content-Length must be the body\'s size in bytes, a decimal '
                              f'number, not {length!r}')
    size = int(length)
    if size > MAX_BODY_BYTES:
      if size <= 16 * MAX_BODY_BYTES:
        self._read_body(size)  # read what was sent, so that the client reads the answer
      raise RequestError(413, f'the request is {size} bytes; the limit is {MAX_BODY_BYTES}')
    raw = self._read_body(size)
    try:
      payload = json.loads(raw.decode('utf-8'))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
      raise RequestError(400, f'the request body is not JSON: {e}') from None
    except RecursionError:
      raise RequestError(400, 'the request body is nested deeper than this server reads; send '
                              'a JSON object such as {"input": "abc", "nbest": 1}') from None
    return self.server.explorer.decode(payload)

  def _read_body(self, size: int) -> bytes:
    """The `size` bytes of the body; 408 where the client stops sending for self.timeout
    seconds, 400 where it closes before sending them all."""
    chunks, got = [], 0
    try:
      while got < size:
        chunk = self.rfile.read1(size - got)
        if not chunk:
          raise RequestError(400, f'the request announced {size} bytes and sent {got}')
        chunks.append(chunk)
        got += len(chunk)
    except TimeoutError:
      raise RequestError(408, f'the request announced {size} bytes, sent {got} and then '
                              f'nothing for {self.timeout:g} s; send the whole body') from None
    return b''.join(chunks)

  def _check_host(self):
    """403 unless the Host header names this server (module docstring: DNS rebinding)."""
    value = self.headers.get('Host', '')
    match = _HOST.fullmatch(value.strip().lower())
    if not match or (match.group(1) or match.group(2)) not in self.server.host_names:
      names = ', '.join(f'[{n}]' if ':' in n else n for n in self.server.host_names)
      raise RequestError(403, f'this explorer answers to {names} only, not to Host: '
                              f'{value!r}; open {self.server.url}')

  def _respond(self, route):
    try:
      self._check_host()
      status, answer = http.HTTPStatus.OK, route()
    except RequestError as e:
      status, answer = e.status, {'error': str(e)}
    except Exception as e:  # a bug: answer it, log it, keep serving
      traceback.print_exc()
      status, answer = http.HTTPStatus.INTERNAL_SERVER_ERROR, {
          'error': f'internal error ({type(e).__name__}: {e}); see the server\'s console'}
    if isinstance(answer, str):
      data, kind = answer.encode('utf-8'), 'text/html; charset=utf-8'
    else:
      data, kind = json.dumps(answer).encode('utf-8'), 'application/json; charset=utf-8'
    try:
      self.send_response(status)
      self.send_header('Content-Type', kind)
      self.send_header('Content-Length', str(len(data)))
      self.send_header('X-Content-Type-Options', 'nosniff')
      self.send_header('Cache-Control', 'no-store')
      self.send_header('X-Frame-Options', 'DENY')
      self.end_headers()
      self.wfile.write(data)
    except (BrokenPipeError, ConnectionResetError, TimeoutError):
      pass  # the browser went away, or stopped reading


class ExplorerServer(ThreadingHTTPServer):
  """A ThreadingHTTPServer that holds the explorer and its page."""

  daemon_threads = True

  def __init__(self, address, explorer: Explorer):
    self.explorer = explorer
    # The names a Host header may give: the loopback ones and the address it was told to use.
    given = address[0].lower().strip('[]')
    self.host_names = tuple(dict.fromkeys(LOOPBACK + ((given,) if given else ())))
    self.page = html.page(explore_page.TITLE, explore_page.body(MAX_INPUT_CHARS, MAX_NBEST),
                          extra_css=explore_page.CSS, extra_js=explore_page.JS,
                          connect_src="'self'")
    super().__init__(address, Handler)

  @property
  def url(self) -> str:
    host, port = self.server_address[:2]
    return f'http://{f"[{host}]" if ":" in host else host}:{port}/'


def serve(explorer: Explorer, host: str = '127.0.0.1', port: int = 8000) -> ExplorerServer:
  """The bound server (port 0: any free port; see `.url`); call serve_forever() to answer."""
  try:
    return ExplorerServer((host, port), explorer)
  except (OSError, OverflowError) as e:  # taken, not an address here, not a port number
    reason = getattr(e, 'strerror', None) or e
    raise UserError(f'--host={host} --port={port}: cannot listen there ({reason}); pick '
                    'another --port (0: any free one) or --host') from None


def load_runs(workdirs, checkpoint: str = 'best') -> Explorer:
  if not workdirs:
    raise UserError('--workdir is required: the run directory to explore (repeat it to see '
                    'runs side by side)')
  if len(workdirs) > MAX_RUNS:
    raise UserError(f'{len(workdirs)} --workdir flags; the page shows at most {MAX_RUNS} runs')
  return Explorer([runs.load_run(w, checkpoint) for w in workdirs])


def define_flags() -> None:
  """Defined when run as a program, not on import: attnlab.main and attnlab.sweep define a
  --workdir too, and a test process imports them all."""
  from absl import flags

  flags.DEFINE_multi_string('workdir', [], 'Run directory; repeat the flag for runs side by '
                            'side.')
  flags.DEFINE_string('checkpoint', 'best', 'best, latest or a step number.')
  flags.DEFINE_string('host', '127.0.0.1', 'Address to listen on (default: this machine only). '
                      'The page answers requests for this name, 127.0.0.1, localhost and [::1] '
                      'only: give the name or address that others will type.')
  flags.DEFINE_integer('port', 8000, 'Port to listen on (0: any free port).')


def main(argv):
  from absl import app

  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  compilation_cache.enable()
  with cli.library_warnings_only():
    return _serve()


def _serve() -> int:
  from absl import flags

  values = flags.FLAGS
  explorer = load_runs(values.workdir, values.checkpoint)
  for label, run in zip(explorer.labels, explorer.runs, strict=True):
    print(f'{label}: {run.workdir} step {run.step}{f" ({run.note})" if run.note else ""}',
          file=sys.stderr)
  host = values.host
  server = serve(explorer, host, values.port)
  if host not in LOOPBACK:
    print(f'warning: --host={host}: anyone who can reach this machine can use the page (at '
          f'{server.url}: requests for other names are refused)', file=sys.stderr)
  print(f'attnlab explorer at {server.url} (Ctrl-C to stop)', flush=True)
  try:
    server.serve_forever()
  except KeyboardInterrupt:
    pass
  finally:
    server.server_close()
  return 0

