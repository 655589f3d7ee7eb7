"""Command-line entry points: a user's mistake is one message, `error: ...`, and exit status 2.

    if __name__ == '__main__':
      cli.run(main)        # instead of absl's app.run(main)

Mistakes are: any `attnlab.errors.UserError` (a bad config value, input file or run
directory, a diverged run), a misspelled flag or `--config.KEY` override, a config file that
is missing or does not load, and absl's `app.UsageError`. They are reported before JAX starts
where possible. Anything else is a bug in attnlab and keeps its traceback.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterator
from typing import NoReturn

import ml_collections
from absl import app, flags
from ml_collections.config_flags.config_flags import ConfigFileFlagParser

from attnlab.errors import UserError

EXIT_USER_ERROR = 2


@contextlib.contextmanager
def library_warnings_only() -> Iterator[None]:
  """absl logging at WARNING while a command runs (orbax's INFO lines are not for its console),
  restored afterwards, so a command called in-process leaves the caller's verbosity alone."""
  from absl import logging

  before = logging.get_verbosity()
  logging.set_verbosity(logging.WARNING)
  try:
    yield
  finally:
    logging.set_verbosity(before)


def fail(message: str) -> NoReturn:
  """Prints `error: message` on stderr and exits with status 2."""
  sys.stderr.write(f'error: {message}\n')
  sys.stderr.flush()
  sys.exit(EXIT_USER_ERROR)


def _one_line(error: BaseException) -> str:
  """The exception's message without quoting: KeyError reprs its argument, with literal \\n."""
  text = (str(error.args[0]) if error.args else str(error)).strip()
  if len(text) > 1 and text[0] == text[-1] and text[0] in '\'"':  # a repr of the message
    text = text[1:-1]
  return re.sub(r'(\\n|\n)+', '; ', text).replace("\\'", "'")


def _override_problem(error: BaseException, argv: list[str]) -> str:
  """Names the `--config.KEY=...` override that failed (config_flags does not say which)."""
  text = _one_line(error)
  quoted = re.match(r"'?([\w.]+)'?", text)
  bad = quoted.group(1) if quoted else ''
  for arg in argv[1:]:
    match = re.match(r'--(\w+)\.([\w.]+)(=|$)', arg)
    if match and bad and bad in match.group(2).split('.'):
      return (f'{arg}: {match.group(1)}.{match.group(2)} is not a config key ({bad!r} is '
              f'unknown){"; " + text.split("; ", 1)[1] if "; " in text else ""}')
  return f'a --config override failed: {text}'


def _flag_problem(error: flags.Error) -> str:
  """absl's message, shortened to the exception of a config file's traceback if it has one."""
  text = str(error)
  if 'Error whilst parsing config file' in text:
    head = text.split(': Error whilst parsing config file', 1)[0].removeprefix('flag ')
    last = [line for line in text.splitlines() if line.strip()][-1]
    return f'{head}: {last.split(": ", 1)[-1]}'
  return _one_line(error)


def _config_file_problem(name: str, path: str, error: OSError) -> str:
  file = path.split(':', 1)[0]
  if not os.path.exists(file):
    return f'--{name}={path}: config file {file} not found (run from the repository root?)'
  return f'--{name}={path}: cannot load {file}: {_one_line(error.__cause__ or error)}'


def _short_repr(value, limit: int = 60) -> str:
  text = repr(value).replace('\n', ' ')
  return text if len(text) <= limit else text[:limit - 3] + '...'


def parse_flags(argv: list[str]) -> list[str]:
  """absl's flag parsing, with every mistake (module docstring) reported by `fail`."""
  try:
    rest = flags.FLAGS(argv)
  except flags.Error as e:
    fail(_flag_problem(e))
  except SyntaxError as e:  # a config file that is not valid Python
    fail(f'{e.filename}:{e.lineno}: {e.msg}')
  except (KeyError, AttributeError, TypeError, ValueError) as e:  # a --config.KEY override
    fail(_override_problem(e, argv))
  for name in flags.FLAGS:
    flag = flags.FLAGS[name]
    if isinstance(flag.parser, ConfigFileFlagParser) and flag.value is not None:
      value = flag.value
      try:  # config_flags defers a failed load until first use (after JAX started)
        value.keys()
      except OSError as e:
        fail(_config_file_problem(name, flag.config_filename, e))
      except AttributeError:  # loaded fine, but not a ConfigDict: checked below
        pass
      if not isinstance(value, ml_collections.ConfigDict):
        file = flag.config_filename.split(':', 1)[0]
        fail(f'--{name}={flag.config_filename}: get_config() in {file} returned '
             f'{type(value).__name__} {_short_repr(value)}, not an ml_collections.ConfigDict; '
             'build the config as configs/base.py does (ml_collections.ConfigDict())')
  return rest


def run(main) -> None:
  """`app.run(main)` with user mistakes reported as one message and exit status 2."""
  # absl's --help lists the flags of the module that sys.argv[0] names; under a console script
  # (pyproject.toml's scripts) that is the script, so the command's own flags are named its too.
  for flag in flags.FLAGS.get_key_flags_for_module(main.__module__):
    flags.FLAGS.register_key_flag_for_module(sys.argv[0], flag)

  def guarded(argv):
    try:
      return main(argv)
    except (UserError, app.UsageError) as e:
      fail(str(e))

  app.run(guarded, flags_parser=parse_flags)

