"""The one base class of mistakes a user can fix: a bad config, input file or run directory.

Command-line entry points print such an error as one line (`error: ...`) and exit with status
2; anything else is a bug in attnlab and keeps its traceback.
"""


class UserError(ValueError):
  """Bad input from the user; the message names the key, file:line or path and the way out."""
