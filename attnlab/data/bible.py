"""Verse-aligned Bible translation (`task.name = 'bible'`) from installed SWORD modules.

Data: two SWORD Bible modules read with `pysword`, by default the Spanish Reina-Valera 1909
(`task.source_module = 'spaRV1909eb'`, Debian package sword-text-sparv) -> the World English
Bible (`task.target_module = 'engWEB2015eb'`, sword-text-web); sword-text-kjv adds the King
James Version ('engKJV2006eb'). All three are public domain. Modules are looked up in
`task.sword_path` (':'-separated folders) or else $SWORD_PATH, ~/.sword, /usr/share/sword and
/usr/local/share/sword; a folder may also be a module zip from the CrossWire repository. The
TFDS builder `Bible` prepares the pairs once as array_record (read with `tfds.data_source`, no
TensorFlow); a prepared data dir no longer needs the modules.

- Verses are aligned by (book, chapter, verse) in OSIS names. The markup is stripped by
  osis.py (no Strong's numbers, footnotes, headings; no glued words). Verses of one module
  only (the WEB's deuterocanon, NRSVA's 3 John 1:15 and Rev 12:18) and verses empty on either
  side (a module joining two verses into one) are dropped, and counted in the builder's
  metadata ('counts') and the log. RV1909 -> WEB: 31,077 pairs (dropped: 6,689 WEB-only
  verses, 18 empty in the RV1909, 7 empty in the WEB).
- Split by chapter, so neighbouring verses never straddle splits: the first 4 bytes of
  md5('<book>.<chapter>') as an integer, mod 100: < 90 train, < 95 validation (attnlab's
  'eval'), else test: RV1909 -> WEB 27,896 / 1,745 / 1,436 pairs (89.8 / 5.6 / 4.6%). Within
  a split, records keep the canonical order; `ref` ('John.3.16') names each one, and the
  example key is its position.

Records: {'source', 'target', 'ref'}. Vocabularies come from the training split
(`task.tokenizer`, `task.text_vocab_size`, translation.py); scores: BLEU, chrF and BLEU by
source length in words.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
from collections.abc import Iterable, Sequence
from typing import Any

import tensorflow_datasets as tfds
from absl import logging

from attnlab.data import osis, sentencepiece_vocab, tfds_tasks, translation
from attnlab.data.tasks import DataError, Task, data_dir

SPLIT_PERCENT = (('train', 90), ('validation', 95), ('test', 100))  # cumulative
DEFAULT_SWORD_PATHS = ('~/.sword', '/usr/share/sword', '/usr/local/share/sword')
DEBIAN_PACKAGES = {
  'spaRV1909eb': 'sword-text-sparv',
  'engWEB2015eb': 'sword-text-web',
  'engKJV2006eb': 'sword-text-kjv',
}
MODULE_REPOSITORY = 'https://crosswire.org/sword/modules/'
Ref = tuple[str, int, int]  # (OSIS book, chapter, verse)


def split_of(book: str, chapter: int) -> str:
  """The TFDS split of a chapter (train / validation / test), from md5('<book>.<chapter>')."""
  digest = hashlib.md5(f'{book}.{chapter}'.encode()).digest()
  percent = int.from_bytes(digest[:4], 'big') % 100
  return next(name for name, top in SPLIT_PERCENT if percent < top)


def _candidates(sword_path: str) -> list[str]:
  if sword_path:
    return [p for p in sword_path.split(':') if p]
  return [*filter(None, [os.environ.get('SWORD_PATH')]), *DEFAULT_SWORD_PATHS]


def sword_paths(sword_path: str = '') -> list[str]:
  """The SWORD library folders (or module zips) to search, first match wins."""
  paths = [os.path.expanduser(p) for p in _candidates(sword_path)]
  return [p for p in paths if os.path.isdir(os.path.join(p, 'mods.d')) or p.endswith('.zip')]


def _installed(paths: Sequence[str]) -> dict[str, Any]:
  """Module name -> a pysword SwordModules holding it (the first path that has it)."""
  from pysword.modules import SwordModules  # Deferred: only preparing the dataset reads modules.

  found = {}
  for path in paths:
    library = SwordModules(path)
    for name in library.parse_modules():
      found.setdefault(name, library)
  return found


def missing_module_message(name: str, key: str, searched: Sequence[str], installed) -> str:
  packages = ' '.join(sorted(set(DEBIAN_PACKAGES.values())))
  return (
    f'{key}={name!r}: SWORD module not found in {", ".join(searched) or "no SWORD folder"} '
    f'(installed: {", ".join(sorted(installed)) or "none"}). On Debian/Ubuntu: apt-get install '
    f'{packages}; or download a module zip from the CrossWire repository '
    f'({MODULE_REPOSITORY}) and unzip it into ~/.sword, or name its folder in task.sword_path'
  )


def open_bible(name: str, key: str, sword_path: str = ''):
  """The pysword SwordBible of module `name` (case-insensitive); DataError if not installed."""
  paths = sword_paths(sword_path)
  installed = _installed(paths)
  matches = [m for m in installed if m.lower() == name.lower()]
  if not matches:
    raise DataError(missing_module_message(name, key, _candidates(sword_path), installed))
  try:
    bible = installed[matches[0]].get_bible_from_module(matches[0])
  except (OSError, ValueError, KeyError) as e:
    raise DataError(f'{key}={name!r}: the SWORD module cannot be read ({e})') from None
  if hasattr(bible, '_decompressed_text'):
    # zText modules compress a whole book per block and pysword inflates it again for every
    # verse (100 s for a Bible); keeping the last blocks makes reading a module take ~2 s.
    bible._decompressed_text = functools.lru_cache(maxsize=2)(bible._decompressed_text)
  return bible


def read_verses(bible, books: Iterable[str] = ()) -> dict[Ref, str]:
  """(book, chapter, verse) -> plain text of every verse slot, in canonical order.

  `books`: OSIS names to read (all books of the module's versification if empty).
  """
  wanted = set(books)
  structure = bible.get_structure().get_books()
  verses = {}
  for testament in ('ot', 'nt'):
    for book in structure.get(testament, ()):
      if wanted and book.osis_name not in wanted:
        continue
      for chapter, count in enumerate(book.chapter_lengths, start=1):
        texts = list(bible.get_iter(books=[book.osis_name], chapters=[chapter], clean=False))
        if len(texts) != count:
          raise DataError(f'{book.osis_name} {chapter}: read {len(texts)} verses of {count}')
        for verse, markup in enumerate(texts, start=1):
          if isinstance(markup, bytes):  # pysword's rawtext reader returns b'' past the end
            markup = markup.decode('utf-8', 'replace')
          verses[book.osis_name, chapter, verse] = osis.verse_text(markup)
  return verses


def align(source: dict[Ref, str], target: dict[Ref, str]) -> tuple[list[dict], dict[str, int]]:
  """Pairs of the verses both sides have, in the source's order, and what was dropped."""
  counts = {'pairs': 0, 'empty_source': 0, 'empty_target': 0, 'only_source': 0,
            'only_target': sum(ref not in source for ref in target)}
  pairs = []
  for ref, text in source.items():
    if ref not in target:
      counts['only_source'] += 1
    elif not text:
      counts['empty_source'] += 1
    elif not target[ref]:
      counts['empty_target'] += 1
    else:
      book, chapter, verse = ref
      pairs.append({'source': text, 'target': target[ref], 'ref': f'{book}.{chapter}.{verse}'})
  counts['pairs'] = len(pairs)
  return pairs, counts


def split_pairs(pairs: Sequence[dict]) -> dict[str, list[dict]]:
  """Pairs per TFDS split by chapter (`split_of`), each in the given order."""
  out = {name: [] for name, _ in SPLIT_PERCENT}
  for pair in pairs:
    book, chapter, _ = pair['ref'].split('.')
    out[split_of(book, int(chapter))].append(pair)
  return out


@dataclasses.dataclass
class BibleConfig(tfds.core.BuilderConfig):
  source_module: str = 'spaRV1909eb'
  target_module: str = 'engWEB2015eb'
  sword_path: str = ''  # where to read the modules; not part of the dataset's identity
  books: tuple[str, ...] = ()  # OSIS names: only these books (fast tests); () = all


def builder_config(source: str, target: str, sword_path: str = '', books=()) -> BibleConfig:
  name = f'{source}-{target}' + (f'-{"_".join(books)}' if books else '')
  return BibleConfig(name=name, source_module=source, target_module=target,
                     sword_path=sword_path, books=tuple(books))


class Bible(tfds.core.GeneratorBasedBuilder):
  """Verse pairs of two SWORD modules, split by chapter (see the module docstring)."""

  VERSION = tfds.core.Version('1.0.0')
  RELEASE_NOTES = {'1.0.0': 'Verses aligned by reference, OSIS markup stripped (osis.py).'}
  # No listed configs: every pair of modules (and folder to read them from) is an instance.
  BUILDER_CONFIGS = []

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
      builder=self,
      description=__doc__,
      features=tfds.features.FeaturesDict(
        {k: tfds.features.Text() for k in ('source', 'target', 'ref')}
      ),
      homepage='https://crosswire.org/sword/',
      metadata=tfds.core.MetadataDict(),
      disable_shuffling=True,  # canonical order within each split
    )

  def _split_generators(self, dl_manager):
    del dl_manager  # the modules are installed, not downloaded
    cfg = self.builder_config
    source, target = (
      read_verses(open_bible(name, f'task.{key}', cfg.sword_path), cfg.books)
      for name, key in ((cfg.source_module, 'source_module'), (cfg.target_module, 'target_module'))
    )
    pairs, counts = align(source, target)
    if not pairs:
      raise DataError(f'{cfg.source_module} and {cfg.target_module} share no non-empty verse')
    splits = split_pairs(pairs)
    empty = [name for name, records in splits.items() if not records]
    if empty:
      raise DataError(f'books {", ".join(cfg.books)} give no chapter to the {empty[0]} split; '
                      'choose more books (or all)')
    counts.update({f'{name}_pairs': len(records) for name, records in splits.items()})
    self.info.metadata['counts'] = counts
    logging.info('bible %s: %s', cfg.name, counts)
    return {name: self._generate_examples(records) for name, records in splits.items()}

  def _generate_examples(self, records):
    yield from enumerate(records)  # key = position in canonical order


def build_task(config: Any, books: Sequence[str] = ()) -> Task:
  """Prepares (once) and loads the verse pairs; vocabularies come from the training split."""
  t = config.task
  root = data_dir(config)
  wanted = builder_config(t.source_module, t.target_module, t.sword_path, books)
  builder = tfds_tasks.prepared(lambda: Bible(config=wanted, data_dir=root))
  fields = {k: k for k in ('source', 'target', 'ref')}
  splits, train = tfds_tasks.read_splits_and_train(builder, fields)
  cache = sentencepiece_vocab.cache_dir(root)
  source_vocab, target_vocab = (
    translation.make_vocab(train.column(side), t.tokenizer, t.text_vocab_size, cache)
    for side in ('source', 'target')
  )
  return translation.translation_task('bible', source_vocab, target_vocab, splits)
