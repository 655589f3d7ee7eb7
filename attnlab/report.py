"""`python -m attnlab.report`: kept as the entry point users know;
the code lives in attnlab.reporting.sweep_report."""

from absl import app

from attnlab.reporting.sweep_report import main

if __name__ == '__main__':
  app.run(main)
