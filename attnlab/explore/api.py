"""The explorer's JSON API over trained runs (decoding/runs.py's TrainedRun), without the HTTP
around it: attnlab/explore/server.py serves it, attnlab/explore/page.py is the page.

    GET  /api/runs           {"runs": [{id, label, workdir, step, model, search, multi_head,
                              has_attention, note}]}
    GET  /api/examples?run=ID  {"examples": [{index, source, reference, hypothesis, correct}],
                              "note"}: the first MAX_EXAMPLES of RUN/predictions_eval.jsonl
    POST /api/decode         {"input": TEXT, "nbest": K, "runs": [ID, ...] (default all)} ->
                             {"input", "nbest", "results": [per run: inference.as_json
                              + run, label, search and attention: per hypothesis a list of
                              views {layer, head, weights [T][S], html}]}

Decoding is `TrainedRun.decode` with the settings attnlab.decode uses: one output gives what
`python -m attnlab.decode` prints; n-best lists come from beam search at least K wide.

A request the API refuses raises `RequestError`, the HTTP status and the message the page
shows: 400 for a decode request that is not a JSON object, no input, an input over
MAX_INPUT_CHARS characters or over a run's token limit, an n-best size outside 1..MAX_NBEST;
404 for an unknown run id; 409 for a run's predictions_eval.jsonl that cannot be read (its file
and line named).
"""

from __future__ import annotations

import json
import os
import threading

from etils import epath

from attnlab.config.run import SELECT_SPLIT
from attnlab.decoding import inference
from attnlab.errors import UserError
from attnlab.reporting import html_heatmaps
from attnlab.rundir import layout

MAX_INPUT_CHARS = 1000  # characters per input (a run's own token limit applies as well)
MAX_NBEST = 10
MAX_EXAMPLES = 100  # eval examples offered in the page


class RequestError(Exception):
  """A request the explorer refuses: the HTTP status and the message the page shows."""

  def __init__(self, status: int, message: str):
    super().__init__(message)
    self.status = status


def run_labels(workdirs) -> list[str]:
  """Short names for the runs: the directory's name, or its path where two names collide."""
  names = [
    os.path.basename(os.path.normpath(w)) if w else f'run {i}' for i, w in enumerate(workdirs)
  ]
  labels = [w if names.count(n) > 1 and w else n for n, w in zip(names, workdirs, strict=True)]
  return [f'{label} ({i})' if labels.count(label) > 1 else label for i, label in enumerate(labels)]


def describe_model(cfg) -> str:
  """The model in one line, with what the explorer compares (timing, score, heads)."""
  m = cfg.model
  if m.kind == 'transformer':
    return (
      f'Transformer {m.encoder_layers}+{m.decoder_layers} layers, '
      f'{m.transformer.num_heads} heads, H={m.hidden_size}'
    )
  a = m.attention
  parts = [f'{m.cell.upper()} {m.encoder_layers}+{m.decoder_layers} layers, H={m.hidden_size}']
  if not a.attends:
    return ', '.join(parts + [a.describe_no_attention()])
  parts.append(f'{a.timing} timing, {a.score} score')
  if a.input_feeding:
    parts.append('input feeding')
  if a.window != 'global':
    parts.append(f'{a.window} window (D={a.window_radius})')
  if a.num_heads > 1:
    parts.append(f'{a.num_heads} heads')
  return ', '.join(parts)


def has_attention(cfg) -> bool:
  return cfg.model.kind == 'transformer' or cfg.model.attention.attends


def search_settings(cfg, nbest: int) -> dict:
  """attnlab.decode's settings (the run's eval.* search) for one output and for n-best lists
  it can give; for more, beam search with at least K hypotheses."""
  e = cfg.eval
  if nbest == 1 or (e.search == 'beam' and e.beam_size >= nbest):
    return {}
  return {'search': 'beam', 'beam_size': max(nbest, e.beam_size)}


def attention_views(hyp: inference.Hypothesis, source_tokens) -> list[dict]:
  """The heatmaps of one hypothesis: the weights search used, or, for a multi-head model,
  each layer's heads and their mean."""

  def view(layer, head, weights_TxS):
    title = ', '.join(filter(None, [layer, head])) or 'attention'
    return {
      'layer': layer,
      'head': head,
      'weights': weights_TxS.tolist(),
      'html': html_heatmaps.panel(title, weights_TxS, source_tokens, hyp.tokens),
    }

  if not hyp.heads:
    return [view('', '', hyp.attention)]
  views = []
  for layer, weights_NxTxS in hyp.heads.items():
    views += [view(layer, f'head {n}', w) for n, w in enumerate(weights_NxTxS)]
    views.append(view(layer, 'mean', weights_NxTxS.mean(axis=0)))
  return views


def read_examples(workdir: str) -> tuple[list[dict], str]:
  """The first MAX_EXAMPLES of RUN/predictions_eval.jsonl (evaluation writes it) and a note;
  where there is none, those of the test split's predictions that a results folder keeps
  (attnlab.run_report: compressed, as a sweep archive). A RequestError (409) names the file and
  line where a line is not a JSON object."""
  path = os.path.join(workdir, layout.predictions_file(SELECT_SPLIT))
  if epath.Path(path).is_file():
    with epath.Path(path).open('rb') as f:  # bytes, so that a bad byte is reported at its line
      return _examples(path, f), ''
  test = os.path.join(workdir, layout.TEST_PREDICTIONS)
  if layout.text_form(test) is None:
    return [], f'{path} not found: the run has not evaluated its eval split yet'
  with layout.open_text(test) as f:
    lines = (line.encode('utf-8') for line in f)
    return _examples(test, lines), f'{path} not found: these are test examples ({test})'


def _examples(path: str, lines) -> list[dict]:
  examples = []
  for number, line in enumerate(lines, 1):
    if len(examples) == MAX_EXAMPLES:
      break
    if not line.strip():
      continue
    try:
      row = json.loads(line.decode('utf-8'))
    except UnicodeDecodeError as e:
      raise _corrupt(path, number, f'not UTF-8 ({e.reason} at byte {e.start})') from None
    except json.JSONDecodeError as e:
      raise _corrupt(path, number, f'not JSON ({e.msg} at column {e.colno})') from None
    except RecursionError:
      raise _corrupt(path, number, 'not JSON that can be read (nested too deep)') from None
    if not isinstance(row, dict):
      raise _corrupt(path, number, f'not a JSON object but a {type(row).__name__}')
    examples.append(
      {key: row.get(key) for key in ('index', 'source', 'reference', 'hypothesis', 'correct')}
    )
  return examples


def _corrupt(path: str, number: int, reason: str) -> RequestError:
  return RequestError(
    409,
    f'{path} line {number}: {reason}: the file is cut short or corrupt; '
    'evaluating the run again rewrites it, or move it away to explore '
    'without examples',
  )


class Explorer:
  """The API over some trained runs (decoding/runs.py's TrainedRun), without the HTTP around it."""

  def __init__(self, runs, labels=None):
    self.runs = list(runs)
    self.labels = list(labels) if labels else run_labels([r.workdir for r in self.runs])
    self._examples: dict[int, tuple[list[dict], str]] = {}
    self._lock = threading.Lock()  # one decode at a time: decoders cache compiled shapes

  def run_id(self, value) -> int:
    if isinstance(value, str) and value.isascii() and value.isdigit():  # not '²' or '١'
      value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < len(self.runs):
      choices = ', '.join(f'{i} ({label})' for i, label in enumerate(self.labels))
      raise RequestError(404, f'unknown run {value!r}; choose from {choices}')
    return value

  def describe_runs(self) -> dict:
    runs = []
    for i, run in enumerate(self.runs):
      e = run.cfg.eval
      runs.append(
        {
          'id': i,
          'label': self.labels[i],
          'workdir': run.workdir,
          'step': run.step,
          'model': describe_model(run.cfg),
          'search': 'greedy' if e.search == 'greedy' else f'beam {e.beam_size}',
          'multi_head': run.decoder().multi_head,
          'has_attention': has_attention(run.cfg),
          'note': run.note,
        }
      )
    return {'runs': runs}

  def examples(self, run) -> dict:
    i = self.run_id(run)
    with self._lock:
      if i not in self._examples:
        self._examples[i] = read_examples(self.runs[i].workdir)
    examples, note = self._examples[i]
    return {'run': i, 'examples': examples, 'note': note}

  def decode(self, request) -> dict:
    """POST /api/decode (module docstring); RequestError for a bad request."""
    if not isinstance(request, dict):
      raise RequestError(400, 'send a JSON object such as {"input": "abc", "nbest": 1}')
    text = request.get('input')
    if not isinstance(text, str):
      raise RequestError(400, '"input" must be a string: the text to decode')
    if len(text) > MAX_INPUT_CHARS:
      raise RequestError(
        400, f'the input is {len(text)} characters long; the limit is {MAX_INPUT_CHARS}'
      )
    if not text.strip():
      raise RequestError(400, 'type an input to decode')
    nbest = request.get('nbest', 1)
    if isinstance(nbest, bool) or not isinstance(nbest, int) or not 1 <= nbest <= MAX_NBEST:
      raise RequestError(
        400, f'"nbest" must be a whole number from 1 to {MAX_NBEST}, not {json.dumps(nbest)}'
      )
    wanted = request.get('runs', list(range(len(self.runs))))
    if not isinstance(wanted, list) or not wanted:
      raise RequestError(400, '"runs" must be a non-empty list of run ids')
    ids = [self.run_id(r) for r in wanted]
    with self._lock:
      return {
        'input': text,
        'nbest': nbest,
        'results': [self._decode_one(i, text, nbest) for i in ids],
      }

  def _decode_one(self, i: int, text: str, nbest: int) -> dict:
    run, label = self.runs[i], self.labels[i]
    settings = search_settings(run.cfg, nbest)
    decoder = run.decoder(**settings)
    try:
      (result,) = run.decode([text], nbest=nbest, heads=decoder.multi_head, **settings)
    except UserError as e:
      raise RequestError(400, f'{label}: {e}') from None
    if result.error:
      raise RequestError(400, f'{label}: the input is not decoded: {result.error}')
    views = (
      [attention_views(h, result.source_tokens) for h in result.hypotheses]
      if has_attention(run.cfg)
      else [[] for _ in result.hypotheses]
    )
    search = decoder.search if decoder.search == 'greedy' else f'beam {decoder.beam_size}'
    return {
      **inference.as_json(result),
      'run': i,
      'label': label,
      'search': search,
      'attention': views,
    }
