"""Attention heatmaps as PNG files (matplotlib, Agg backend: no display needed).

Source tokens run along the x axis, output tokens down the y axis, one cell per weight, so a
row is the distribution the decoder used for one output token. Colours span [0, 1] by default
so that panels of one grid, and figures of different runs, compare directly.

    save_heatmap(workdir / 'heatmaps' / 'step_500_ex0.png', weights_TxS, src, out, 'luong/dot')
    save_heatmap_grid(path, [('dot', w1, src, out1), ('general', w2, src, out2)])
"""

from __future__ import annotations

import functools
import io
import os
import textwrap
from collections.abc import Sequence

import matplotlib.image
import numpy as np
from etils import epath
from matplotlib import font_manager
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from attnlab import storage

# Inches per token and the font size keep labels legible up to ~60 tokens per axis.
_INCH_PER_TOKEN = 0.16
_MIN_PANEL_INCH = 2.5
_FONT_SIZE = 7
_TITLE_SIZE = _FONT_SIZE + 2
_DPI = 120
# The tasks' scripts that DejaVu Sans, matplotlib's own font, lacks (the dates' Hindi, Bengali,
# Thai, Chinese, Japanese and Korean), by family and font file (Debian's fonts-noto-core,
# fonts-droid-fallback and fonts-nanum). Matplotlib draws each glyph in the first family that
# has it; without these fonts those labels draw as empty boxes.
FALLBACK_FONTS = {
  'Noto Sans Devanagari': 'NotoSansDevanagari-Regular.ttf',
  'Noto Sans Bengali': 'NotoSansBengali-Regular.ttf',
  'Noto Sans Thai': 'NotoSansThai-Regular.ttf',
  'Droid Sans Fallback': 'DroidSansFallbackFull.ttf',
  'NanumGothic': 'NanumGothic.ttf',
}

Panel = tuple[str, np.ndarray, Sequence[str], Sequence[str]]


@functools.cache
def token_families() -> tuple[str, ...]:
  """The families token labels are drawn in: DejaVu Sans, then the fallback fonts this machine
  has. Matplotlib's font list is cached on disk when it is first built, so fonts installed
  after that are found by file name and added to it."""
  known = {font.name for font in font_manager.fontManager.ttflist}
  if not known.issuperset(FALLBACK_FONTS):
    wanted = {file for family, file in FALLBACK_FONTS.items() if family not in known}
    for path in font_manager.findSystemFonts():
      if os.path.basename(path) in wanted:
        font_manager.fontManager.addfont(path)
    known = {font.name for font in font_manager.fontManager.ttflist}
  return ('DejaVu Sans', *(family for family in FALLBACK_FONTS if family in known))


def _check_panel(title: str, weights_TxS, source_tokens, target_tokens) -> np.ndarray:
  weights_TxS = np.asarray(weights_TxS, np.float32)
  if weights_TxS.ndim != 2:
    raise ValueError(
      f'heatmap {title!r}: weights must be 2-D [target, source], got shape {weights_TxS.shape}'
    )
  want = (len(target_tokens), len(source_tokens))
  if weights_TxS.shape != want:
    raise ValueError(
      f'heatmap {title!r}: weights have shape {weights_TxS.shape} [target, '
      f'source] but there are {want[0]} target and {want[1]} source tokens; '
      'slice the weights to the unpadded lengths [:T, :S]'
    )
  return weights_TxS


def _panel_size(weights_TxS: np.ndarray) -> tuple[float, float]:
  T, S = weights_TxS.shape
  return (
    max(_MIN_PANEL_INCH, S * _INCH_PER_TOKEN) + 1.0,
    max(_MIN_PANEL_INCH, T * _INCH_PER_TOKEN) + 0.8,
  )


def _draw_fitting_titles(fig: Figure, titles: dict) -> None:
  """Draws `fig` on its Agg canvas, re-wrapping each axes' title at spaces until it is no wider
  than its axes (measured after layout), so that neighbouring panels' long variant labels
  ('score=general, timing=bahdanau, input_feeding=False') do not run into each other. The
  canvas keeps the last drawing, which `_save` writes as it is: each drawing runs the
  constrained layout, most of a heatmap's cost. It draws at least twice: the layout's first
  pass over a fresh figure puts the titles at its top edge and a grid's rows against each
  other; the second leaves room."""
  canvas = FigureCanvasAgg(fig)
  for attempt in range(5):  # the constrained layout moves the axes as titles grow taller
    canvas.draw()
    rewrapped = _rewrap_titles(titles, canvas.get_renderer())
    if attempt == 4 or (attempt >= 1 and not rewrapped):
      return


def _rewrap_titles(titles: dict, renderer) -> bool:
  """Re-wraps the titles wider than their axes in the last drawing; whether any changed."""
  changed = False
  for ax, title in titles.items():
    ratio = ax.title.get_window_extent(renderer).width / ax.get_window_extent(renderer).width
    if ratio > 1.0:
      longest = max(len(line) for line in ax.get_title().split('\n'))
      width = max(8, int(longest / ratio) - 1)
      ax.title.set_text('\n'.join(textwrap.fill(line, width) for line in title.split('\n')))
      changed = True
  return changed


def _draw(ax, title, weights_TxS, source_tokens, target_tokens, vmax):
  image = ax.imshow(
    weights_TxS, cmap='viridis', vmin=0.0, vmax=vmax, aspect='equal', interpolation='nearest'
  )
  ax.set_xticks(np.arange(len(source_tokens)))
  labels = {'fontsize': _FONT_SIZE, 'fontfamily': list(token_families())}
  ax.set_xticklabels([str(t) for t in source_tokens], rotation=90, **labels)
  ax.set_yticks(np.arange(len(target_tokens)))
  ax.set_yticklabels([str(t) for t in target_tokens], **labels)
  ax.set_xlabel('source')
  ax.set_ylabel('output')
  ax.set_title(title, fontsize=_TITLE_SIZE)
  return image


def _save(fig: Figure, path) -> None:
  """Writes the figure as drawn on its canvas to `path`, local or a bucket's
  (attnlab/storage.py), its folder made."""
  path = os.fspath(path)
  parent = os.path.dirname(path)
  if parent:
    storage.make_folder(parent)
  png = io.BytesIO()
  matplotlib.image.imsave(png, fig.canvas.buffer_rgba(), format='png', origin='upper', dpi=fig.dpi)
  epath.Path(path).write_bytes(png.getvalue())


def save_heatmap(
  path,
  weights_TxS,
  source_tokens: Sequence[str],
  target_tokens: Sequence[str],
  title: str = '',
  *,
  vmax: float = 1.0,
) -> None:
  """Writes one heatmap PNG of `weights_TxS` (T output tokens x S source tokens).

  Raises:
    ValueError: weights not 2-D, or their shape differs from (len(target), len(source)).
  """
  weights_TxS = _check_panel(title, weights_TxS, source_tokens, target_tokens)
  width, height = _panel_size(weights_TxS)
  fig = Figure(figsize=(width + 0.6, height), dpi=_DPI, layout='constrained')
  ax = fig.add_subplot()
  image = _draw(ax, title, weights_TxS, source_tokens, target_tokens, vmax)
  fig.colorbar(image, ax=ax, shrink=0.8, label='attention weight')
  _draw_fitting_titles(fig, {ax: title})
  _save(fig, path)


def save_heatmap_grid(
  path, panels: Sequence[Panel], *, ncols: int | None = None, vmax: float = 1.0
) -> None:
  """Writes several heatmaps side by side (one row unless `ncols`) with one shared colorbar.

  Args:
    path: the PNG to write.
    panels: (title, weights_TxS, source_tokens, target_tokens) per panel, e.g. one model each.
    ncols: panels per row (default: all in one row).
  """
  if not panels:
    raise ValueError('save_heatmap_grid: no panels given')
  checked = [(t, _check_panel(t, w, s, o), s, o) for t, w, s, o in panels]
  ncols = len(checked) if ncols is None else ncols
  if ncols < 1:
    raise ValueError(f'save_heatmap_grid: ncols={ncols} must be >= 1')
  nrows = -(-len(checked) // ncols)
  sizes = [_panel_size(w) for _, w, _, _ in checked]
  cell_w = max(w for w, _ in sizes)
  cell_h = max(h for _, h in sizes)
  fig = Figure(figsize=(cell_w * ncols + 0.8, cell_h * nrows), dpi=_DPI, layout='constrained')
  axes = fig.subplots(nrows, ncols, squeeze=False)
  image = None
  for ax, (title, weights_TxS, src, tgt) in zip(axes.flat, checked, strict=False):
    image = _draw(ax, title, weights_TxS, src, tgt, vmax)
  for ax in list(axes.flat)[len(checked) :]:
    ax.set_axis_off()
  fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label='attention weight')
  titles = {ax: title for ax, (title, *_) in zip(axes.flat, checked, strict=False)}
  _draw_fitting_titles(fig, titles)
  _save(fig, path)
