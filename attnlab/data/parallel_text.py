"""A user's own parallel corpus from plain-text files (`task.name = 'parallel_text'`).

Each split is given by a config field holding one or two paths:
  task.train_files = ('train.tsv',)               one TSV file: source<TAB>target per line
  task.train_files = ('train.de', 'train.en')     two line-aligned files
and likewise `task.eval_files` and `task.test_files` (all three are required).

Bad input raises `DataError` (a UserError: one line) that names the file and the 1-based line:
bytes that are not UTF-8, a TSV line without exactly one tab, files of different line counts, a
missing file. Pairs with an empty side, or a side longer than `task.max_chars` characters, are
dropped and counted (`ParallelText.dropped`, logged per split). Surrounding whitespace is
stripped.

Tokenization (`task.tokenizer`, the same for both sides, vocabularies from the training split
only, translation.py): 'char' and 'word' keep the `task.text_vocab_size` most frequent symbols
per side; 'sentencepiece' trains a unigram model with byte fallback per side (cached in
`<data_dir>/attnlab_sentencepiece/`; train.py saves it into the workdir with the vocabularies).
Scores: BLEU and chrF of detokenized output, and BLEU by source length in words.

Plain text never imports TFDS (only the data dir's default path is shared with it).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from absl import logging

from attnlab.data import sentencepiece_vocab, translation
from attnlab.data.tasks import SPLITS, DataError, Task, data_dir


def _read_lines(path: str, key: str) -> list[str]:
  """UTF-8 lines of `path` without line endings; errors name the file and line."""
  if not os.path.isfile(path):
    raise DataError(f'{key}: file {path!r} does not exist')
  with open(path, 'rb') as f:
    raw = f.read()
  lines = raw.split(b'\n')
  if lines and lines[-1] == b'':
    lines.pop()  # the final newline ends the last line; it does not start a new one
  out = []
  for number, line in enumerate(lines, start=1):
    try:
      out.append(line.decode('utf-8').removesuffix('\r'))
    except UnicodeDecodeError as e:
      raise DataError(
        f'{path}:{number}: bytes {line[e.start : e.end]!r} at byte {e.start + 1} are not '
        f'valid UTF-8 ({e.reason}); convert the file to UTF-8'
      ) from None
  return out


def read_pairs(paths: Sequence[str], key: str) -> list[tuple[str, str, int]]:
  """(source, target, line number) of every line of a TSV file or two aligned files."""
  paths = tuple(paths)
  if len(paths) == 1:
    pairs = []
    for number, line in enumerate(_read_lines(paths[0], key), start=1):
      if not line.strip():
        pairs.append(('', '', number))  # a blank line: an empty pair, dropped and counted
        continue
      if line.count('\t') != 1:
        raise DataError(
          f'{paths[0]}:{number}: expected source<TAB>target, found {line.count(chr(9))} tabs'
        )
      source, target = line.split('\t')
      pairs.append((source, target, number))
    return pairs
  if len(paths) == 2:
    sources, targets = (_read_lines(p, key) for p in paths)
    if len(sources) != len(targets):
      longer = paths[0] if len(sources) > len(targets) else paths[1]
      raise DataError(
        f'{key}: {paths[0]} has {len(sources)} lines but {paths[1]} has {len(targets)}; '
        f'{longer}:{min(len(sources), len(targets)) + 1} is the first line without a partner '
        '(the two files must be line-aligned)'
      )
    return [(s, t, n) for n, (s, t) in enumerate(zip(sources, targets, strict=True), start=1)]
  raise DataError(f'{key}={paths!r} must hold one TSV path or two aligned paths')


class ParallelText:
  """One split of a parallel corpus in memory: `split[i] -> {'source', 'target', 'index',
  'line'}` ('line': 1-based line number in the files). `dropped` counts removed pairs."""

  def __init__(self, paths: Sequence[str], *, max_chars: int, key: str = 'files'):
    self.paths = tuple(paths)
    self.dropped = {'empty': 0, 'too_long': 0}
    self._pairs = []
    for source, target, line in read_pairs(paths, key):
      source, target = source.strip(), target.strip()
      if not source or not target:
        self.dropped['empty'] += 1
      elif max(len(source), len(target)) > max_chars:
        self.dropped['too_long'] += 1
      else:
        self._pairs.append((source, target, line))
    logging.info(
      '%s: kept %d pairs; dropped %d with an empty side and %d longer than %d characters',
      ', '.join(self.paths),
      len(self._pairs),
      self.dropped['empty'],
      self.dropped['too_long'],
      max_chars,
    )
    if not self._pairs:
      raise DataError(f'{key}: no usable pairs in {", ".join(self.paths)} ({self.dropped})')

  def __len__(self) -> int:
    return len(self._pairs)

  def __getitem__(self, index: int) -> dict[str, Any]:
    index = int(index)
    if not 0 <= index < len(self._pairs):
      raise IndexError(f'index {index} out of range for {len(self._pairs)} examples')
    source, target, line = self._pairs[index]
    return {'source': source, 'target': target, 'index': index, 'line': line}

  def column(self, key: str) -> list[str]:
    position = {'source': 0, 'target': 1}[key]
    return [pair[position] for pair in self._pairs]


def build_task(config: Any) -> Task:
  """The `parallel_text` task from `config.task` (files, tokenizer, sizes, data_dir)."""
  t = config.task
  for split in SPLITS:
    if not getattr(t, f'{split}_files'):
      raise DataError(
        f'task.{split}_files is empty; set it to (path.tsv,) or (source_path, target_path)'
      )
  splits = {
    s: ParallelText(getattr(t, f'{s}_files'), max_chars=t.max_chars, key=f'task.{s}_files')
    for s in SPLITS
  }
  cache = sentencepiece_vocab.cache_dir(data_dir(config))
  train = splits['train']
  source_vocab, target_vocab = (
    translation.make_vocab(train.column(side), t.tokenizer, t.text_vocab_size, cache)
    for side in ('source', 'target')
  )
  return translation.translation_task(
    'parallel_text', source_vocab, target_vocab, {s: (lambda x=x: x) for s, x in splits.items()}
  )
