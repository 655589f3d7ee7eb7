"""A task's attnlab split (tasks.py) as plain files every system reads.

For each split NAME (train, dev = attnlab's eval split, test), in one folder:

  NAME.src    the source as the peers' whitespace tokenisers read it: a word's letters
              ('t o m a t o'), a verse's SentencePiece pieces ('▁EN ▁el ▁principio ...')
  NAME.trg    the target the same way: phonemes ('T AH M EY T OW'; train: every
              pronunciation is a line; dev and test: the word's first), or pieces
  NAME.input  the source as attnlab reads it ('tomato', the raw verse): `attnlab.decode`'s input
  NAME.refs   what the metric scores against: every pronunciation of the word, tab-separated,
              or the raw English verse

Line i of each file is record i of attnlab's split, in attnlab's order. Joey NMT reads
`PREFIX.src` / `PREFIX.trg` given the languages 'src' and 'trg'; OpenNMT-py any paths.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

SPLIT_FILES = {'train': 'train', 'eval': 'dev', 'test': 'test'}  # attnlab split -> file prefix
SOURCE, TARGET, INPUT, REFERENCES = 'src', 'trg', 'input', 'refs'


def path(folder: str, name: str, kind: str) -> str:
  return os.path.join(folder, f'{name}.{kind}')


def export(task, folder: str, limits: Mapping[str, int] | None = None) -> dict[str, int]:
  """Writes each split of `task` (a tasks.PeerTask; at most limits[split] records where given)
  into `folder`; returns the number of lines per file prefix."""
  os.makedirs(folder, exist_ok=True)
  counts = {}
  for split, name in SPLIT_FILES.items():
    source = task.data.split(split)
    n = min(len(source), (limits or {}).get(split) or len(source))
    rows = [task.columns(source[i]) for i in range(n)]
    columns = list(zip(*rows, strict=True)) or [()] * 4
    for kind, lines in zip((SOURCE, TARGET, INPUT, REFERENCES), columns, strict=True):
      with open(path(folder, name, kind), 'w', encoding='utf-8') as f:
        f.write(''.join(line + '\n' for line in lines))
    counts[name] = n
  return counts


def read_lines(file: str) -> list[str]:
  """The file's lines as a file reader sees them: ended by \\n, \\r or \\r\\n only (an output may
  hold other characters str.splitlines would break at, such as \\x1d)."""
  with open(file, encoding='utf-8') as f:
    return [line.removesuffix('\n') for line in f]
