"""Files in a test's folder: one written with its folders, JSON lines, and a whole tree read back
to show that nothing under it changed."""

import json
import os


def write_file(path, text):
  """Writes `text` to `path`, making its folders first."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'w') as f:
    f.write(text)


def jsonl(rows):
  """`rows` as JSON lines, one object a line."""
  return ''.join(json.dumps(r) + '\n' for r in rows)


def file_tree(root) -> dict:
  """Every file (its bytes) and folder (None) under `root`, by relative path: compare two to
  show that nothing under `root` changed."""
  found = {}
  for directory, folders, names in os.walk(root):
    for name in folders:
      found[os.path.relpath(os.path.join(directory, name), root)] = None
    for name in names:
      with open(os.path.join(directory, name), 'rb') as f:
        found[os.path.relpath(os.path.join(directory, name), root)] = f.read()
  return found
