"""`python -m attnlab.run_report`: kept as the entry point users know;
the code lives in attnlab.reporting.run_report."""

from attnlab import cli
from attnlab.reporting import run_report

if __name__ == '__main__':
  cli.run_module(run_report)  # a user error: one `error: ...` line, exit status 2
