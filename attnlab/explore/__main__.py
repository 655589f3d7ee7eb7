"""`python -m attnlab.explore --workdir=RUN`: serves the explorer (attnlab/explore/server.py)."""

from attnlab import cli
from attnlab.explore import server

if __name__ == '__main__':
  server.define_flags()
  cli.run(server.main)
