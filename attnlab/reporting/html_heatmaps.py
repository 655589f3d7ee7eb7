"""Interactive attention heatmaps for report.html, drawn from the weights that evaluation saves.

evaluate.py writes attention/<split>_stepNNNNNNN.npz beside the heatmap PNGs, with
`weights_<i>` [output tokens, source tokens], `source_<i>` and `output_<i>` per example i.
Each heatmap is an HTML table: one row per output (target) token, one column per source
token, one cell per weight, coloured with the PNGs' colormap on the same [0, 1] scale. The
colormap is a table of N colours (viridis: 256), so a cell names its entry k as the class
v<k>, and the page's style gives each class its colour once (`CELL_CSS`), not each of a
report's tens of thousands of cells. A cell's `data-w` is the float32 weight written exactly
(shortest repr that reads back to the same float32); hovering shows source token, target token
and weight (html_assets.JS).
Both attributes are unquoted: their values hold no space, quote, '=', '<', '>' or '`'.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from html import escape

import numpy as np
from etils import epath
from matplotlib import colormaps

from attnlab.decoding import heatmaps
from attnlab.reporting import plots as report_plots
from attnlab.sweeps.trials import SEED_KEY

CMAP = 'viridis'  # as attnlab/decoding/heatmaps.py
_LEGEND_STOPS = 11


def _hex(rgba) -> np.ndarray:
  codes = np.round(np.asarray(rgba)[..., :3] * 255).astype(np.int64)
  return np.vectorize(lambda r, g, b: f'#{r:02x}{g:02x}{b:02x}')(*np.moveaxis(codes, -1, 0))


def colors(weights) -> np.ndarray:
  """'#rrggbb' per weight, the colormap over [0, 1] (clipped), as the PNG heatmaps."""
  return _hex(colormaps[CMAP](np.clip(np.asarray(weights, np.float64), 0.0, 1.0)))


def levels(weights) -> np.ndarray:
  """The colormap entry (0..N-1) that `colors` shows for each weight, as matplotlib picks it:
  floor(w * N) of w clipped to [0, 1], and N - 1 for 1; -1 for NaN (matplotlib's 'bad' colour:
  the cell stays uncoloured)."""
  n = colormaps[CMAP].N
  weights = np.asarray(weights, np.float64)
  entry = np.minimum(np.floor(np.clip(weights, 0.0, 1.0) * n), n - 1)
  return np.where(np.isnan(weights), -1, entry).astype(np.int64)


# One rule per colormap entry: class v<k> gets entry k's colour (an integer indexes the colormap).
_ENTRIES = colormaps[CMAP](np.arange(colormaps[CMAP].N))
CELL_CSS = ''.join(f'.v{k}{{background:{c}}}' for k, c in enumerate(_hex(_ENTRIES)))


def _cell(weight, entry) -> str:
  colour = f' class=v{entry}' if entry >= 0 else ''
  return f'<td{colour} data-w={exact(weight)}></td>'


def exact(weight) -> str:
  """The float32 `weight` as the shortest decimal that reads back to the same float32."""
  return np.format_float_positional(np.float32(weight), unique=True, trim='-')


def panel(title: str, weights_TxS, source_tokens: Sequence[str], target_tokens: Sequence[str]):
  """One heatmap: a captioned table with source tokens over the columns, targets on the rows.

  Raises:
    ValueError: weights not 2-D or not (len(target_tokens), len(source_tokens)).
  """
  weights_TxS = heatmaps._check_panel(title, weights_TxS, source_tokens, target_tokens)
  level_TxS = levels(weights_TxS)
  parts = [f'<figure><figcaption>{escape(title)}</figcaption><table class="heatmap"><thead><tr>']
  parts.append('<th></th>' + ''.join(f'<th>{escape(str(s))}</th>' for s in source_tokens))
  parts.append('</tr></thead><tbody>')
  for t, target in enumerate(target_tokens):
    cells = ''.join(_cell(w, k) for w, k in zip(weights_TxS[t], level_TxS[t], strict=True))
    parts.append(f'<tr><th>{escape(str(target))}</th>{cells}</tr>')
  parts.append('</tbody></table></figure>')
  return ''.join(parts)


def legend() -> str:
  stops = np.linspace(0.0, 1.0, _LEGEND_STOPS)
  gradient = ', '.join(colors(stops))
  return (
    '<div class="legend"><span>attention weight 0</span>'
    f'<span class="bar" style="background:linear-gradient(to right, {gradient})"></span>'
    '<span>1</span></div>'
  )


def grid(panels_html: Sequence[str], ncols: int) -> str:
  """Panels (from `panel`) in rows of `ncols`, with one colour legend."""
  style = f'grid-template-columns: repeat({max(ncols, 1)}, max-content)'
  return (
    f'<figure><div class="heatmap-grid" style="{style}">{"".join(panels_html)}</div>'
    f'{legend()}</figure>'
  )


def read_npz(path: str) -> dict[int, tuple[np.ndarray, list[str], list[str]]]:
  """Example index -> (weights_TxS, source tokens, output tokens) of one saved .npz (local or
  a bucket's)."""
  with np.load(io.BytesIO(epath.Path(path).read_bytes())) as data:
    indices = sorted(int(k.split('_', 1)[1]) for k in data.files if k.startswith('weights_'))
    return {
      i: (
        data[f'weights_{i}'],
        [str(t) for t in data[f'source_{i}']],
        [str(t) for t in data[f'output_{i}']],
      )
      for i in indices
    }


def sweep_grid(variants: Sequence) -> str | None:
  """The sweep report's attention grid (plots.plot_attention's trials and examples) as HTML:
  one column per variant, one row per shared example; None unless every shown trial saved
  its weights."""
  chosen = [
    (label, r)
    for label, r in report_plots._heatmap_trials(variants)
    if os.path.isfile(report_plots._npz(r)) or report_plots.final_heatmap_pngs(r)
  ]
  if not chosen or not all(os.path.isfile(report_plots._npz(r)) for _, r in chosen):
    return None
  examples = [(label, r, read_npz(report_plots._npz(r))) for label, r in chosen]
  shared = sorted(set.intersection(*(set(e) for _, _, e in examples)))
  panels = [
    panel(f'{label}\n#{index} (seed {r.trial.overrides.get(SEED_KEY)})', *e[index])
    for index in shared[: report_plots.MAX_EXAMPLES]
    for label, r, e in examples
  ]
  return grid(panels, len(examples)) if panels else None


def run_figures(result) -> dict[str, str]:
  """The run report's heatmap images ('attention/<png>' in OUT) -> their interactive HTML,
  from the final test step's .npz in the run directory (none without it)."""
  npz = report_plots._npz(result)
  if not epath.Path(npz).is_file():
    return {}
  examples = read_npz(npz)
  step = result.final['step']
  return {
    os.path.join('attention', os.path.basename(png)): grid(
      [panel(f'test #{index} (step {step})', *examples[index])], 1
    )
    for index, png in report_plots.final_heatmap_pngs(result).items()
    if index in examples
  }
