"""`python -m attnlab.run_report`: kept as the entry point users know;
the code lives in attnlab.reporting.run_report."""

from absl import app

from attnlab.reporting.run_report import main

if __name__ == '__main__':
  app.run(main)
