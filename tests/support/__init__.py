"""Helpers the tests share, one module per concern, imported as `support.X`: pyproject.toml
puts tests/ on pytest's pythonpath. Test files import these, never each other."""

import pathlib

# The repository root, for the tests that read its files or run its commands from there.
REPO = pathlib.Path(__file__).resolve().parents[2]
