"""`python -m attnlab.explore --workdir=RUN`: serves the explorer (attnlab/explore/server.py)."""

from attnlab import cli
from attnlab.explore import server


def run() -> None:
  """The `attnlab-explore` command (pyproject.toml's scripts), as `python -m attnlab.explore`."""
  server.define_flags()
  cli.run(server.main)


if __name__ == '__main__':
  run()
