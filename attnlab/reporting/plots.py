"""The report's PNG plots of one group of variants (matplotlib, Agg, no display).

    metric     the test metric per variant: mean with a std error bar, each seed as a dot
    by_length  test sequence accuracy per source-length bucket (Bahdanau et al. 2015, Fig. 2)
    curves     training loss (mean over seeds) and the dev selection metric of every trial
               against the step, a dot at each trial's selected step: convergence, visible
    attention  the same test examples' attention heatmaps across variants (one seed)

For the attention grid the weights come from attention/test_stepNNNNNNN.npz (keys
`weights_<index>`, `source_<index>`, `output_<index>` per heatmap example); without it the
grid tiles the per-example heatmap PNGs that the evaluation wrote.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

import matplotlib
import numpy as np
from etils import epath
from matplotlib import image as mpimg
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from attnlab.decoding import heatmaps
from attnlab.reporting import convergence
from attnlab.rundir import layout
from attnlab.sweeps.trials import SEED_KEY, config_label

MAX_EXAMPLES = 2  # rows of the attention grid
_PNG_NAME = re.compile(r'^test_step(\d+)_ex(\d+)\.png$')


def save_figure(fig: Figure, path: str) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  FigureCanvasAgg(fig)
  fig.savefig(path, format='png', dpi=110)


def _height(n: int) -> float:
  return max(2.5, 0.35 * n + 1.2)


def plot_metric(path: str, variants: Sequence, metric: str) -> bool:
  rows = [(v.label, v.values(metric)) for v in variants]
  rows = [(label, values) for label, values in rows if values]
  if not rows:
    return False
  fig = Figure(figsize=(7.0, _height(len(rows))), layout='constrained')
  ax = fig.add_subplot()
  y = np.arange(len(rows))
  means = [np.mean(values) for _, values in rows]
  stds = [np.std(values, ddof=1) if len(values) > 1 else 0.0 for _, values in rows]
  ax.barh(y, means, xerr=stds, color='#8fb3d9', capsize=4)
  for i, (_, values) in enumerate(rows):
    ax.plot(values, [i] * len(values), 'o', color='#1f3b5c', markersize=3)
  ax.set_yticks(y)
  ax.set_yticklabels([label for label, _ in rows], fontsize=8)
  ax.invert_yaxis()
  ax.set_xlabel(f'test {metric} (mean ± std over seeds; dots: seeds)')
  save_figure(fig, path)
  return True


def bucket_start(name: str) -> float:
  return float(re.match(r'\d+', name).group())


def length_series(
  variants: Sequence, score: str = 'bleu'
) -> tuple[bool, dict[str, dict[str, list[float]]]]:
  """(is BLEU, variant label -> source-length bucket -> one test value per finished seed):
  `score` (one of bleu_scores.BUCKET_SCORES) per bucket in words where the trials report BLEU by
  length (translation: Bahdanau et al. 2015, Fig. 2), else sequence accuracy per bucket in
  tokens. Empty buckets are left out."""
  bleu = any(r.test.get('bleu_by_length') for v in variants for r in v.finished)
  key, value = ('bleu_by_length', score) if bleu else ('by_length', 'mean')
  series = {}
  for v in variants:
    per_bucket: dict[str, list[float]] = {}
    for r in v.finished:
      for b in r.test.get(key) or []:
        if b.get('count') and b.get(value) is not None:
          per_bucket.setdefault(b['bucket'], []).append(float(b[value]))
    if per_bucket:
      series[v.label] = per_bucket
  return bleu, series


def plot_by_length(path: str, variants: Sequence) -> bool:
  """`length_series` per variant: mean with the seed std as error bars."""
  bleu, series = length_series(variants)
  if not series:
    return False
  buckets = sorted({b for s in series.values() for b in s}, key=bucket_start)
  fig = Figure(figsize=(7.5, 4.2), layout='constrained')
  ax = fig.add_subplot()
  x = np.arange(len(buckets))
  for label, per_bucket in series.items():
    xs = [i for i, b in enumerate(buckets) if b in per_bucket]
    values = [per_bucket[buckets[i]] for i in xs]
    errs = [np.std(v, ddof=1) if len(v) > 1 else 0.0 for v in values]
    ax.errorbar(xs, [np.mean(v) for v in values], yerr=errs, marker='o', capsize=3, label=label)
  ax.set_xticks(x)
  ax.set_xticklabels(buckets)
  if bleu:
    ax.set_xlabel('source length (words)')
    ax.set_ylabel('test BLEU')
    ax.set_ylim(bottom=0)
  else:
    ax.set_xlabel('source length (tokens)')
    ax.set_ylabel('test sequence accuracy')
    ax.set_ylim(-0.02, 1.02)
  ax.legend(fontsize=7)
  save_figure(fig, path)
  return True


def _curve(results, split: str, key: str) -> tuple[list[int], list[float]]:
  """Mean over seeds of `key` at the steps every seed logged."""
  per_seed = [
    {e['step']: e[key] for e in r.events if e.get('split') == split and key in e} for r in results
  ]
  per_seed = [s for s in per_seed if s]
  if not per_seed:
    return [], []
  steps = sorted(set.intersection(*(set(s) for s in per_seed)))
  return steps, [float(np.mean([s[t] for s in per_seed])) for t in steps]


def _colours(n: int) -> list:
  """One colour per variant: matplotlib's cycle, tab20 beyond its 10."""
  if n <= 10:
    return [f'C{i}' for i in range(n)]
  return [matplotlib.colormaps['tab20'](i % 20) for i in range(n)]


def _dev_curves(variants: Sequence, fallback: str) -> tuple[str, list, int | None]:
  """The dev metric the trials selected on (`fallback` unless all agree on one), per variant
  [(eval curve, selected step)] of its finished trials, and their last step if they share one."""
  verdicts = [[(r, convergence.assess(r.final, r.events)) for r in v.finished] for v in variants]
  chosen = {c.metric for trials in verdicts for _, c in trials} - {None}
  metric = chosen.pop() if len(chosen) == 1 else fallback
  curves = [
    [(convergence.eval_curve(r.events, metric), c.selected_step) for r, c in trials]
    for trials in verdicts
  ]
  lasts = {c.last_step for trials in verdicts for _, c in trials}
  return metric, curves, (lasts.pop() if len(lasts) == 1 else None)


def plot_curves(path: str, variants: Sequence, metric: str) -> bool:
  """Training loss per variant (mean over seeds) and the dev selection metric of every trial
  (`metric` when the trials record none): one line per trial, coloured by variant."""
  dev_metric, dev, last = _dev_curves(variants, metric)
  has_loss = any(_curve(v.finished, 'train', 'loss')[0] for v in variants)
  has_dev = any(curve for trials in dev for curve, _ in trials)
  drawn = [kind for kind, present in (('loss', has_loss), ('dev', has_dev)) if present]
  if not drawn:
    return False
  fig = Figure(figsize=(5.0 * len(drawn) + 1.5, 4.0), layout='constrained')
  axes = dict(zip(drawn, fig.subplots(1, len(drawn), squeeze=False)[0], strict=True))
  colours = _colours(len(variants))
  for v, colour, trials in zip(variants, colours, dev, strict=True):
    if 'loss' in axes:
      steps, values = _curve(v.finished, 'train', 'loss')
      if steps:
        axes['loss'].plot(steps, values, marker='.', color=colour, label=v.label)
    if 'dev' in axes:
      labelled = False
      for curve, selected in trials:
        if not curve:
          continue
        steps, values = zip(*curve, strict=True)
        label = None if labelled else v.label
        axes['dev'].plot(steps, values, '.-', color=colour, lw=1, ms=3, alpha=0.8, label=label)
        labelled = True
        value_at = dict(curve)
        if selected in value_at:  # the selected (best dev) step
          axes['dev'].plot([selected], [value_at[selected]], 'o', color=colour, mec='black', ms=6)
  single = sum(len(v.finished) for v in variants) == 1  # one run (a run report): no seeds
  dev_title = f'{convergence.DEV} {dev_metric}' + ('' if single else ', every trial')
  dev_title += ' (dot: selected step'
  if 'dev' in axes and last:  # the window convergence is judged on (reporting/convergence.py)
    axes['dev'].axvspan((1 - convergence.LAST_FRACTION) * last, last, color='0.92', zorder=0)
    dev_title += '; shaded: last quarter'
  loss_title = 'training loss' + ('' if single else ' (mean over seeds)') + ', log scale'
  if 'loss' in axes:  # the first steps' loss is ~20x the converged one: log shows both
    axes['loss'].set_yscale('log')
  titles = {'loss': loss_title, 'dev': dev_title + ')'}
  for kind, ax in axes.items():
    ax.set_xlabel('step')
    ax.set_title(titles[kind], fontsize=9)
  axes[drawn[-1]].legend(fontsize=7)
  save_figure(fig, path)
  return True


def _heatmap_trials(variants: Sequence) -> list:
  """One finished trial per variant, all with the same seed where possible (same examples)."""
  seeds = [{r.trial.overrides.get(SEED_KEY) for r in v.finished} for v in variants if v.finished]
  common = sorted(set.intersection(*seeds), key=str) if seeds else []
  chosen = []
  for v in variants:
    pick = [r for r in v.finished if common and r.trial.overrides.get(SEED_KEY) == common[0]]
    if pick or v.finished:
      chosen.append((v.label, (pick or v.finished)[0]))
  return chosen


def _npz(result) -> str:
  step = result.final['step']
  return os.path.join(result.directory, layout.ATTENTION, f'test_step{step:07d}.npz')


def final_heatmap_pngs(result) -> dict[int, str]:
  folder, step = os.path.join(result.directory, layout.ATTENTION), result.final['step']
  out = {}
  names = [p.name for p in epath.Path(folder).iterdir()] if epath.Path(folder).is_dir() else []
  for name in names:
    match = _PNG_NAME.match(name)
    if match and int(match.group(1)) == step:
      out[int(match.group(2))] = os.path.join(folder, name)
  return out


def plot_attention(path: str, variants: Sequence) -> bool:
  chosen = [
    (label, r)
    for label, r in _heatmap_trials(variants)
    if os.path.isfile(_npz(r)) or final_heatmap_pngs(r)
  ]
  if not chosen:
    return False  # e.g. only timing=none / fixed variants: no attention to show
  if all(os.path.isfile(_npz(r)) for _, r in chosen):
    arrays = []
    for label, r in chosen:
      with np.load(_npz(r)) as data:
        arrays.append((label, r, {k: data[k] for k in data.files}))
    indices = set.intersection(
      *({int(k.split('_')[1]) for k in a if k.startswith('weights_')} for _, _, a in arrays)
    )
    panels = []
    for index in sorted(indices)[:MAX_EXAMPLES]:
      for label, r, a in arrays:
        seed = r.trial.overrides.get(SEED_KEY)
        panels.append(
          (
            f'{label}\n#{index} (seed {seed})',
            a[f'weights_{index}'],
            [str(t) for t in a[f'source_{index}']],
            [str(t) for t in a[f'output_{index}']],
          )
        )
    if panels:
      heatmaps.save_heatmap_grid(path, panels, ncols=len(arrays))
      return True
    return False
  pngs = [(label, r, final_heatmap_pngs(r)) for label, r in chosen]
  indices = sorted(set.intersection(*(set(p) for _, _, p in pngs)))[:MAX_EXAMPLES]
  if not indices:
    return False
  fig = Figure(figsize=(3.2 * len(pngs), 3.4 * len(indices)), layout='constrained')
  axes = fig.subplots(len(indices), len(pngs), squeeze=False)
  for row, index in enumerate(indices):
    for col, (label, r, files) in enumerate(pngs):
      ax = axes[row][col]
      ax.imshow(mpimg.imread(files[index]))
      ax.set_axis_off()
      ax.set_title(f'{label}\n#{index} (seed {r.trial.overrides.get(SEED_KEY)})', fontsize=7)
  save_figure(fig, path)
  return True


def plot_group(workdir: str, group: str, variants: Sequence, metric: str) -> dict[str, str]:
  """Writes the group's plots; returns kind -> path relative to `workdir` of those drawn."""
  slug = config_label(group)
  drawn = {}
  for kind, draw in (
    ('metric', lambda p: plot_metric(p, variants, metric)),
    ('by_length', lambda p: plot_by_length(p, variants)),
    ('curves', lambda p: plot_curves(p, variants, metric)),
    ('attention', lambda p: plot_attention(p, variants)),
  ):
    relative = os.path.join('plots', f'{slug}-{kind}.png')
    if draw(os.path.join(workdir, relative)):
      drawn[kind] = relative
  return drawn
