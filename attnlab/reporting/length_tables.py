"""The sweep report's tables by source length (Bahdanau et al. 2015, Fig. 2): the by-length
plot's numbers, mean ± std over seeds, and for translation the parts that shape its BLEU curve
(each bucket's brevity penalty and chrF, bleu_scores.bleu_by_length)."""

from __future__ import annotations

from attnlab.reporting import plots as report_plots
from attnlab.reporting.sweep_results import Variant, mean_std


def fmt_stat(stat, digits: int = 3) -> str:
  """'mean ± std' (or 'mean' for one seed, '–' for none) of a `mean_std` result."""
  if stat is None:
    return '–'
  mean, std = stat
  return f'{mean:.{digits}f}' + (f' ± {std:.{digits}f}' if std is not None else '')


def by_length_table(variants: list[Variant]) -> list[str]:
  """The by-length plot's numbers (Bahdanau et al. 2015, Fig. 2), mean ± std over seeds: test
  BLEU per source-length bucket in words for translation, else test sequence accuracy per
  bucket in tokens."""
  bleu, series = report_plots.length_series(variants)
  if not series:
    return []
  metric, unit, digits = ('BLEU', 'words', 1) if bleu else ('sequence accuracy', 'tokens', 3)
  lines = ['', f'Test {metric} by source length in {unit} (Bahdanau et al. 2015, Fig. 2):', '']
  lines += _length_rows(series, digits)
  if bleu:  # what shapes the BLEU curve: output length against the references, and chrF
    for score, title, digits in BLEU_PARTS:
      _, parts = report_plots.length_series(variants, score)
      if parts:
        lines += ['', title, ''] + _length_rows(parts, digits)
  return lines


# The parts of the BLEU-by-length table beside it (bleu_scores.bleu_by_length), with their digits.
BLEU_PARTS = (
  ('brevity_penalty', "BLEU's brevity penalty in each bucket (1 = output not shorter than the "
   'references; below, exp(1 - reference length / output length) multiplies the BLEU above):',
   3),
  ('chrf', 'Test chrF by source length in words (character n-grams, no brevity penalty):', 1),
)


def _length_rows(series: dict[str, dict[str, list[float]]], digits: int) -> list[str]:
  """A markdown table: variant x source-length bucket, mean ± std over seeds."""
  buckets = sorted({b for s in series.values() for b in s}, key=report_plots.bucket_start)
  lines = ['| variant | ' + ' | '.join(buckets) + ' |', '|' + '---|' * (len(buckets) + 1)]
  for label, per_bucket in series.items():
    cells = [fmt_stat(mean_std(per_bucket[b]), digits) if b in per_bucket else '–' for b in buckets]
    lines.append(f'| {label} | ' + ' | '.join(cells) + ' |')
  return lines
