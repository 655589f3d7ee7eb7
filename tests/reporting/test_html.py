"""The parts of report.html (reporting/html.py, reporting/html_heatmaps.py): sort keys of
table cells, the viridis colours of heatmap cells, the Markdown subset it renders, which images
it inlines, and text kept on one line."""

import base64
import os

import numpy as np
import pytest
from matplotlib import colormaps
from matplotlib.colors import ListedColormap
from support.html_pages import Page, css_colours

from attnlab.reporting import html, html_heatmaps


@pytest.mark.parametrize(
  'cell, key',
  [
    ('0.875 ± 0.177', 0.875),
    ('1,234,567', 1234567.0),
    ('27.41%', 27.41),
    ('<0.0005', 0.0005),
    ('-1.000 [-1.000, -1.000]', -1.0),
    ('+0.250 [+0.000, +0.500]', 0.25),
    ('2e-05', 2e-05),
    ('0m30s', 30.0),
    ('1m45s', 105.0),
    ('1h02m03s', 3723.0),  # 3600 + 120 + 3
    ('10-14', 10.0),  # a source-length bucket sorts by its start
    ('1/2 (1 failed)', 1.0),  # seeds: finished first
    ('timing=luong', None),
    ('best', None),
    ('–', None),
    ('', None),
  ],
)
def test_sort_key_reads_the_number_a_cell_starts_with(cell, key):
  assert html.sort_key(cell) == key


def test_viridis_ends_and_middle():
  # Published viridis colours at 0, 0.5 and 1 (matplotlib's _cm_listed); weights clip to [0, 1].
  assert list(html_heatmaps.colors([0.0, 0.5, 1.0, 1.5])) == [
    '#440154',
    '#21918c',
    '#fde725',
    '#fde725',
  ]


def test_markdown_subset():
  text = '\n'.join(
    [
      '# Title <x>',
      '',
      'See `a<b>` in [the config](config.json), not [this](https://example.com/x), [host](//x).',
      'Same paragraph.',
      '',
      '- one & two',
      '',
      '    python -m x --flag="<y>"',
      '',
      '| name | n |',
      '|---|---|',
      '| b | 10 |',
      '| a | 9 |',
    ]
  )
  body = html.body(text, '.', {})
  assert body.startswith('<h1>Title &lt;x&gt;</h1>')
  assert (
    '<p>See <code>a&lt;b&gt;</code> in <a href="config.json">the config</a>, not '
    '[this](https://example.com/x), [host](//x). Same paragraph.</p>'
  ) in body
  assert '<ul><li>one &amp; two</li></ul>' in body
  assert '<pre><code>python -m x --flag=&quot;&lt;y&gt;&quot;</code></pre>' in body
  table = Page(body).of_class('sortable')[0]
  assert table['head'] == ['name', 'n']
  assert [[c for c, _ in r] for r in table['rows']] == [['b', '10'], ['a', '9']]
  assert html.body('![gone](missing.png)', '.', {}) == (
    '<div class="figures"><p class="missing">gone: missing.png not found</p></div>'
  )


def test_only_images_inside_the_report_folder_are_read(tmp_path):
  base = tmp_path / 'report'
  (base / 'plots').mkdir(parents=True)
  (base / 'plots' / 'a.png').write_bytes(b'\x89PNG inside')
  (tmp_path / 'secret.png').write_bytes(b'\x89PNG outside')
  os.symlink(tmp_path / 'secret.png', base / 'plots' / 'link.png')  # inside by name only
  inside = 'data:image/png;base64,' + base64.b64encode(b'\x89PNG inside').decode()
  for path in ('plots/a.png', 'plots/../plots/a.png', str(base / 'plots' / 'a.png')):
    assert Page(html.body(f'![a]({path})', str(base), {})).images() == [inside], path
  for path in (str(tmp_path / 'secret.png'), '../secret.png', 'plots/../../secret.png',
               'plots/link.png', '/etc/hostname', 'plots/a.png\x00'):
    body = html.body(f'![a]({path})', str(base), {})
    assert body == (f'<div class="figures"><p class="missing">a: {path} is outside the '
                    "report's folder: not inlined</p></div>"), path
  assert html.body('![a](plots)', str(base), {}) == (
    '<div class="figures"><p class="missing">a: plots not found</p></div>')


def test_one_line_replaces_control_characters_with_spaces():
  assert html.one_line('a\nb\r\nc\td\x00e\x1bf\x7fg\x85h\u2028i\u2029j k') == (
    'a b  c d e f g h i j k')
  assert html.one_line('ünï ² ✓') == 'ünï ² ✓'
  assert html.join_lines(['# a\nb', '', '    c\rd']) == '# a b\n\n    c d\n'


def test_a_cells_class_is_the_colormap_entry_that_matplotlib_picks():
  n = colormaps[html_heatmaps.CMAP].N
  bounds = np.arange(n + 1) / n  # where matplotlib's entry changes, and just below
  weights = np.concatenate(
    [
      np.random.default_rng(0).random(100_000),
      np.random.default_rng(1).random(100_000).astype(np.float32),
      bounds,
      np.nextafter(bounds, -1.0),
      np.nextafter(bounds.astype(np.float32), np.float32(-1)),
      [1.0, np.nextafter(1.0, 2.0), 1.5, np.inf, -0.0, -1e-30, -0.5, -np.inf],
    ]
  )
  # matplotlib's own choice of entry, read through a colormap whose entry k has red k / (n - 1).
  numbered = ListedColormap(np.stack([np.arange(n) / (n - 1), np.zeros(n), np.zeros(n)], -1))
  chosen = np.round(numbered(np.clip(weights, 0.0, 1.0))[:, 0] * (n - 1)).astype(np.int64)
  np.testing.assert_array_equal(html_heatmaps.levels(weights), chosen)
  css = css_colours(html_heatmaps.CELL_CSS)
  assert len(css) == n == 256  # viridis
  assert [css[f'v{k}'] for k in chosen] == html_heatmaps.colors(weights).tolist()
  # The cell: class and exact weight unquoted; NaN (matplotlib's 'bad') gets no colour.
  assert html_heatmaps.panel('t', [[np.nan, 0.5, 1.0]], 'abc', ['x']).split('<tbody>')[1] == (
    '<tr><th>x</th><td data-w=nan></td><td class=v128 data-w=0.5></td>'
    '<td class=v255 data-w=1></td></tr></tbody></table></figure>'
  )
