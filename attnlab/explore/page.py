"""The explorer's one page: its body, style and script (served by attnlab/explore/server.py).

Static HTML: no user text or token is ever written into it on the server. The script fetches
/api/runs (one pane per run, side by side) and /api/examples, posts the input to /api/decode
and fills each pane from the answer: the 1-best output, the n-best table with scores (click a
row for that hypothesis' attention), layer and head selectors for multi-head models, and the
heatmap. Texts reach the page through textContent only; the heatmap tables come from the
server already escaped (attnlab.reporting.html_heatmaps.panel), and the tooltip and sorting
are report.html's own script (html_assets.JS), delegated from the document so that heatmaps
added later get it too. `body[data-state]` is busy, done or error: what the browser test
waits on.
"""

from html import escape

from attnlab.reporting import html_heatmaps

TITLE = 'attnlab explorer'
HINT = ('Type an input or pick an eval example. Hover an attention cell for its tokens and '
        'weight; click an n-best row for its attention.')

CSS = """
[hidden] { display: none !important; }
form.ask { display: flex; flex-wrap: wrap; gap: 8px 16px; align-items: end; margin: 8px 0 4px; }
form.ask label { display: flex; flex-direction: column; font-size: 12px; color: var(--muted); }
form.ask input, form.ask select, form.ask button { font: inherit; font-size: 14px;
  padding: 5px 8px; border: 1px solid var(--line); border-radius: 4px; color: var(--ink); }
form.ask input#input { width: 28em; font-family: ui-monospace, Menlo, Consolas, monospace; }
form.ask input#nbest { width: 5em; }
form.ask select { max-width: 24em; }
form.ask button { background: var(--accent); color: #fff; border-color: var(--accent);
  cursor: pointer; padding: 5px 18px; }
body[data-state=busy] form.ask button { opacity: 0.6; }
.error { color: #a33; background: #fbeeee; border: 1px solid #efc9c9; border-radius: 4px;
  padding: 6px 10px; }
.runs { display: flex; flex-wrap: wrap; gap: 24px; align-items: flex-start; margin-top: 12px; }
section.run { flex: 1 1 420px; min-width: 0; max-width: 100%; }
section.run h2 { margin-top: 12px; }
section.run .about { color: var(--muted); font-size: 12px; margin: 0 0 8px; }
p.best { font-size: 18px; margin: 4px 0 8px; }
p.best code { font-size: 17px; }
p.best code:empty::after { content: '(empty)'; color: var(--muted); }
table.nbest { border-collapse: collapse; font-size: 13px; margin: 4px 0 8px; }
table.nbest th, table.nbest td { padding: 3px 8px; border-bottom: 1px solid var(--line);
  text-align: left; }
table.nbest th { background: var(--head); font-weight: 600; }
table.nbest td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.nbest td code { background: none; padding: 0; }
table.nbest tbody tr { cursor: pointer; }
table.nbest tbody tr:hover { background: #eef3fb; }
table.nbest tbody tr.chosen { background: #dfe9f8; }
.selectors { display: flex; gap: 12px; margin: 4px 0 8px; font-size: 12px; color: var(--muted); }
.selectors select { font: inherit; font-size: 13px; margin-left: 4px; }
.notice { color: var(--muted); font-size: 12px; }
"""

JS = """
'use strict';
(function () {
  var body = document.body, form = document.getElementById('ask');
  var input = document.getElementById('input'), nbest = document.getElementById('nbest');
  var examples = document.getElementById('examples'), error = document.getElementById('error');
  var panes = [];

  function make(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function api(method, path, payload) {
    var request = {method: method, headers: {'Content-Type': 'application/json'}};
    if (payload !== undefined) request.body = JSON.stringify(payload);
    return fetch(path, request).then(function (response) {
      return response.json().catch(function () { return {}; }).then(function (data) {
        if (!response.ok) throw new Error(data.error || response.status + ' ' +
                                          response.statusText);
        return data;
      });
    });
  }
  function showError(message) {
    error.textContent = message || '';
    error.hidden = !message;
  }
  function fail(problem) {
    showError(problem.message);
    body.dataset.state = 'error';
  }

  function addPane(run) {
    var pane = {run: run, node: make('section', 'run')};
    pane.node.dataset.run = run.id;
    pane.node.appendChild(make('h2', '', run.label));
    pane.node.appendChild(make('p', 'about', run.model + ' \\u00b7 step ' + run.step + ' \\u00b7 ' +
                                   run.workdir + (run.note ? ' \\u00b7 ' + run.note : '')));
    pane.best = make('code');
    var best = make('p', 'best');
    best.appendChild(pane.best);
    pane.about = make('p', 'about');
    pane.table = make('table', 'nbest');
    var head = pane.table.createTHead().insertRow();
    ['#', 'output', 'score', 'log p'].forEach(function (label) {
      head.appendChild(make('th', '', label));
    });
    pane.rows = pane.table.createTBody();
    pane.notice = make('p', 'notice', run.has_attention ? '' :
                       'This model has no attention (model.attention.timing=none or fixed).');
    pane.selectors = make('div', 'selectors');
    pane.layer = make('select', 'layer');
    pane.head = make('select', 'head');
    [['layer ', pane.layer], ['head ', pane.head]].forEach(function (pair) {
      var label = make('label', '', pair[0]);
      label.appendChild(pair[1]);
      pane.selectors.appendChild(label);
    });
    pane.selectors.hidden = true;
    pane.layer.addEventListener('change', function () { fillHeads(pane); showView(pane); });
    pane.head.addEventListener('change', function () { showView(pane); });
    pane.heatmap = make('div', 'heatmap-box');
    [best, pane.about, pane.table, pane.notice, pane.selectors, pane.heatmap].forEach(
      function (node) { pane.node.appendChild(node); });
    pane.table.hidden = true;
    document.getElementById('runs').appendChild(pane.node);
    panes[run.id] = pane;
  }

  function options(select, values, preferred) {
    var keep = values.indexOf(select.value) >= 0 ? select.value : preferred;
    select.replaceChildren.apply(select, values.map(function (value) {
      var option = make('option', '', value);
      option.value = value;
      return option;
    }));
    select.value = keep;
  }
  function views(pane) { return pane.result.attention[pane.chosen] || []; }
  function fillHeads(pane) {
    var heads = views(pane).filter(function (v) { return v.layer === pane.layer.value; })
      .map(function (v) { return v.head; });
    options(pane.head, heads, 'mean');
  }
  function showView(pane) {
    var all = views(pane), layer = pane.layer.value, head = pane.head.value;
    var view = all.length === 1 ? all[0] : all.filter(function (v) {
      return v.layer === layer && v.head === head;
    })[0];
    pane.heatmap.innerHTML = view ? view.html : '';  // escaped on the server
  }
  function choose(pane, k) {
    pane.chosen = k;
    Array.prototype.forEach.call(pane.rows.rows, function (row, i) {
      row.classList.toggle('chosen', i === k);
    });
    var all = views(pane), layers = [];
    all.forEach(function (v) { if (layers.indexOf(v.layer) < 0) layers.push(v.layer); });
    pane.selectors.hidden = all.length < 2;
    if (all.length > 1) {
      options(pane.layer, layers, layers[layers.length - 1]);
      fillHeads(pane);
    }
    showView(pane);
  }
  function show(result) {
    var pane = panes[result.run];
    pane.result = result;
    pane.best.textContent = result.output;
    var about = result.search + ' search';
    if (result.unknown.length) about += ' \\u00b7 read as <unk>: ' + result.unknown.join(' ');
    pane.about.textContent = about;
    pane.rows.replaceChildren();
    result.outputs.forEach(function (text, k) {
      var row = pane.rows.insertRow(), code = make('code', '', text);
      row.appendChild(make('td', 'num', String(k + 1)));
      row.insertCell().appendChild(code);
      row.appendChild(make('td', 'num', result.scores[k].toFixed(4)));
      row.appendChild(make('td', 'num', result.log_probs[k].toFixed(4)));
      row.addEventListener('click', function () { choose(pane, k); });
    });
    pane.table.hidden = false;
    choose(pane, 0);
  }

  function decode() {
    showError('');
    body.dataset.state = 'busy';
    api('POST', '/api/decode', {input: input.value, nbest: Number(nbest.value)})
      .then(function (data) {
        data.results.forEach(show);
        body.dataset.state = 'done';
      })
      .catch(fail);
  }
  form.addEventListener('submit', function (event) {
    event.preventDefault();
    decode();
  });
  examples.addEventListener('change', function () {
    if (!examples.value) return;
    input.value = examples.value;
    decode();
  });

  api('GET', '/api/runs').then(function (data) {
    data.runs.forEach(addPane);
    return api('GET', '/api/examples?run=0');
  }).then(function (data) {
    data.examples.forEach(function (example) {
      var option = make('option', '', '#' + example.index + '  ' + example.source + '  \\u2192  ' +
                        example.reference);
      option.value = example.source;
      examples.appendChild(option);
    });
    if (data.note) examples.title = data.note;
    body.dataset.state = 'ready';
  }).catch(fail);
})();
"""


def body(max_input_chars: int, max_nbest: int) -> str:
  """The page's static body: the form, the error line, the legend and an empty row of panes."""
  return (
    f'<h1>{escape(TITLE)}</h1>\n<p class="hint">{escape(HINT)}</p>\n'
    '<form id="ask" class="ask" autocomplete="off">'
    f'<label for="input">input<input id="input" name="input" maxlength="{max_input_chars}" '
    'placeholder="e.g. abcdefg" autofocus></label>'
    f'<label for="nbest">n-best<input id="nbest" type="number" min="1" max="{max_nbest}" '
    'value="1"></label><button type="submit">Decode</button>'
    '<label for="examples">or an eval example<select id="examples">'
    '<option value="">(choose)</option></select></label></form>\n'
    '<p id="error" class="error" role="alert" hidden></p>\n'
    f'{html_heatmaps.legend()}\n<div id="runs" class="runs"></div>'
  )
