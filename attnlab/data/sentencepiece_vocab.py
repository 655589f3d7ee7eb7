"""SentencePiece subword vocabularies with the same interface as `vocab.Vocab`.

The model is trained on the training side of a corpus with the special ids of attnlab
(PAD_ID=0, BOS_ID=1, EOS_ID=2, UNK_ID=3), so SentencePiece ids are model ids directly.
`save` writes the serialized model into the JSON file that train.py saves into the workdir
(`source_vocab.json` / `target_vocab.json`), so a run directory always holds its tokenizer;
`load_vocab` reads either kind of vocabulary file back.

Byte fallback is on: a character unseen in training is encoded as its UTF-8 bytes (256 byte
pieces are part of every model), so no input ever becomes the unknown piece and every output
decodes to text. The price is a vocabulary of at least 256 + 4 + (characters of the text).
Text is NFKC-normalised first (SentencePiece's default `nmt_nfkc`), so compatibility characters
come back in their normal form ('ﬁ' -> 'fi', '⁇' -> '??'); all other text round-trips.

Training is deterministic for the same sentences and options: the thread count is fixed
(SentencePiece's result depends on it) and callers pass an explicit, deterministic sample
(`evenly_spaced`). Trained models are cached under a content hash in `cache_dir(data_dir)`, so
a resumed run reuses the same model.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import json
import os
import re
from collections.abc import Iterable, Sequence

import sentencepiece as spm

from attnlab import storage
from attnlab.data.tasks import DataError
from attnlab.data.vocab import SPECIAL_TOKENS, Vocab
from attnlab.tokens import BOS_ID, EOS_ID, PAD_ID, UNK_ID

MODE = 'sentencepiece'
TRAIN_THREADS = 4  # fixed: SentencePiece's output depends on the number of threads
MODEL_TYPE = 'unigram'
NUM_BYTE_PIECES = 256  # byte fallback: one piece per byte value
MAX_TRAINING_SENTENCES = 1_000_000  # larger corpora train on an evenly spaced sample
CACHE_SUBDIR = 'attnlab_sentencepiece'


def cache_dir(data_dir: str) -> str:
  """Where trained models are cached: `<data_dir>/attnlab_sentencepiece`."""
  return os.path.join(data_dir, CACHE_SUBDIR)


def evenly_spaced(texts: Sequence[str], limit: int = MAX_TRAINING_SENTENCES) -> Sequence[str]:
  """Every k-th text, with k the smallest step leaving at most `limit` (deterministic)."""
  return texts[:: max(1, -(-len(texts) // limit))]


class SentencePieceVocab:
  """Text <-> subword ids. `encode` appends EOS; `decode` stops at EOS and detokenizes."""

  mode = MODE

  def __init__(self, model_proto: bytes):
    self.model_proto = bytes(model_proto)
    self._sp = spm.SentencePieceProcessor(model_proto=self.model_proto)
    ids = (self._sp.pad_id(), self._sp.bos_id(), self._sp.eos_id(), self._sp.unk_id())
    if ids != (PAD_ID, BOS_ID, EOS_ID, UNK_ID):
      raise ValueError(
        f'SentencePiece model has pad/bos/eos/unk ids {ids}; attnlab needs '
        f'{(PAD_ID, BOS_ID, EOS_ID, UNK_ID)} (train it with `train_sentencepiece`)'
      )

  @property
  def size(self) -> int:
    return self._sp.get_piece_size()

  def __len__(self) -> int:
    return self.size

  def __eq__(self, other) -> bool:
    return isinstance(other, SentencePieceVocab) and self.model_proto == other.model_proto

  def __hash__(self) -> int:
    return hash(self.model_proto)

  def __repr__(self) -> str:
    return f'SentencePieceVocab(size={self.size})'

  def encode(self, text: str) -> list[int]:
    return list(self._sp.encode(text)) + [EOS_ID]

  def pieces(self, text: str) -> list[str]:
    return list(self._sp.encode(text, out_type=str))

  def _check(self, i: int) -> int:
    if not 0 <= i < self.size:
      raise ValueError(f'id {i} is outside this vocabulary (size {self.size})')
    return i

  def decode(self, ids: Iterable[int]) -> str:
    """Detokenized text of `ids` up to the first EOS, skipping PAD and BOS."""
    kept = []
    for i in ids:
      i = self._check(int(i))
      if i == EOS_ID:
        break
      if i not in (PAD_ID, BOS_ID):
        kept.append(i)
    return self._sp.decode(kept)

  def tokens(self, ids: Iterable[int]) -> list[str]:
    """One label per id up to and including the first EOS, before PAD (heatmap axes)."""
    out = []
    for i in ids:
      i = self._check(int(i))
      if i == PAD_ID:
        break
      out.append(SPECIAL_TOKENS[i] if i < len(SPECIAL_TOKENS) else self._sp.id_to_piece(i))
      if i == EOS_ID:
        break
    return out

  def to_json(self) -> dict:
    return {'mode': MODE, 'model': base64.b64encode(self.model_proto).decode('ascii')}

  @classmethod
  def from_json(cls, data: dict) -> SentencePieceVocab:
    return cls(base64.b64decode(data['model']))

  def save(self, path: str | os.PathLike) -> None:
    """Writes the model into the file `path` (local or a bucket's: attnlab/storage.py)."""
    storage.write_text(path, json.dumps(self.to_json()))


def load_vocab(path: str | os.PathLike) -> Vocab | SentencePieceVocab:
  """Reads a vocabulary file written by `Vocab.save` or `SentencePieceVocab.save`; a file that
  is not one (damaged, truncated, another kind of JSON) raises DataError naming it."""
  try:
    data = json.loads(storage.read_text(path))
  except json.JSONDecodeError as e:
    raise DataError(f'vocabulary file {path} is not valid JSON ({e})') from None
  except UnicodeDecodeError as e:
    raise DataError(f'vocabulary file {path} is not UTF-8 text (byte {e.start + 1})') from None
  except OSError as e:
    raise DataError(f'vocabulary file {path} cannot be read ({e.strerror or e})') from None
  if not isinstance(data, dict) or not isinstance(data.get('mode'), str):
    raise DataError(f"vocabulary file {path} is not one attnlab wrote: no 'mode' key in a JSON "
                    f'object (it holds {type(data).__name__} {str(data)[:40]!r})')
  try:
    if data['mode'] == MODE:
      return SentencePieceVocab.from_json(data)
    return Vocab.from_json(data)
  except KeyError as e:
    reason = f'no {e} key'
  except binascii.Error as e:
    reason = f'its model is not base64 ({e})'
  except RuntimeError:  # SentencePiece's parser names only its own source line
    reason = 'its SentencePiece model does not parse'
  except (TypeError, ValueError) as e:
    reason = str(e)
  raise DataError(f'vocabulary file {path} is damaged: {reason}')


def train_sentencepiece(
  sentences: Sequence[str], vocab_size: int, cache_dir: str | os.PathLike | None = None
) -> SentencePieceVocab:
  """Trains a unigram SentencePiece model on `sentences` (deterministic; cached if asked).

  Args:
    sentences: training text, one sentence per item (empty ones are skipped).
    vocab_size: pieces including the 4 special tokens and the 256 byte pieces; an upper bound
      (a small corpus may give fewer pieces rather than fail).
    cache_dir: if set, the model is stored there as `<sha256 of sentences and options>.model`
      and reused by later calls with the same input.
  """
  floor = NUM_BYTE_PIECES + len(SPECIAL_TOKENS)
  if vocab_size <= floor:
    raise DataError(
      f'SentencePiece vocab_size={vocab_size} must exceed the {NUM_BYTE_PIECES} byte pieces and '
      f'{len(SPECIAL_TOKENS)} specials ({floor}); raise task.text_vocab_size'
    )
  sentences = [s for s in sentences if s.strip()]
  if not sentences:
    raise ValueError('no non-empty sentences to train a SentencePiece model on')
  options = dict(
    vocab_size=int(vocab_size),
    model_type=MODEL_TYPE,
    pad_id=PAD_ID,
    bos_id=BOS_ID,
    eos_id=EOS_ID,
    unk_id=UNK_ID,
    hard_vocab_limit=False,
    num_threads=TRAIN_THREADS,
    input_sentence_size=0,  # the caller samples; SentencePiece's own sampling is seeded by time
    byte_fallback=True,  # unseen characters become byte pieces, never the unknown piece
    normalization_rule_name='nmt_nfkc',  # SentencePiece's default, named: see the docstring
    minloglevel=2,
  )
  path = None
  if cache_dir:
    digest = hashlib.sha256(json.dumps(options, sort_keys=True).encode())
    for s in sentences:
      digest.update(s.encode('utf-8') + b'\n')
    path = os.path.join(cache_dir, f'{digest.hexdigest()[:32]}.model')
    if os.path.exists(path):
      with open(path, 'rb') as f:
        return SentencePieceVocab(f.read())
  buffer = io.BytesIO()
  try:
    spm.SentencePieceTrainer.train(
      sentence_iterator=iter(sentences), model_writer=buffer, **options
    )
  except RuntimeError as e:
    sizes = re.search(r'smaller than required_chars\. (\d+) vs (\d+)', str(e))
    if not sizes:
      raise
    raise DataError(
      f'SentencePiece vocab_size={vocab_size} is smaller than the {sizes[2]} pieces it needs '
      f'({NUM_BYTE_PIECES} bytes, {len(SPECIAL_TOKENS)} specials and the characters of the '
      'training text); raise task.text_vocab_size'
    ) from None
  vocab = SentencePieceVocab(buffer.getvalue())
  if path:
    os.makedirs(cache_dir, exist_ok=True)
    tmp = f'{path}.tmp{os.getpid()}'
    with open(tmp, 'wb') as f:
      f.write(vocab.model_proto)
    os.replace(tmp, path)  # atomic: concurrent processes never read half a model
  return vocab
