"""`python -m attnlab.report DIR [--metric=auto]`: a sweep directory's report.

    python -m attnlab.report runs/score_timing

Writes DIR/results.md, results.csv, plots/ and report.html (attnlab/reporting/sweep_report.py
says what they hold) and prints the paths of results.md and report.html.
"""

import os

from absl import app, flags

from attnlab import cli
from attnlab.reporting import html, sweep_report

_METRIC = flags.DEFINE_string(
  'metric',
  'auto',
  'Test metric that ranks variants (auto: the metric the trials were selected on, e.g. wer for '
  'G2P and bleu for translation; else wer where reported, else sequence_accuracy).',
)


def main(argv):
  if len(argv) != 2:
    raise app.UsageError('usage: python -m attnlab.report DIR [--metric=auto]')
  print(sweep_report.write_report(argv[1], _METRIC.value))
  print(os.path.join(argv[1], html.FILE_NAME))


def run() -> None:
  """The `attnlab-report` command (pyproject.toml's scripts), as `python -m attnlab.report`."""
  cli.run(main)


if __name__ == '__main__':
  run()
