"""Results of a sweep directory: results.md, results.csv, plots and report.html.

    write_report('runs/score_timing')      # python -m attnlab.report runs/score_timing

Reads DIR/sweep.json (written by `attnlab.sweep`) and every trial directory. Trials are grouped
by their config file (the task) and, inside a group, by variant: the trial's overrides except
the seed. Per variant, on the test split: the metric as mean +- sample std over finished seeds,
how many seeds converged, other decoded metrics (PER, WER, BLEU, chrF when the task has them),
attention entropy and alignment error rate, parameter count, training tokens/s (median over
logging windows after the first, which includes compilation) and wall time per trial. Failed
trials are marked. Convergence (reporting/convergence.py): per trial, what ended it (patience,
the learning-rate floor, the step cap), was it still improving over the last quarter, did it
converge, and was it tested with its best checkpoint; a variant with a trial that did not
converge is marked and named under its table.

Significance, each variant against the best one of its group and each pair of variants that
differ in one setting alone, the others held (reporting/effects.py): across seeds, Welch's
t-test on the trials' test metric (reporting/seed_tests.py), Holm-corrected over the report's
family, every pair of a group's variants (reporting/comparisons.py, which prints the pairs the
tables leave out), whose adjusted p gives the finding; and over test examples
(test-set noise, reporting/stats.py), a paired bootstrap of per-example exact-match
correctness, read from each trial's predictions_test.jsonl ({"index": i, "correct": true} per
line), or of corpus BLEU of its "hypothesis" and "references" where the group is ranked by
BLEU. Plots
(reporting/plots.py) go to DIR/plots/. DIR/report.html (reporting/html.py) is results.md
as one self-contained page: sortable tables, the plots inline, hoverable attention heatmaps.
"""

from __future__ import annotations

import csv
import io
import os

import numpy as np

from attnlab.metrics import is_number, lower_is_better
from attnlab.reporting import comparisons, compute, convergence, effects, html, html_heatmaps
from attnlab.reporting import plots as report_plots
from attnlab.reporting.length_tables import by_length_table, fmt_stat
from attnlab.reporting.seed_tests import ALPHA, comparison_cells, finding, variant_test
from attnlab.reporting.stats import (
  BOOTSTRAP_SAMPLES,
  bootstrap_cells,
  p_resolution,
  primary_metric,
  rank,
  significance,
)
from attnlab.reporting.sweep_results import (
  PREDICTIONS,
  Variant,
  collect,
  mean_std,
)
from attnlab.sweeps import progress
from attnlab.sweeps import trials as trials_lib

EXTRA_METRICS = ('per', 'wer', 'bleu', 'chrf')  # shown when a task reports them
ATTENTION_METRICS = ('attention_entropy', 'alignment_error_rate')





def _columns(variants: list[Variant], metric: str) -> list[str]:
  present = lambda m: any(v.values(m) for v in variants)
  extras = [m for m in EXTRA_METRICS + ATTENTION_METRICS if m != metric and present(m)]
  return [metric] + extras


def group_table(
  variants: list[Variant], metric: str, best, tests, adjusted: dict[frozenset[str], float]
) -> list[str]:
  """The main table: each variant, against `best` across seeds (`adjusted`: the Holm p of each
  pair of labels) and over test examples (`tests`: `significance`)."""
  columns = _columns(variants, metric)
  head = [
    'variant',
    'seeds',
    'converged',
    'still improving',
    columns[0],
    'Δ vs best [95% CI]',
    'p',
    'Holm p',
    'finding',
    'Δ test examples [95% CI]',
    'p test examples',
  ]
  head += columns[1:]
  head += ['params', 'tokens/s', 'wall/trial', 'CPU/trial']
  lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
  for v in variants:
    seeds = f'{len(v.finished)}/{len(v.results)}'
    if v.failed:
      seeds += f' ({len(v.failed)} failed)'
    verdicts = [c for _, c in v.verdicts()]
    cells = [
      v.shown_label,
      seeds,
      convergence.count_cell(verdicts),
      convergence.improving_cell(verdicts),
      fmt_stat(v.stat(columns[0])),
    ]
    if v is best:
      cells += ['best', '', '', '', '', '']
    else:
      cells += comparison_cells(best, v, columns[0], adjusted) if best else ['–'] * 4
      cells += bootstrap_cells(tests.get(v.label))
    cells += [fmt_stat(v.stat(m)) for m in columns[1:]]
    params = sorted(
      {
        int(r.final['num_params'])
        for r in v.finished
        if is_number((r.final or {}).get('num_params'))
      }
    )
    rates = [r.tokens_per_sec for r in v.finished if r.tokens_per_sec is not None]
    walls, cpus = v.wall_times(), v.cpu_times()
    cpu = progress.duration(float(np.mean(cpus))) if cpus else '–'
    if cpus and len(cpus) < len(v.finished):  # trials run before CPU time was recorded
      cpu += f' ({len(cpus)} of {len(v.finished)})'
    cells += [
      '/'.join(f'{p:,}' for p in params) or '–',
      f'{np.mean(rates):,.0f}' if rates else '–',
      progress.duration(float(np.mean(walls))) if walls else '–',
      cpu,
    ]
    if not v.finished:
      cells[4] = 'failed' if v.failed else 'not run'
    lines.append('| ' + ' | '.join(cells) + ' |')
  return lines


def marginal_table(variants: list[Variant], metric: str) -> list[str]:
  """Each value of each swept setting pooled over every other setting and seed: mean ± std of
  `metric` over its finished trials (the main effect of one choice, e.g. timing over all
  scores). Only settings varied on their own somewhere (two variants differ in it alone): a list
  of decoders such as the bottleneck's, where the score changes only together with the timing,
  has no main effect of the score to show. Only where two or more such settings remain;
  otherwise it is the main table."""
  swept = {}
  for v in variants:
    for key, value in v.overrides.items():
      swept.setdefault(key, {}).setdefault(trials_lib.format_value(value), []).append(v)
  swept = {k: by_value for k, by_value in swept.items() if len(by_value) > 1}
  swept = {k: by_value for k, by_value in swept.items() if _varied_alone(variants, k)}
  if len(swept) < 2:
    return []
  short = trials_lib.short_keys(swept)
  lines = ['', f'Pooled over the other settings and seeds (test {metric}):', '']
  lines += ['| setting | trials | ' + metric + ' |', '|---|---|---|']
  for key, by_value in swept.items():
    for value, vs in by_value.items():
      values = [x for v in vs for x in v.values(metric)]
      lines.append(f'| {short[key]}={value} | {len(values)} | {fmt_stat(mean_std(values))} |')
  return lines


def _varied_alone(variants: list[Variant], key: str) -> bool:
  """Whether two variants differ in `key` and in no other override."""
  seen = {}
  for v in variants:
    rest = tuple(sorted((k, trials_lib.format_value(x)) for k, x in v.overrides.items()
                        if k != key))
    seen.setdefault(rest, set()).add(trials_lib.format_value(v.overrides.get(key)))
  return any(len(values) > 1 for values in seen.values())


def family_lines(size: int) -> list[str]:
  """What the tables' tests are, for the report's introduction; `size`: the family's tests."""
  return [
    'Across seeds (the unit of evidence: one test metric per trained model): Δ vs best is the '
    "variant's mean minus the best's in the table's metric, with a 95% interval and two-sided "
    "p from Welch's t-test over all finished seeds of each (Welch–Satterthwaite degrees of "
    "freedom; '–' with one seed on a side). Holm p: p corrected by Holm's step-down method over "
    "this report's family, every pair of variants of a group with two or more finished seeds "
    f"on each side ({size} test(s)), whichever variant came out best: a group's tables print "
    "its variants against the best, the one-setting-at-a-time pairs, then the family's other "
    "pairs. Finding: 'beyond seeds' where the Holm p is at most "
    f"{ALPHA:g}, else 'not shown'; '(still improving)' where a trial of either variant was "
    'still improving (Convergence below), so the gap may measure learning speed.',
    '',
    'Test examples (test-set noise: the same models on other test examples, not training '
    "variance): Δ is exact-match accuracy minus the best variant's (on G2P 1 - WER, so a "
    "negative Δ is that many more words wrong; corpus BLEU minus the best's where variants are "
    'ranked by BLEU), with a 95% interval and two-sided p from a paired bootstrap '
    f'({BOOTSTRAP_SAMPLES} resamples of test examples, paired by seed and example; p is twice '
    'the smaller share of resampled differences on a side of zero, so it resolves to '
    f'{p_resolution(BOOTSTRAP_SAMPLES):g}).',
  ]


def markdown(
  manifest: dict, groups: dict[str, list[Variant]], metric: str, plots: dict[str, dict[str, str]]
) -> str:
  results = [r for vs in groups.values() for v in vs for r in v.results]
  adjusted = comparisons.family(groups, metric)
  counts = {s: sum(r.state == s for r in results) for s in ('finished', 'failed')}
  unfinished = len(results) - counts['finished'] - counts['failed']
  lines = [
    f'# {manifest["name"]}',
    '',
    f'`python -m attnlab.sweep {manifest["experiment"]} --workdir=DIR`: '
    f'{len(results)} trials, {counts["finished"]} finished, {counts["failed"]} failed, '
    f'{unfinished} not finished.',
    '',
    'Test split. Metrics: mean ± std over finished seeds.',
    '',
    *family_lines(sum(len(tests) for tests in adjusted.values())),
    '',
    convergence.rule(),
    '',
    compute.compute_line([v for vs in groups.values() for v in vs]),
    *compute.provenance_lines([v for vs in groups.values() for v in vs]),
  ]
  for group, variants in groups.items():
    ranked_by = primary_metric(variants, metric)
    best = rank(variants, ranked_by)
    tests = significance(variants, best, ranked_by)
    order = 'lower' if lower_is_better(ranked_by) else 'higher'
    lines += ['', f'## {group}', '', f'Best by test {ranked_by} ({order} is better).', '']
    lines += group_table(variants, ranked_by, best, tests, adjusted[group])
    named = [v for v in variants if v.label != v.settings]
    if named:
      lines += ['', 'Variants: ' + '; '.join(f'{v.label}: `{v.settings}`' for v in named) + '.']
    lines += marginal_table(variants, ranked_by)
    lines += effects.pairs_table(variants, ranked_by, best, adjusted[group])
    lines += comparisons.rest_table(variants, ranked_by, best, adjusted[group])
    flag = convergence.flag_line([(v.label, v.verdicts()) for v in variants])
    if flag:
      lines += ['', flag]
    missing = [r.trial.name for v in variants for r in v.finished if r.predictions is None]
    if missing:
      lines += [
        '',
        f'No {PREDICTIONS} in {len(missing)} finished trial(s): no significance test for them.',
      ]
    lines += by_length_table(variants)
    for kind, path in plots.get(group, {}).items():
      lines += ['', f'![{kind}]({path})']
    rows = [(v.label, seed, c) for v in variants for seed, c in v.verdicts()]
    if rows:
      lines += ['', f'### Convergence: {group}', ''] + convergence.trial_table(rows)
  failed = [r for r in results if r.state == 'failed']
  if failed:
    lines += ['', '## Failed trials', '']
    lines += [f'- `{r.trial.name}`: {r.status.get("error") or "unknown error"}' for r in failed]
  others = [r for r in results if r.state not in ('finished', 'failed')]
  if others:
    lines += ['', '## Not finished', '']
    if any(r.state == 'new' for r in others):
      lines += ["New: no run of it in this directory. An archive (the sweep's --archive) holds "
                "finished trials only, so one still running in the sweep's workdir shows as new "
                'here.', '']
    lines += [f'- `{r.trial.name}`: {r.state}' for r in others]
  return html.join_lines(lines)  # a newline in a value (name, error) stays in its line


def csv_text(groups: dict[str, list[Variant]], metric: str) -> str:
  """One row per variant: every scalar test metric's mean and std, cost, significance against
  the best over test examples (delta_vs_best ... p_value) and across seeds (seed_...)."""
  variants = [v for vs in groups.values() for v in vs]
  adjusted = comparisons.family(groups, metric)
  names = sorted(
    {k for v in variants for r in v.finished for k, x in r.test.items() if is_number(x)}
  )
  head = ['group', 'variant', 'settings', 'ranked_by', 'seeds_finished', 'seeds_failed']
  head += [f'{m}_{s}' for m in names for s in ('mean', 'std')]
  head += ['num_params', 'tokens_per_sec', 'wall_s', 'cpu_s']
  head += ['delta_vs_best', 'ci_low', 'ci_high']
  head += ['p_value', 'seeds_converged', 'seeds_undecided', 'seeds_tested_on_best']
  head += ['max_movement_points']  # the largest last-quarter movement of its trials
  head += ['seeds_still_improving', 'seed_delta_vs_best', 'seed_ci_low', 'seed_ci_high']
  head += ['seed_p_value', 'seed_holm_p_value', 'finding']
  out = io.StringIO()
  writer = csv.writer(out, lineterminator='\n')
  writer.writerow(head)
  num = lambda x: '' if x is None else f'{x:.6g}'
  for group, vs in groups.items():
    ranked_by = primary_metric(vs, metric)
    best = rank(vs, ranked_by)
    tests = significance(vs, best, ranked_by)
    for v in vs:
      row = [group, v.label, v.settings, ranked_by, len(v.finished), len(v.failed)]
      for m in names:
        stat = v.stat(m)
        row += [num(stat[0]), num(stat[1])] if stat else ['', '']
      params = [r.final['num_params'] for r in v.finished if 'num_params' in r.final]
      rates = [r.tokens_per_sec for r in v.finished if r.tokens_per_sec is not None]
      walls, cpus = v.wall_times(), v.cpu_times()
      row += [
        num(float(np.mean(params))) if params else '',
        num(float(np.mean(rates))) if rates else '',
        num(float(np.mean(walls))) if walls else '',
        num(float(np.mean(cpus))) if cpus else '',
      ]
      t = tests.get(v.label, {})
      row += [num(t.get(k)) for k in ('delta', 'ci_low', 'ci_high', 'p_value')]
      verdicts = [c for _, c in v.verdicts()]
      moved = [c.movement for c in verdicts if c.movement is not None]
      row += [
        sum(c.converged for c in verdicts),
        sum(c.verdict == convergence.UNDECIDED for c in verdicts),
        sum(c.tested_on_best for c in verdicts),
        num(max(moved)) if moved else '',
        sum(bool(c.still_improving) for c in verdicts),
      ]
      seed = variant_test(best, v, ranked_by) if best and v is not best else None
      holm_p = adjusted[group].get(frozenset((v.label, best.label))) if seed else None
      row += [num((seed or {}).get(k)) for k in ('delta', 'ci_low', 'ci_high', 'p_value')]
      row += [num(holm_p), finding(holm_p) if seed else '']
      writer.writerow(row)
  return out.getvalue()


def check_metric(groups: dict[str, list[Variant]], metric: str) -> None:
  """A SweepError naming the choices unless `metric` is 'auto' or a number some finished
  trial's test metrics hold."""
  reported = sorted({k for vs in groups.values() for v in vs for r in v.finished
                     for k, x in r.test.items() if is_number(x)})
  if metric != 'auto' and metric not in reported:
    raise trials_lib.SweepError(
      f'--metric={metric}: no finished trial reports that test metric; choose from auto'
      + ''.join(f', {m}' for m in reported)
    )


def write_report(workdir: str, metric: str = 'auto', *, plots: bool = True) -> str:
  """Writes results.md, results.csv, plots/ and report.html (the same, self-contained, with
  sortable tables and hoverable heatmaps) into `workdir`; returns the results.md path."""
  manifest, groups = collect(workdir)
  check_metric(groups, metric)  # before anything is written over the last report
  written = {}
  if plots:
    for group, variants in groups.items():
      written[group] = report_plots.plot_group(
        workdir, group, variants, primary_metric(variants, metric)
      )
  with open(os.path.join(workdir, 'results.csv'), 'w') as f:
    f.write(csv_text(groups, metric))
  text = markdown(manifest, groups, metric, written)
  path = os.path.join(workdir, 'results.md')
  with open(path, 'w') as f:
    f.write(text)
  figures = {}  # the attention PNG -> the same grid, interactive, where weights were saved
  for group, variants in groups.items():
    grid = html_heatmaps.sweep_grid(variants) if 'attention' in written.get(group, {}) else None
    if grid:
      figures[written[group]['attention']] = grid
  html.write_html(os.path.join(workdir, html.FILE_NAME), text, base_dir=workdir, figures=figures)
  return path
