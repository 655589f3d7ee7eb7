"""`python -m attnlab.report`: kept as the entry point users know;
the code lives in attnlab.reporting.sweep_report."""

from attnlab import cli
from attnlab.reporting import sweep_report

if __name__ == '__main__':
  cli.run_module(sweep_report)  # a user error: one `error: ...` line, exit status 2
