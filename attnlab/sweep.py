"""`python -m attnlab.sweep`: kept as the entry point users know;
the code lives in attnlab.sweeps.command."""

from attnlab import cli
from attnlab.sweeps import command

if __name__ == '__main__':
  cli.run_module(command)  # a user error: one `error: ...` line, exit status 2
