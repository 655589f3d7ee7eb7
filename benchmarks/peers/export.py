"""attnlab's CMUdict G2P split (task cmudict_g2p, attnlab/data/cmudict_g2p.py) as plain files.

For each split NAME (train, dev = attnlab's eval split, test), in one folder:

  NAME.src    the word's letters separated by spaces ('t o m a t o'): one token per letter
              for the toolkits' whitespace tokenisers
  NAME.trg    its phonemes ('T AH M EY T OW'): the record's target (train: every
              pronunciation is a line; dev and test: the word's first pronunciation)
  NAME.words  the word as attnlab reads it ('tomato'): the input of `attnlab.decode`
  NAME.refs   every pronunciation of the word, tab-separated: what WER scores against

Line i of each file is record i of attnlab's split, in attnlab's order (by word hash). Joey NMT
reads `PREFIX.src` / `PREFIX.trg` given the languages 'src' and 'trg'; OpenNMT-py any paths.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

SPLIT_FILES = {'train': 'train', 'eval': 'dev', 'test': 'test'}  # attnlab split -> file prefix
SOURCE, TARGET, WORDS, REFERENCES = 'src', 'trg', 'words', 'refs'


def spaced(word: str) -> str:
  """A word as a line of letter tokens."""
  return ' '.join(word)


def path(folder: str, name: str, kind: str) -> str:
  return os.path.join(folder, f'{name}.{kind}')


def export(task, folder: str, limits: Mapping[str, int] | None = None) -> dict[str, int]:
  """Writes each split of `task` (at most limits[split] records where given) into `folder`;
  returns the number of lines per file prefix."""
  os.makedirs(folder, exist_ok=True)
  counts = {}
  for split, name in SPLIT_FILES.items():
    source = task.split(split)
    n = min(len(source), (limits or {}).get(split) or len(source))
    records = [source[i] for i in range(n)]
    columns = {
      SOURCE: [spaced(r['source']) for r in records],
      TARGET: [r['target'] for r in records],
      WORDS: [r['source'] for r in records],
      REFERENCES: ['\t'.join(r['references']) for r in records],
    }
    for kind, lines in columns.items():
      with open(path(folder, name, kind), 'w', encoding='utf-8') as f:
        f.write(''.join(line + '\n' for line in lines))
    counts[name] = n
  return counts


def read_lines(file: str) -> list[str]:
  with open(file, encoding='utf-8') as f:
    return f.read().splitlines()


def references(folder: str, name: str) -> list[list[str]]:
  """Each line's pronunciations (phoneme strings) from NAME.refs."""
  return [line.split('\t') for line in read_lines(path(folder, name, REFERENCES))]
