"""Synthetic seq2seq tasks as deterministic random-access sources.

Example i of a split is generated from (seed, split, i) alone, so any process can read any
index in any order and two runs with the same seed see the same data. Symbols are single
characters from a fixed alphabet (lowercase letters, then uppercase), which keeps sources and
targets readable in heatmaps and sample dumps.

Tasks (`TASKS`):
  copy      target = source
  reverse   target = source reversed
  sort      target = source symbols sorted by alphabet position (a..z, then A..Z)
  addition  'a+b' -> decimal sum; the length range counts digits per operand
"""

from __future__ import annotations

import dataclasses
import string
from collections.abc import Callable

import numpy as np

ALPHABET = string.ascii_lowercase + string.ascii_uppercase
DIGITS = string.digits
SPLITS = ('train', 'eval', 'test')
# Part of the generator seed: eval and test draw different examples from train and each other.
_SPLIT_IDS = {'train': 0, 'eval': 1, 'test': 2}


def _random_symbols(rng: np.random.Generator, task: SyntheticTask) -> str:
  length = int(rng.integers(task.lengths[0], task.lengths[1] + 1))
  ids = rng.integers(0, task.vocab_size, size=length)
  return ''.join(ALPHABET[i] for i in ids)


def _random_number(rng: np.random.Generator, num_digits: int) -> str:
  # No leading zero unless the number is a single digit (so '0' can appear).
  first = int(rng.integers(0 if num_digits == 1 else 1, 10))
  rest = rng.integers(0, 10, size=num_digits - 1)
  return str(first) + ''.join(DIGITS[d] for d in rest)


def _addition_source(rng: np.random.Generator, task: SyntheticTask) -> str:
  lo, hi = task.lengths
  a = _random_number(rng, int(rng.integers(lo, hi + 1)))
  b = _random_number(rng, int(rng.integers(lo, hi + 1)))
  return f'{a}+{b}'


def _sort_order(source: str) -> list[int]:
  # Stable: equal symbols keep their source order, so the alignment is a fixed permutation.
  return sorted(range(len(source)), key=lambda i: ALPHABET.index(source[i]))


def _add(source: str) -> str:
  a, b = source.split('+')
  return str(int(a) + int(b))


@dataclasses.dataclass(frozen=True)
class TaskSpec:
  """How one synthetic task makes a source, its target and the target->source alignment."""

  make_source: Callable[[np.random.Generator, SyntheticTask], str]
  make_target: Callable[[str], str]
  align: Callable[[str], list[int] | None]  # source -> source position per target position
  symbols: Callable[[int], str]  # vocab_size -> the characters sources and targets use


_LETTERS = lambda vocab_size: ALPHABET[:vocab_size]

TASKS: dict[str, TaskSpec] = {
  'copy': TaskSpec(_random_symbols, lambda s: s, lambda s: list(range(len(s))), _LETTERS),
  'reverse': TaskSpec(
    _random_symbols, lambda s: s[::-1], lambda s: list(range(len(s) - 1, -1, -1)), _LETTERS
  ),
  'sort': TaskSpec(
    _random_symbols, lambda s: ''.join(s[i] for i in _sort_order(s)), _sort_order, _LETTERS
  ),
  'addition': TaskSpec(_addition_source, _add, lambda s: None, lambda _: DIGITS + '+'),
}


def get_spec(name: str) -> TaskSpec:
  if name not in TASKS:
    raise ValueError(f'unknown synthetic task {name!r}; choose from {", ".join(sorted(TASKS))}')
  return TASKS[name]


class SyntheticTask:
  """One split of a synthetic task: `task[i] -> {'source', 'target', 'index'}`.

  Args:
    name: a key of `TASKS`.
    vocab_size: number of distinct letters (1..52); addition always uses digits.
    lengths: inclusive (min, max) source length (addition: digits per operand).
    num_examples: size of the split.
    seed: non-negative data seed.
    split: 'train' | 'eval' | 'test'.
  """

  def __init__(
    self,
    name: str,
    vocab_size: int,
    lengths: tuple[int, int],
    num_examples: int,
    seed: int,
    split: str,
  ):
    self.spec = get_spec(name)
    if split not in _SPLIT_IDS:
      raise ValueError(f'unknown split {split!r}; choose from {", ".join(SPLITS)}')
    if not 1 <= vocab_size <= len(ALPHABET):
      raise ValueError(
        f'vocab_size={vocab_size} must be in [1, {len(ALPHABET)}]: symbols are the letters '
        f'{ALPHABET}'
      )
    lo, hi = (int(n) for n in lengths)
    if not 1 <= lo <= hi:
      raise ValueError(f'lengths={tuple(lengths)!r} must be (min, max) with 1 <= min <= max')
    if num_examples < 0 or seed < 0:
      raise ValueError(f'num_examples={num_examples} and seed={seed} must be non-negative')
    self.name = name
    self.vocab_size = vocab_size
    self.lengths = (lo, hi)
    self.num_examples = int(num_examples)
    self.seed = int(seed)
    self.split = split

  @property
  def symbols(self) -> str:
    """The characters this task's sources and targets are made of."""
    return self.spec.symbols(self.vocab_size)

  def __len__(self) -> int:
    return self.num_examples

  def __getitem__(self, index: int) -> dict:
    index = int(index)
    if not 0 <= index < self.num_examples:
      raise IndexError(f'index {index} out of range for {self.num_examples} examples')
    rng = np.random.default_rng([self.seed, _SPLIT_IDS[self.split], index])
    source = self.spec.make_source(rng, self)
    return {'source': source, 'target': self.spec.make_target(source), 'index': index}

  def alignment(self, example: dict) -> list[int] | None:
    """Source position each target position copies from; None where no such map exists."""
    return self.spec.align(example['source'])

  def __repr__(self) -> str:
    return (
      f'SyntheticTask({self.name!r}, vocab_size={self.vocab_size}, lengths={self.lengths}, '
      f'num_examples={self.num_examples}, seed={self.seed}, split={self.split!r})'
    )
