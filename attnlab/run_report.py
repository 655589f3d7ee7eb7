"""`python -m attnlab.run_report RUN_DIR --out=DIR`: one finished run as a publishable folder.

    python -m attnlab.run_report runs/g2p-final --out=results/g2p \\
        [--command='python -m attnlab.main --config=configs/g2p.py --workdir=runs/g2p-final'] \\
        [--wall_s=SECONDS] [--model]

Writes DIR/README.md, plots, heatmaps and report.html (attnlab/reporting/run_report.py says
what they hold) and prints the paths of README.md and report.html. --model adds the best
checkpoint's parameters and the vocabularies, so that attnlab.decode, evaluate, explore and
load_run open DIR as a run.
"""

import os

from absl import app, flags

from attnlab import cli
from attnlab.reporting import html
from attnlab.reporting.run_report import write_run_report

_OUT = flags.DEFINE_string('out', None, 'Results folder to write (README.md, plots).')
_COMMAND = flags.DEFINE_string('command', None, 'The exact command that trained the run.')
_WALL_S = flags.DEFINE_float('wall_s', None, 'Wall time in seconds (default: run_times.jsonl).')
_MODEL = flags.DEFINE_bool(
  'model', False, 'Also copy the best checkpoint and vocabularies: DIR opens as a run directory.'
)


def main(argv):
  if len(argv) != 2 or not _OUT.value:
    raise app.UsageError(
      'usage: python -m attnlab.run_report RUN_DIR --out=DIR [--command=...] [--wall_s=SECONDS] '
      '[--model]'
    )
  print(write_run_report(argv[1], _OUT.value, command=_COMMAND.value, wall_s=_WALL_S.value,
                         model=_MODEL.value))
  print(os.path.join(_OUT.value, html.FILE_NAME))


def run() -> None:
  """The `attnlab-run-report` command (pyproject.toml's scripts): `python -m attnlab.run_report`."""
  cli.run(main)


if __name__ == '__main__':
  run()
