"""`python -m attnlab.report`: kept as the entry point users know;
the code lives in attnlab.reporting.sweep_report."""

from attnlab import cli
from attnlab.reporting.sweep_report import main

if __name__ == '__main__':
  cli.run(main)  # a user error: one `error: ...` line, exit status 2
