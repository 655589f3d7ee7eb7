"""Vocabularies: special tokens, then symbols; text <-> ids for the 'char' and 'word' modes.

Ids 0..3 are the special tokens shared with the models (PAD_ID, BOS_ID, EOS_ID, UNK_ID);
symbols follow in the order given. `encode` appends EOS; `decode` stops at EOS and skips
padding and BOS, so a decoded model output compares directly with the reference text.
"""

from __future__ import annotations

import collections
import json
import os
from collections.abc import Iterable, Sequence

from attnlab import storage
from attnlab.tokens import BOS_ID, EOS_ID, NUM_SPECIAL_TOKENS, PAD_ID, UNK_ID

SPECIAL_TOKENS = ('<pad>', '<bos>', '<eos>', '<unk>')
MODES = ('char', 'word')
# Tokenizers of text tasks (`task.tokenizer`): these modes, and subwords (sentencepiece_vocab.py).
TOKENIZERS = (*MODES, 'sentencepiece')
assert [PAD_ID, BOS_ID, EOS_ID, UNK_ID] == list(range(NUM_SPECIAL_TOKENS))


def split_text(text: str, mode: str) -> list[str]:
  """'char': every character is a token; 'word': whitespace-separated words."""
  return list(text) if mode == 'char' else text.split()


class Vocab:
  """Maps symbols to ids and back. Build with `from_symbols`, `build` or `load`."""

  def __init__(self, symbols: Sequence[str], mode: str = 'char'):
    if mode not in MODES:
      raise ValueError(f'unknown tokenizer mode {mode!r}; choose from {", ".join(MODES)}')
    symbols = list(symbols)
    for s in symbols:
      if not isinstance(s, str) or not s:
        raise ValueError(f'symbols must be non-empty strings, got {s!r}')
      if s in SPECIAL_TOKENS:
        raise ValueError(f'symbol {s!r} collides with a special token {SPECIAL_TOKENS}')
      if mode == 'char' and len(s) != 1:
        raise ValueError(f"mode 'char' needs single-character symbols, got {s!r}")
      if mode == 'word' and s.split() != [s]:
        raise ValueError(f"mode 'word' symbols cannot contain whitespace, got {s!r}")
    duplicates = sorted(s for s, n in collections.Counter(symbols).items() if n > 1)
    if duplicates:
      raise ValueError(f'duplicate symbols: {duplicates}')
    self.mode = mode
    self.symbols = tuple(symbols)
    self._itos = SPECIAL_TOKENS + self.symbols
    self._stoi = {s: i for i, s in enumerate(self._itos)}

  @classmethod
  def from_symbols(cls, symbols: Iterable[str], mode: str = 'char') -> Vocab:
    return cls(list(symbols), mode)

  @classmethod
  def build(cls, texts: Iterable[str], mode: str = 'char', min_count: int = 1) -> Vocab:
    """Symbols seen at least `min_count` times, most frequent first (ties alphabetical)."""
    if mode not in MODES:
      raise ValueError(f'unknown tokenizer mode {mode!r}; choose from {", ".join(MODES)}')
    counts = collections.Counter()
    for text in texts:
      counts.update(split_text(text, mode))
    for special in SPECIAL_TOKENS:
      counts.pop(special, None)
    kept = [s for s, n in counts.items() if n >= min_count]
    return cls(sorted(kept, key=lambda s: (-counts[s], s)), mode)

  @property
  def size(self) -> int:
    """Number of ids, special tokens included (the model's V)."""
    return len(self._itos)

  def __len__(self) -> int:
    return self.size

  def __eq__(self, other) -> bool:
    return isinstance(other, Vocab) and (self.mode, self.symbols) == (other.mode, other.symbols)

  def __hash__(self) -> int:
    return hash((self.mode, self.symbols))

  def __repr__(self) -> str:
    return f'Vocab(size={self.size}, mode={self.mode!r})'

  def encode(self, text: str) -> list[int]:
    """Token ids of `text` followed by EOS; unknown symbols become UNK_ID."""
    return [self._stoi.get(t, UNK_ID) for t in split_text(text, self.mode)] + [EOS_ID]

  def _token(self, i) -> str:
    i = int(i)
    if not 0 <= i < self.size:
      raise ValueError(f'id {i} is outside this vocabulary (size {self.size})')
    return self._itos[i]

  def decode(self, ids: Iterable[int]) -> str:
    """Text of `ids` up to the first EOS, skipping PAD and BOS ('<unk>' for UNK)."""
    out = []
    for i in ids:
      i = int(i)
      if i == EOS_ID:
        break
      if i not in (PAD_ID, BOS_ID):
        out.append(self._token(i))
    return ('' if self.mode == 'char' else ' ').join(out)

  def tokens(self, ids: Iterable[int]) -> list[str]:
    """One label per id (specials included) up to and including the first EOS, before PAD.

    Made for heatmap axes: `tokens(source_ids)` labels exactly the real source positions.
    """
    out = []
    for i in ids:
      i = int(i)
      if i == PAD_ID:
        break
      out.append(self._token(i))
      if i == EOS_ID:
        break
    return out

  def to_json(self) -> dict:
    return {'mode': self.mode, 'symbols': list(self.symbols)}

  @classmethod
  def from_json(cls, data: dict) -> Vocab:
    return cls(data['symbols'], data['mode'])

  def save(self, path: str | os.PathLike) -> None:
    """Writes the vocabulary to the file `path` (local or a bucket's: attnlab/storage.py)."""
    storage.write_text(path, json.dumps(self.to_json(), ensure_ascii=False, indent=1))

  @classmethod
  def load(cls, path: str | os.PathLike) -> Vocab:
    return cls.from_json(json.loads(storage.read_text(path)))
