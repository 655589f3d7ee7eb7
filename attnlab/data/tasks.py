"""Tasks: what `config.task.name` means -> vocabularies plus random-access split sources.

`BUILDERS` is the one registry of task names: it maps each name to a builder `(config) -> Task`.
Synthetic tasks come from `synthetic.TASKS`; each real dataset is a module of attnlab.data with
a `build_task(config)`, listed in `REAL_TASKS` and imported only when its task is built, so this
module (read by config validation) costs no TFDS, SentencePiece or JAX import. A split source is
any object with `__len__` and `__getitem__(i) -> {'source': str, 'target': str, 'index': i}`.
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from attnlab.data import synthetic
from attnlab.data.vocab import Vocab
from attnlab.errors import UserError

SPLITS = synthetic.SPLITS
# Real datasets: task name -> the module of attnlab.data whose `build_task(config)` builds it.
REAL_TASKS = {
  'bible': 'bible',
  'cmudict_g2p': 'cmudict_g2p',
  'dates': 'dates',
  'parallel_text': 'parallel_text',
  'wmt14_translate': 'wmt',
}
# TFDS's own default (tensorflow_datasets.core.constants.DATA_DIR; a test keeps them equal),
# here so that plain-text corpora find their SentencePiece cache without importing TFDS.
TFDS_DEFAULT_DATA_DIR = '~/tensorflow_datasets'


class DataError(UserError):
  """Input data a user can fix: a bad or missing file (named with its line), a missing corpus."""


class Source(Protocol):
  """A deterministic random-access split: example i is the same in every process and run."""

  def __len__(self) -> int: ...

  def __getitem__(self, index: int) -> dict[str, Any]: ...


class Task:
  """Vocabularies, the train/eval/test sources and the alignment oracle of one task.

  Args:
    name: the task name.
    source_vocab, target_vocab: vocabularies of sources and targets.
    splits: split name -> zero-argument function building that split's source (called once,
      on first use, so unused splits cost nothing).
    alignment: example -> the source position each target position copies from, or None for
      tasks without such a map.
    decoded_metrics: (split, rows) -> extra metrics of decoded outputs (WER/PER, BLEU, ...);
      each row is a dict with 'index' (example index in the split), 'hypothesis' and
      'reference' (token ids without EOS) and 'correct'.
    correct: (split, row) -> whether a decoded row counts as right; by default the hypothesis
      equals the reference. Tasks with several references (G2P) accept any of them.
  """

  def __init__(
    self,
    name: str,
    source_vocab: Vocab,
    target_vocab: Vocab,
    splits: Mapping[str, Callable[[], Source]],
    alignment: Callable[[dict], list[int] | None] = lambda example: None,
    decoded_metrics: Callable[[str, list[dict]], dict] = lambda split, rows: {},
    correct: Callable[[str, dict], bool] = lambda split, row: row['hypothesis'] == row['reference'],
  ):
    self.name = name
    self.source_vocab = source_vocab
    self.target_vocab = target_vocab
    self._split_fns = dict(splits)
    self._alignment = alignment
    self._decoded_metrics = decoded_metrics
    self._correct = correct
    self._sources: dict[str, Source] = {}

  @property
  def split_names(self) -> tuple[str, ...]:
    return tuple(self._split_fns)

  def split(self, name: str) -> Source:
    if name not in self._split_fns:
      raise ValueError(
        f'task {self.name!r} has no split {name!r}; choose from {", ".join(self._split_fns)}'
      )
    if name not in self._sources:
      self._sources[name] = self._split_fns[name]()
    return self._sources[name]

  def alignment(self, example: dict) -> list[int] | None:
    return self._alignment(example)

  def decoded_metrics(self, split: str, rows: list[dict]) -> dict:
    return self._decoded_metrics(split, rows)

  def is_correct(self, split: str, row: dict) -> bool:
    return bool(self._correct(split, row))

  def __repr__(self) -> str:
    return f'Task({self.name!r}, splits={self.split_names}, vocab={self.target_vocab.size})'


def data_dir(config: Any) -> str:
  """`config.task.data_dir`, or TFDS's default ($TFDS_DATA_DIR, else ~/tensorflow_datasets)."""
  path = config.task.data_dir or os.environ.get('TFDS_DATA_DIR') or TFDS_DEFAULT_DATA_DIR
  return os.path.expanduser(path)


def _synthetic(name: str, config: Any) -> Task:
  t = config.task
  spec = synthetic.get_spec(name)
  # Source and target share one vocabulary: the task's alphabet (addition: digits and '+').
  vocab = Vocab.from_symbols(spec.symbols(t.vocab_size), 'char')

  def make_split(split: str) -> synthetic.SyntheticTask:
    train = split == 'train'
    return synthetic.SyntheticTask(
      name,
      vocab_size=t.vocab_size,
      lengths=tuple(t.train_lengths if train else t.eval_lengths),
      num_examples=t.num_train_examples if train else t.num_eval_examples,
      seed=config.seed,
      split=split,
    )

  splits = {s: functools.partial(make_split, s) for s in SPLITS}
  return Task(name, vocab, vocab, splits, alignment=lambda ex: spec.align(ex['source']))


def _real(module: str, config: Any) -> Task:
  # Imported on use: synthetic runs never import TFDS, Babel, cmudict or SentencePiece.
  return importlib.import_module(f'attnlab.data.{module}').build_task(config)


BUILDERS: dict[str, Callable[[Any], Task]] = {
  name: functools.partial(_synthetic, name) for name in synthetic.TASKS
}
BUILDERS.update({name: functools.partial(_real, module) for name, module in REAL_TASKS.items()})


def load_task(config: Any) -> Task:
  """Builds the task named by `config.task.name` (reads config.task.* and config.seed).

  `config` is the ConfigDict or its parsed `attnlab.config.run.RunConfig` (same attribute names).
  """
  name = config.task.name
  if name not in BUILDERS:
    raise DataError(f'unknown task.name {name!r}; choose from {", ".join(sorted(BUILDERS))}')
  return BUILDERS[name](config)
