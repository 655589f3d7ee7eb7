"""The explore tests' explorer (tests/explore/conftest.py) served on a free port, and requests
to it."""

import contextlib
import json
import threading
import urllib.error
import urllib.request

from attnlab.explore import server as explore

# The explorer's two runs: the session's tiny reverse run and an untrained 4-head RNN.
LABELS = ['tiny', 'four heads']


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
