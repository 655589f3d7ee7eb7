"""Results of one finished run directory: a publishable folder with README.md and plots.

    write_run_report('runs/g2p-final', 'results/g2p', command=..., wall_s=None)
    # python -m attnlab.run_report (attnlab/run_report.py)

Reads RUN_DIR/config.json, final_metrics.json, metrics.jsonl, run_times.jsonl (written by
attnlab.train.loop) and the final test step's attention heatmaps. Writes OUT/README.md (command,
wall time, parameters, steps, training tokens/s, final metrics per split, whether the run
converged (reporting/convergence.py: what ended it, patience, the learning-rate floor or the
step cap, and whether the dev selection metric still moved over the last quarter), breakdowns
by source length, locale and format), OUT/by_length.png, OUT/learning_curve.png (with the dev
curve and its selected step), up to `MAX_HEATMAPS` heatmaps in OUT/attention/, the run's files
as a sweep archive keeps a trial (run_folder.py: config.json, final_metrics.json, metrics, test
predictions, run times, provenance), and OUT/report.html: the README as one self-contained page
(reporting/html.py) whose heatmaps, drawn from the run's saved weights, show token and weight
on hover. With --model, also the best checkpoint and vocabularies (rundir/publish.py): OUT then
opens as a run.
Wall time: --wall_s, else the sum over RUN_DIR/run_times.jsonl (one line per process run).
RUN_DIR may be a bucket's folder (gs://bucket/run, read through etils.epath); OUT is local.
OUT must be a new or empty folder, or this run's report from before (run_folder.check_out),
which is then written again.
"""

from __future__ import annotations

import json
import os
import re

import numpy as np
from etils import epath
from matplotlib.figure import Figure

from attnlab import storage
from attnlab.metrics import is_number
from attnlab.reporting import convergence, html, html_heatmaps, run_folder, sweep_results
from attnlab.reporting import plots as report_plots
from attnlab.reporting import stats as report_stats
from attnlab.rundir import layout, publish
from attnlab.rundir.layout import RUN_TIMES
from attnlab.runtime import provenance
from attnlab.sweeps.progress import duration
from attnlab.sweeps.trials import Trial

MAX_HEATMAPS = 3
PRIORITY = ('sequence_accuracy', 'wer', 'per')  # shown first in the metrics table
BREAKDOWNS = (('accuracy_by_locale', 'locale'), ('accuracy_by_format', 'format'))



def _load_json(run_dir: str, name: str) -> dict:
  path = os.path.join(run_dir, name)
  if not epath.Path(path).is_file():
    raise run_folder.RunReportError(f'{path} not found: {run_dir} is not a finished run directory')
  return json.loads(storage.read_text(path))


def _is_percent(name: str) -> bool:
  return name.endswith('accuracy') or name in ('wer', 'per')


def _fmt(name: str, value) -> str:
  if value is None:
    return '–'
  if _is_percent(name):
    return f'{100 * value:.2f}%'
  if name.startswith('num_'):
    return f'{int(value):,}'
  return f'{value:.4f}'


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
  lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
  return lines + ['| ' + ' | '.join(row) + ' |' for row in rows]


def metrics_table(final: dict, splits: list[str]) -> list[str]:
  names = [n for s in splits for n, v in final[s].items() if is_number(v)]
  names = sorted(dict.fromkeys(names), key=lambda n: PRIORITY.index(n) if n in PRIORITY else 99)
  rows = [[n] + [_fmt(n, final[s].get(n)) for s in splits] for n in names]
  return _table(['metric', *splits], rows)


def length_table(metrics: dict) -> list[str]:
  """Per non-empty source-length bucket: BLEU (bleu_by_length, buckets in words: translation;
  Bahdanau et al. 2015, Fig. 2), else sequence accuracy (by_length) and WER (wer_by_length) in
  tokens. Exact match says nothing about translations of whole verses, so BLEU replaces it."""
  if metrics.get('bleu_by_length'):
    buckets = [b for b in metrics['bleu_by_length'] if b.get('count')]
    # chrF and the brevity penalty where the evaluation gave them (bleu_scores.bleu_by_length)
    scores = [k for k in ('bleu', 'brevity_penalty', 'chrf') if buckets and k in buckets[0]]
    digits = {'bleu': 2, 'brevity_penalty': 3, 'chrf': 2}
    rows = [[b['bucket'], f'{b["count"]:,}', *(f'{b[k]:.{digits[k]}f}' for k in scores)]
            for b in buckets]
    return _table(['source length (words)', 'examples', *scores], rows) if rows else []
  series = [
    (label, metrics.get(key))
    for key, label in (('by_length', 'sequence_accuracy'), ('wer_by_length', 'wer'))
  ]
  series = [(label, {b['bucket']: b for b in s}) for label, s in series if s]
  buckets = {b for _, s in series for b, v in s.items() if v.get('count')}
  rows = []
  for bucket in sorted(buckets, key=report_plots.bucket_start):
    count = next(s[bucket]['count'] for _, s in series if bucket in s)
    rows.append(
      [bucket, f'{count:,}'] + [_fmt(label, s.get(bucket, {}).get('mean')) for label, s in series]
    )
  return (
    _table(['source length', 'examples', *(label for label, _ in series)], rows) if rows else []
  )


def breakdown_table(final: dict, splits: list[str], key: str, name: str) -> list[str]:
  """Accuracy per locale / format (sorted by name) and split; the metrics hold no counts."""
  per_split = {s: final[s][key] for s in splits if final[s].get(key)}
  groups = sorted({g for d in per_split.values() for g in d})
  rows = [[g] + [_fmt('accuracy', d.get(g)) for d in per_split.values()] for g in groups]
  return _table([name] + [f'{s} accuracy' for s in per_split], rows) if rows else []


def _length_lines(final: dict, splits: list[str]) -> tuple[list, str, str]:
  """(split, style, label, [(bucket, value)]) per curve, the x and the y axis labels."""
  lines = []
  if any(final[s].get('bleu_by_length') for s in splits):
    for s in splits:
      points = [(b['bucket'], b['bleu']) for b in final[s].get('bleu_by_length') or []
                if b.get('count')]
      if points:
        lines.append((s, '-', f'{s} BLEU', points))
    return lines, 'source length (words)', 'BLEU'
  for s in splits:
    for key, style, label, value in (
      ('by_length', '-', 'sequence accuracy', lambda m: m),
      ('wer_by_length', '--', '1 - WER', lambda m: 1.0 - m),
    ):
      buckets = [b for b in final[s].get(key) or [] if b.get('count')]
      points = [(b['bucket'], value(b['mean'])) for b in buckets]
      if points:
        lines.append((s, style, f'{s} {label}', points))
  return lines, 'source length (tokens)', 'accuracy'


def plot_run_by_length(path: str, final: dict, splits: list[str]) -> bool:
  """BLEU per source-length bucket in words (translation), else sequence accuracy (solid) and
  1 - WER (dashed) per bucket in tokens, one colour per split."""
  lines, xlabel, ylabel = _length_lines(final, splits)
  if not lines:
    return False
  buckets = sorted({b for *_, points in lines for b, _ in points}, key=report_plots.bucket_start)
  fig = Figure(figsize=(7.5, 4.2), layout='constrained')
  ax = fig.add_subplot()
  colors = {s: f'C{i}' for i, s in enumerate(splits)}
  for split, style, label, points in lines:
    xs = [buckets.index(b) for b, _ in points]
    ax.plot(xs, [v for _, v in points], style, marker='o', color=colors[split], label=label)
  ax.set_xticks(np.arange(len(buckets)))
  ax.set_xticklabels(buckets)
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  if ylabel == 'accuracy':
    ax.set_ylim(-0.02, 1.02)
  else:
    ax.set_ylim(bottom=0)
  ax.legend(fontsize=8)
  report_plots.save_figure(fig, path)
  return True


def read_run(run_dir: str, config_file: str) -> sweep_results.TrialResult:
  """The run as a one-trial result, so the sweep report's helpers apply to it."""
  final = _load_json(run_dir, layout.FINAL_METRICS_FILE)
  # A resumed run logs some steps twice; the last entry per (step, split) wins.
  events = {
    (e.get('step'), e.get('split')): e
    for e in sweep_results.read_jsonl(os.path.join(run_dir, layout.METRICS_FILE))
  }
  trial = Trial(os.path.basename(os.path.normpath(run_dir)), config_file, {}, {})
  events = sorted(events.values(), key=lambda e: e.get('step', 0))
  return sweep_results.TrialResult(trial, run_dir, 'finished', {}, final, events, None)


def _wall_time(run_dir: str, wall_s: float | None) -> str:
  if wall_s is not None:
    return f'{duration(wall_s)} ({wall_s:,.0f} s, from --wall_s)'
  lines = sweep_results.read_jsonl(os.path.join(run_dir, RUN_TIMES))
  times = [r['wall_s'] for r in lines if is_number(r.get('wall_s'))]
  if not times:
    return 'not recorded'
  total = sum(times)
  text = f'{duration(total)} ({total:,.0f} s, sum over {len(times)} process run(s) in {RUN_TIMES})'
  cpu = sweep_results.cpu_seconds(lines)
  text = text if cpu is None else f'{text}; CPU time {duration(cpu)} ({cpu:,.0f} s)'
  named = sorted({r['machine'] for r in lines if r.get('machine')})
  return f'{text}; on {", ".join(named)}' if named else text


def summary(run_dir: str, result, task: str, config_file: str, command, wall_s) -> list[str]:
  final, rate = result.final, result.tokens_per_sec
  return [
    f'# {task}: {config_file or "config file not recorded"}',
    '',
    f'Run directory `{run_dir}`, reported by `python -m attnlab.run_report`. Full config: '
    '[config.json](config.json); metrics: [final_metrics.json](final_metrics.json).',
    '',
    'Command:',
    '',
    f'    {command}' if command else '    (not recorded)',
    '',
    f'- Wall time: {_wall_time(run_dir, wall_s)}',
    f'- Parameters: {final.get("num_params", 0):,}',
    f'- Training steps: {final.get("trained_steps", final.get("step", 0)):,}',
    *(
      [f'- Tested checkpoint: step {final["step"]:,}, selected on eval {selected}']
      if (selected := (final.get('selection') or {}).get('metric'))
      else []
    ),
    *([f'- Provenance: {provenance.one_line(entries[-1])}']
      if (entries := sweep_results.read_jsonl(os.path.join(run_dir, layout.PROVENANCE)))
      else []),
    '- Training throughput: '
    + (
      f'{rate:,.0f} tokens/s (median over logging windows after the first, which includes '
      'compilation)'
      if rate is not None
      else 'not recorded'
    ),
  ]


def plots(out: str, result, task: str, splits: list[str]) -> list[str]:
  """Writes by_length.png, learning_curve.png and attention/; returns their markdown."""
  lines = ['', '## Plots']
  if plot_run_by_length(os.path.join(out, 'by_length.png'), result.final, splits):
    what = 'BLEU' if any(result.final[s].get('bleu_by_length') for s in splits) else 'accuracy'
    lines += ['', f'![{what} by source length](by_length.png)']
  variant = sweep_results.Variant(task, task, {}, [result])  # the sweep report's curves, one trial
  metric = report_stats.primary_metric([variant], 'auto')
  if report_plots.plot_curves(os.path.join(out, 'learning_curve.png'), [variant], metric):
    shown = result.verdict.metric or metric  # the curve shows the metric the run selected on
    lines += ['', f'![training loss and eval {shown}](learning_curve.png)']
  heatmaps = report_plots.final_heatmap_pngs(result)  # index -> PNG of the final test step
  if heatmaps:
    os.makedirs(os.path.join(out, layout.ATTENTION), exist_ok=True)
    lines += ['', f'Attention of the first test examples at step {result.final["step"]}:']
  for index in sorted(heatmaps)[:MAX_HEATMAPS]:
    name = os.path.join(layout.ATTENTION, os.path.basename(heatmaps[index]))
    storage.copy_file(heatmaps[index], os.path.join(out, name))
    lines += ['', f'![test example {index}]({name})']
  return lines


def write_run_report(
  run_dir: str,
  out: str,
  *,
  command: str | None = None,
  wall_s: float | None = None,
  model: bool = False,
) -> str:
  """Writes OUT/README.md, plots and copies (see the module docstring), with `model` also the
  best checkpoint and vocabularies (rundir/publish.py); returns the README path.

  Raises:
    RunReportError (run_folder.py): RUN_DIR lacks config.json or final_metrics.json, or OUT may
      not be written (`check_out`); nothing is written then.
    PublishError: `model` and RUN_DIR has no best checkpoint or vocabularies; nothing is
      written then.
  """
  config = _load_json(run_dir, layout.CONFIG_FILE)
  match = re.search(r'--config[= ]([^\s\'"]+)', command or '')
  config_file = match.group(1) if match else ''
  result = read_run(run_dir, config_file)
  final, task = result.final, config.get('task', {}).get('name', '?')
  # Splits are the dicts of final_metrics.json, except `selection` (how the step was chosen).
  splits = [s for s, v in final.items() if isinstance(v, dict) and s != 'selection']
  run_folder.check_out(run_dir, out)
  if model:
    publish.check_model(run_dir)  # refused before anything is written
  os.makedirs(out, exist_ok=True)
  run_folder.archive_run(run_dir, out)
  lines = summary(run_dir, result, task, config_file, command, wall_s)
  if model:
    lines += run_folder.model_lines(run_dir, out, publish.copy_model(run_dir, out))
  lines += ['', '## Final metrics', ''] + metrics_table(final, splits)
  lines += ['', convergence.run_line(result.verdict)]
  for s in splits:
    table = length_table(final[s])
    if table:
      lines += ['', f'## By source length: {s}', ''] + table
  for key, name in BREAKDOWNS:
    table = breakdown_table(final, splits, key, name)
    if table:
      lines += ['', f'## By {name}', ''] + table
  lines += plots(out, result, task, splits)
  text = html.join_lines(lines)  # a newline in a value (task name, command) stays in its line
  path = os.path.join(out, 'README.md')
  with open(path, 'w') as f:
    f.write(text)
  figures = html_heatmaps.run_figures(result)  # heatmap PNGs -> interactive, from the .npz
  html.write_html(os.path.join(out, html.FILE_NAME), text, base_dir=out, figures=figures)
  return path
