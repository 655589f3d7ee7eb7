"""report.html: one self-contained page made from a report's Markdown, opened from disk.

    write_html('runs/sweep/report.html', markdown_text, base_dir='runs/sweep',
               figures={'plots/reverse-attention.png': html_heatmaps.grid(rows)})

The sweep and run reports write Markdown (results.md, README.md); this module renders the
subset of Markdown they write (headings, paragraphs, `code`, relative [links](file), lists,
indented code, tables, image lines), so the page and the Markdown never disagree. Tables
become sortable (html_assets.JS): a cell that starts with a number ('0.875 ± 0.177', '1,200',
'27.41%', '<0.0005', '1m10s') carries it in `data-sort`. An image line becomes the PNG as a
base64 data URI, or the HTML that `figures` gives for its path (an interactive heatmap).

Values from runs and sweeps (task names, commands, error messages) are data that someone else
may have written: the writers join their lines with `join_lines`, which keeps every value on
its own line (an embedded newline could otherwise start an image line of its own), and only a
file inside the report's folder (`base_dir`, after symbolic links) is ever read into the page,
so a shared run cannot pull one of the reader's own files into a report they publish.

Self-contained: style, script and images are inline, and a Content-Security-Policy lets the
page load nothing at all and run only its own script (by hash). Every string from the
Markdown is HTML-escaped, so a token like '<script>' shows as text.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from collections.abc import Mapping
from html import escape

from attnlab.reporting import html_assets, html_heatmaps

FILE_NAME = 'report.html'
HINT = 'Click a column header to sort; hover an attention cell for its tokens and weight.'

_NUMBER = re.compile(r'[<>≤≥]?\s*([+\-−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][+\-]?\d+)?)')
_DURATION = re.compile(r'(?:(\d+)h)?(\d+)m(\d+)s')  # attnlab.sweeps.progress.duration
_IMAGE = re.compile(r'!\[(.*)\]\(([^()\s]+)\)')
_RULE = re.compile(r'\|(\s*:?-+:?\s*\|)+')
_INLINE = re.compile(r'`([^`]+)`|\[([^\]]+)\]\(([^()\s]+)\)')
# What str.splitlines() breaks lines at, and every other C0/C1 control character.
_CONTROL = re.compile('[\x00-\x1f\x7f-\x9f\u2028\u2029]')


def one_line(value: str) -> str:
  """`value` with control characters (newlines, tabs, escapes) replaced by spaces."""
  return _CONTROL.sub(' ', value)


def join_lines(lines: list[str]) -> str:
  """The Markdown text of `lines`, one line each, whatever the values in them hold."""
  return ''.join(one_line(line) + '\n' for line in lines)


def sort_key(cell: str) -> float | None:
  """The number a table cell starts with (durations in seconds), None for text."""
  cell = cell.strip()
  match = _DURATION.match(cell)  # also "1m30s (1 of 2)"
  if match:
    hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return float(3600 * hours + 60 * minutes + seconds)
  match = _NUMBER.match(cell)
  if not match:
    return None
  return float(match.group(1).replace(',', '').replace('−', '-'))


def inline(text: str) -> str:
  """Escaped text with `code` spans and links to relative paths only (nothing remote)."""
  out, end = [], 0
  for match in _INLINE.finditer(text):
    out.append(escape(text[end : match.start()]))
    code, label, href = match.groups()
    if code is not None:
      out.append(f'<code>{escape(code)}</code>')
    elif ':' in href or href.startswith('/'):  # a scheme, //host or an absolute path
      out.append(escape(match.group(0)))
    else:
      out.append(f'<a href="{escape(href)}">{escape(label)}</a>')
    end = match.end()
  return ''.join(out) + escape(text[end:])


def _cells(line: str) -> list[str]:
  return [c.strip() for c in line.strip()[1:-1].split('|')]


def table(head: list[str], rows: list[list[str]]) -> str:
  """A sortable table: numeric cells carry `data-sort`; columns with numbers align right."""
  keys = [[sort_key(cell) for cell in row] for row in rows]
  numeric = {i for row in keys for i, key in enumerate(row) if key is not None}
  parts = ['<div class="table-wrap"><table class="sortable"><thead><tr>']
  num = lambda i: ' class="num"' if i in numeric else ''
  parts += [f'<th scope="col"{num(i)}>{inline(h)}</th>' for i, h in enumerate(head)]
  parts.append('</tr></thead><tbody>')
  for row, row_keys in zip(rows, keys, strict=True):
    parts.append('<tr>')
    for i, (cell, key) in enumerate(zip(row, row_keys, strict=True)):
      attrs = num(i) + ('' if key is None else f' data-sort="{key!r}"')
      parts.append(f'<td{attrs}>{inline(cell)}</td>')
    parts.append('</tr>')
  parts.append('</tbody></table></div>')
  return ''.join(parts)


def inside(path: str, base_dir: str) -> bool:
  """Whether `path` (relative to `base_dir`, or absolute) is in `base_dir`'s tree once
  symbolic links and '..' are resolved."""
  root = os.path.realpath(base_dir)
  try:
    return os.path.commonpath([root, os.path.realpath(os.path.join(root, path))]) == root
  except ValueError:  # a NUL in the path: no file has that name
    return False


def image(path: str, alt: str, base_dir: str) -> str:
  """The PNG at `path` (in `base_dir`) inline as a data URI, captioned with `alt`."""
  if not inside(path, base_dir):
    return (f'<p class="missing">{escape(alt)}: {escape(path)} is outside the report\'s '
            'folder: not inlined</p>')
  path = os.path.join(base_dir, path)
  if not os.path.isfile(path):
    return f'<p class="missing">{escape(alt)}: {escape(os.path.basename(path))} not found</p>'
  with open(path, 'rb') as f:
    data = base64.b64encode(f.read()).decode('ascii')
  return (
    f'<figure><img alt="{escape(alt)}" src="data:image/png;base64,{data}">'
    f'<figcaption>{escape(alt)}</figcaption></figure>'
  )


def _kind(line: str) -> str:
  if not line.strip():
    return 'blank'
  if line.startswith('    '):
    return 'code'
  if line.startswith('#'):
    return 'heading'
  if line.startswith('|'):
    return 'table'
  if _IMAGE.fullmatch(line.strip()):
    return 'image'
  return 'list' if line.startswith('- ') else 'para'


def _blocks(lines: list[str]):
  """(kind, lines) of consecutive Markdown lines of one kind; a heading or image alone."""
  block, kind = [], None
  for line in lines:
    k = _kind(line)
    if block and (k != kind or k in ('heading', 'image')):
      yield kind, block
      block = []
    if k != 'blank':
      block.append(line)
    kind = k
  if block:
    yield kind, block


def body(markdown_text: str, base_dir: str, figures: Mapping[str, str]) -> str:
  """The page body of `markdown_text`; image paths are relative to `base_dir`, and only
  files inside it are inlined."""
  parts, gallery = [], []
  for kind, lines in _blocks(markdown_text.splitlines()):
    if kind == 'image':
      alt, path = _IMAGE.fullmatch(lines[0].strip()).groups()
      gallery.append(figures.get(path) or image(path, alt, base_dir))
      continue
    if gallery:  # consecutive images share one wrapping row
      parts.append('<div class="figures">' + ''.join(gallery) + '</div>')
      gallery = []
    if kind == 'heading':
      hashes = len(lines[0]) - len(lines[0].lstrip('#'))
      level = min(hashes, 3)
      parts.append(f'<h{level}>{inline(lines[0][hashes:].strip())}</h{level}>')
      if level == 1:
        parts.append(f'<p class="hint">{escape(HINT)}</p>')
    elif kind == 'table':
      if len(lines) > 1 and _RULE.fullmatch(lines[1].strip()):
        lines = lines[:1] + lines[2:]  # the |---| line under the header
      head, *rows = [_cells(line) for line in lines]
      parts.append(table(head, rows))
    elif kind == 'list':
      parts.append('<ul>' + ''.join(f'<li>{inline(line[2:])}</li>' for line in lines) + '</ul>')
    elif kind == 'code':
      code = '\n'.join(line[4:] for line in lines)
      parts.append(f'<pre><code>{escape(code)}</code></pre>')
    else:
      parts.append(f'<p>{inline(" ".join(line.strip() for line in lines))}</p>')
  if gallery:
    parts.append('<div class="figures">' + ''.join(gallery) + '</div>')
  return '\n'.join(parts)


def page(
  title: str, body_html: str, *, extra_css: str = '', extra_js: str = '', connect_src: str = ''
) -> str:
  """The whole document: inline style and script; the policy allows nothing else to load.

  The explorer's page (attnlab/explore/page.py) adds its own style and script after the
  report's and `connect_src="'self'"`: the one origin its script may fetch from (its API).
  """
  script = html_assets.JS + extra_js
  script_hash = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
  policy = (
    "default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
    f"script-src 'sha256-{script_hash}'" + (f'; connect-src {connect_src}' if connect_src else '')
  )
  return (
    '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
    f'<meta http-equiv="Content-Security-Policy" content="{policy}">\n'
    '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
    f'<title>{escape(title)}</title>\n<style>{html_assets.CSS}{html_heatmaps.CELL_CSS}{extra_css}'
    '</style>\n</head>\n'
    f'<body>\n<main>\n{body_html}\n</main>\n<div id="tip" role="tooltip" hidden></div>\n'
    f'<script>{script}</script>\n</body>\n</html>\n'
  )


def write_html(
  path: str, markdown_text: str, *, base_dir: str, figures: Mapping[str, str] | None = None
) -> str:
  """Writes the report page of `markdown_text` to `path` (see the module docstring)."""
  heading = next((line for line in markdown_text.splitlines() if line.startswith('# ')), '')
  title = heading[2:].strip() or 'attnlab report'
  html_text = page(title, body(markdown_text, base_dir, figures or {}))
  with open(path, 'w', encoding='utf-8') as f:
    f.write(html_text)
  return path
