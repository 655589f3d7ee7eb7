"""The style sheet and script that attnlab/reporting/html.py inlines into every report.html
(with the heatmap cells' colour classes, which html_heatmaps.CELL_CSS makes from the colormap).

Plain CSS and vanilla JavaScript (no build step, no network). The script does two things:
  - sorts a `table.sortable` by the clicked header: cells with a `data-sort` number compare
    numerically, other text in natural order ('seed=2' before 'seed=10'), empty cells ('' or
    '–') stay last; a second click reverses the order;
  - shows the tooltip `#tip` over a `table.heatmap` cell: the source token (its column header),
    the target token (its row header) and the weight (`data-w`), and highlights both headers;
    the listener sits on the document, so tables added later (the explorer's) have it too.
Tokens reach the tooltip through textContent only, so a token is never parsed as HTML.
"""

CSS = """
:root { color-scheme: light; --ink: #1d2330; --muted: #5d6575; --line: #d9dde5;
  --head: #f2f4f8; --accent: #2f5d9a; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.5 system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif;
  color: var(--ink); background: #fff; }
main { max-width: 1440px; margin: 0 auto; padding: 24px 32px 48px; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 32px 0 8px; padding-bottom: 4px;
  border-bottom: 1px solid var(--line); }
h3 { font-size: 15px; margin: 24px 0 8px; }
p, ul { margin: 8px 0; }
p.hint { color: var(--muted); font-size: 12px; margin-bottom: 16px; }
code, pre { font: 12.5px/1.45 ui-monospace, 'SFMono-Regular', Menlo, Consolas, monospace; }
code { background: var(--head); padding: 1px 4px; border-radius: 3px; }
pre { background: var(--head); padding: 10px 12px; border-radius: 4px; overflow-x: auto; }
pre code { background: none; padding: 0; }
a { color: var(--accent); }
.table-wrap { overflow-x: auto; margin: 8px 0 12px; }
table.sortable { border-collapse: collapse; font-size: 13px; }
table.sortable th, table.sortable td { padding: 4px 8px; border-bottom: 1px solid var(--line);
  text-align: left; white-space: nowrap; }
table.sortable th { background: var(--head); font-weight: 600; cursor: pointer;
  user-select: none; position: relative; padding-right: 18px; }
table.sortable th:hover { background: #e6eaf1; }
table.sortable th::after { content: '\\2195'; position: absolute; right: 5px; color: #a3aab8; }
table.sortable th[aria-sort=ascending]::after { content: '\\25B2'; color: var(--accent); }
table.sortable th[aria-sort=descending]::after { content: '\\25BC'; color: var(--accent); }
table.sortable th.num { text-align: right; }
table.sortable td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.sortable tbody tr:nth-child(even) { background: #fafbfc; }
table.sortable tbody tr:hover { background: #eef3fb; }
.figures { display: flex; flex-wrap: wrap; gap: 16px; align-items: flex-start; margin: 12px 0; }
figure { margin: 0; padding: 8px; border: 1px solid var(--line); border-radius: 4px;
  background: #fff; max-width: 100%; }
figure img { display: block; max-width: 100%; max-height: 300px; width: auto; height: auto; }
figcaption { font-size: 12px; color: var(--muted); margin-top: 4px; white-space: pre-line; }
.missing { color: #a33; }
.heatmap-grid { display: grid; gap: 12px; align-items: start; overflow-x: auto; }
.heatmap-grid figure { border: none; padding: 0; }
.heatmap-grid figcaption { margin: 0 0 4px; color: var(--ink); font-weight: 600; }
table.heatmap { border-collapse: collapse; font-size: 12px; }
table.heatmap td { width: 20px; height: 20px; min-width: 20px; padding: 0;
  border: 1px solid #fff; }
table.heatmap td:hover { outline: 2px solid #e8473c; outline-offset: -1px; }
table.heatmap th { font-weight: normal; color: var(--muted); padding: 0 4px; }
table.heatmap thead th { writing-mode: vertical-rl; transform: rotate(180deg);
  vertical-align: bottom; text-align: left; padding: 4px 0; height: auto; }
table.heatmap tbody th { text-align: right; white-space: nowrap; }
table.heatmap th.lit { color: #e8473c; font-weight: 700; }
.legend { display: flex; align-items: center; gap: 6px; font-size: 11px; color: var(--muted);
  margin: 4px 0 0; }
.legend .bar { width: 160px; height: 10px; border-radius: 2px; }
#tip { position: fixed; z-index: 10; pointer-events: none; background: #1d2330; color: #fff;
  font-size: 12px; padding: 6px 9px; border-radius: 4px; box-shadow: 0 2px 8px #0004;
  white-space: pre; }
#tip[hidden] { display: none; }
#tip b { color: #9cc4ff; font-weight: 600; }
"""

JS = """
'use strict';
(function () {
  function sortKey(cell) {
    var text = cell.textContent.trim();
    if (text === '' || text === '\\u2013') return [2, 0];
    if (cell.hasAttribute('data-sort')) return [0, parseFloat(cell.getAttribute('data-sort'))];
    return [1, text];
  }
  function compare(a, b, dir) {
    if (a[0] !== b[0]) return a[0] - b[0];
    if (a[0] === 0) return dir * (a[1] - b[1]);
    if (a[0] === 1) return dir * a[1].localeCompare(b[1], undefined, {numeric: true});
    return 0;
  }
  function sortBy(th) {
    var table = th.closest('table'), body = table.tBodies[0], col = th.cellIndex;
    var dir = th.getAttribute('aria-sort') === 'ascending' ? -1 : 1;
    Array.prototype.forEach.call(th.parentNode.cells, function (h) {
      h.removeAttribute('aria-sort');
    });
    th.setAttribute('aria-sort', dir === 1 ? 'ascending' : 'descending');
    var rows = Array.prototype.map.call(body.rows, function (row, i) {
      return {row: row, key: sortKey(row.cells[col]), i: i};
    });
    rows.sort(function (a, b) { return compare(a.key, b.key, dir) || a.i - b.i; });
    rows.forEach(function (r) { body.appendChild(r.row); });
  }
  document.querySelectorAll('table.sortable th').forEach(function (th) {
    th.addEventListener('click', function () { sortBy(th); });
  });

  var tip = document.getElementById('tip'), lit = [];
  function line(label, value) {
    var row = document.createElement('div'), b = document.createElement('b');
    b.textContent = label + ' ';
    row.appendChild(b);
    row.appendChild(document.createTextNode(value));
    return row;
  }
  function unlight() {
    lit.forEach(function (h) { h.classList.remove('lit'); });
    lit = [];
  }
  function hide() { tip.hidden = true; unlight(); }
  // Delegated from the document: heatmaps added later (the explorer's) get the tooltip too.
  document.addEventListener('mouseover', function (event) {
    var cell = event.target.closest('table.heatmap td[data-w]');
    if (!cell) {
      if (!event.target.closest('table.heatmap')) hide();
      return;
    }
    var heads = cell.closest('table').tHead.rows[0].cells;
    var source = heads[cell.cellIndex], target = cell.parentNode.cells[0];
    unlight();
    lit = [source, target];
    lit.forEach(function (h) { h.classList.add('lit'); });
    tip.replaceChildren(
      line('source', source.textContent), line('target', target.textContent),
      line('weight', parseFloat(cell.getAttribute('data-w')).toFixed(4)));
    var box = cell.getBoundingClientRect();
    tip.style.left = Math.min(box.right + 8, window.innerWidth - 220) + 'px';
    tip.style.top = (box.bottom + 8) + 'px';
    tip.hidden = false;
  });
  document.documentElement.addEventListener('mouseleave', hide);
})();
"""
