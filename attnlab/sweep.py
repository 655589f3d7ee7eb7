"""`python -m attnlab.sweep`: kept as the entry point users know;
the code lives in attnlab.sweeps.command."""

from absl import app

from attnlab.sweeps.command import main

if __name__ == '__main__':
  app.run(main)
