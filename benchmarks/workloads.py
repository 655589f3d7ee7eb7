"""What the benchmark measures: the model configs and the synthetic G2P-sized batches.

Every RNN config is the issue's headline model (bi-LSTM encoder, H = 256, embeddings 64, one
layer each, dropout 0.1, batch 64) with one attention timing and score; the Transformer has
the same width (2 + 2 layers, 4 heads, FFN 1024). Data: G2P-sized pairs, sources of 8-12
symbols from 30 and targets of 8-10 from 45 (vocabulary sizes include the 4 special tokens),
plus EOS; uniform random tokens from a fixed seed. attnlab pads every batch to the pipeline's
buckets (`data.bucket_size`, attnlab.data.pipeline.padded_length), or, in the `-tokens` rows,
groups and pads the rows as token batching does (`data.batching=tokens`, 8 shapes fit to the
length histogram: what the real tasks' configs train with); the PyTorch reference gets the
same rows trimmed to each batch's longest row, as eager code does.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import ml_collections
import numpy as np

from attnlab.config import run as config_lib
from attnlab.data import batching
from attnlab.data.pipeline import padded_length
from attnlab.models import matmul
from attnlab.tokens import EOS_ID, NUM_SPECIAL_TOKENS, PAD_ID
from configs import base

SOURCE_VOCAB, TARGET_VOCAB = 30, 45
SOURCE_LENGTHS, TARGET_LENGTHS = (8, 12), (8, 10)  # symbols, EOS not included
BATCH_SIZE = 64
DECODE_LENGTH = 16  # max_length of greedy and beam search (the padded target length)
BEAM_SIZE = 5


@dataclasses.dataclass(frozen=True)
class Workload:
  """One benchmarked model: a name and the dotted config keys that differ from the base."""

  name: str
  overrides: tuple[tuple[str, object], ...]
  headline: bool = False
  jax_only: bool = False  # no PyTorch counterpart (bfloat16 compute; bfloat16_matmuls has autocast)
  bucket_size: int = 8  # attnlab pads lengths to multiples of this (data.bucket_size)
  # > 0: rows grouped and padded as data.batching=tokens does with data.num_buckets of this
  # (the real tasks' setting): the padded work of the configs users train, not of buckets of 8.
  token_buckets: int = 0

  @property
  def kind(self) -> str:
    return dict(self.overrides).get('model.kind', 'rnn')

  @property
  def dtype(self) -> str:
    return dict(self.overrides).get('model.dtype', 'float32')

  @property
  def matmul_dtype(self) -> str:
    """The operand dtype of its weight matmuls: the peak its MFU is measured against."""
    return jnp.dtype(matmul.MODEL_DTYPES[self.dtype][1]).name

  def value(self, key: str):
    return dict(self.overrides)[key]


def _rnn(timing: str, score: str, feeding: bool, headline: bool = False) -> Workload:
  name = f'{timing}-{score}' + ('-feed' if feeding else '')
  return Workload(
    name,
    (
      ('model.attention.timing', timing),
      ('model.attention.score', score),
      ('model.attention.input_feeding', feeding),
    ),
    headline,
  )


def all_workloads() -> list[Workload]:
  rnn = [_rnn('luong', 'general', True, headline=True)]
  rnn += [_rnn('luong', s, True) for s in ('dot', 'concat')]
  rnn += [_rnn('luong', s, False) for s in ('dot', 'general', 'concat')]
  rnn += [_rnn('bahdanau', s, False) for s in ('dot', 'general', 'concat')]
  transformer = Workload(
    'transformer',
    (
      ('model.kind', 'transformer'),
      ('model.encoder_layers', 2),
      ('model.decoder_layers', 2),
      ('model.transformer.num_heads', 4),
      ('model.transformer.mlp_dim', 1024),
    ),
  )
  headline = rnn[0]
  bf16 = Workload(
    headline.name + '-bf16', headline.overrides + (('model.dtype', 'bfloat16'),), jax_only=True
  )
  # Float32 models with bf16 weight matmuls (AMX / avx512_bf16), against torch.autocast.
  by_name = {w.name: w for w in rnn + [transformer]}
  bf16_matmuls = [
    dataclasses.replace(by_name[name], name=name + '-bf16-matmuls', headline=False,
                        overrides=by_name[name].overrides + (('model.dtype', 'bfloat16_matmuls'),))
    for name in ('luong-general-feed', 'luong-general', 'transformer')
  ]
  # Same model, finer buckets: targets of 9-11 tokens pad to 12 instead of 16.
  bucket4 = Workload(headline.name + '-bucket4', headline.overrides, bucket_size=4)
  # Token batching (configs/g2p.py, bible.py, dates.py): one row per decoder path (the step
  # loop with input feeding and with Bahdanau timing, Luong's whole-sequence path, Transformer).
  tokens = [
    dataclasses.replace(by_name[name], name=name + '-tokens', headline=False, token_buckets=8)
    for name in ('luong-general-feed', 'luong-general', 'bahdanau-concat', 'transformer')
  ]
  return rnn + [transformer, bf16, bucket4] + tokens + bf16_matmuls


def quick_workloads() -> list[Workload]:
  """The smoke test: the headline RNN, tiny (see `quick` in run_config)."""
  return [w for w in all_workloads() if w.headline]


def run_config(
  workload: Workload, *, quick: bool = False, bucket_size: int = 8
) -> config_lib.RunConfig:
  """The validated attnlab config of `workload` (base defaults + the headline sizes)."""
  c = base.get_config()
  c.data.global_batch_size = BATCH_SIZE
  c.data.max_source_length = 16
  c.data.max_target_length = 16
  c.data.bucket_size = bucket_size
  c.model.embed_dim = 64
  c.model.hidden_size = 256
  c.model.dropout = 0.1
  c.model.transformer.max_length = 64
  for key, value in workload.overrides:
    node = c
    *parents, leaf = key.split('.')
    for part in parents:
      node = node[part]
    node[leaf] = value
  if quick:
    c.data.global_batch_size = 8
    c.model.embed_dim = 16
    c.model.hidden_size = 32
    c.model.transformer.mlp_dim = 64
  return config_lib.parse(ml_collections.ConfigDict(c))


def _lengths(rng, n: int) -> tuple[np.ndarray, np.ndarray]:
  """Source and target lengths of `n` pairs, EOS included."""
  return tuple(rng.integers(lo, hi + 1, size=n) + 1 for lo, hi in (SOURCE_LENGTHS, TARGET_LENGTHS))


def _fill(rng, lengths: np.ndarray, vocab: int, width: int) -> np.ndarray:
  """Rows of uniform random tokens of `lengths` (EOS included), PAD after them up to `width`."""
  out = np.full((len(lengths), width), PAD_ID, np.int32)
  for row, n in enumerate(lengths):
    out[row, : n - 1] = rng.integers(NUM_SPECIAL_TOKENS, vocab, size=n - 1)
    out[row, n - 1] = EOS_ID
  return out


def _token_bucket_rows(rng, num_batches: int, batch_size: int, num_buckets: int):
  """The rows of `num_batches` batches as token batching groups them: `num_buckets` shapes fit
  to the length histogram (attnlab.data.batching.choose_shapes), each pair in the shape that
  pads it least, and a bucket that has `batch_size` pairs is the next batch (TokenSchedule's
  walk with fixed rows, so that batches stay comparable with the other workloads')."""
  pool = 64 * num_batches * batch_size
  src_len, tgt_len = _lengths(rng, pool)
  shapes = batching.choose_shapes(src_len, tgt_len, num_buckets)
  which = batching.assign_shapes(src_len, tgt_len, shapes)
  waiting: dict[int, list[int]] = {}
  out = []
  for i, shape in enumerate(which):
    waiting.setdefault(int(shape), []).append(i)
    if len(waiting[int(shape)]) == batch_size:
      rows = np.asarray(waiting.pop(int(shape)))
      out.append((src_len[rows], tgt_len[rows], tuple(int(n) for n in shapes[shape])))
      if len(out) == num_batches:
        return out
  raise AssertionError('the pool is large enough for every bucket to fill')


def make_batches(
  num_batches: int, batch_size: int, bucket_size: int, seed: int = 0, token_buckets: int = 0
):
  """`num_batches` (padded, trimmed) pairs of {'source','target'} int32 batches.

  `padded` follows attnlab's pipeline: lengths rounded up to `bucket_size`, or with
  `token_buckets` > 0 the rows that token batching (`data.batching=tokens`, the real tasks'
  setting) puts together, padded to their bucket's shape. `trimmed` holds the same rows cut to
  the batch's longest source and target, for the eager reference.
  """
  rng = np.random.default_rng(seed)
  groups = _token_bucket_rows(rng, num_batches, batch_size, token_buckets) if token_buckets else ()
  padded, trimmed = [], []
  for k in range(num_batches):
    rows, shape = {}, groups[k][2] if token_buckets else None
    for i, (side, vocab, (lo, hi)) in enumerate(
      (('source', SOURCE_VOCAB, SOURCE_LENGTHS), ('target', TARGET_VOCAB, TARGET_LENGTHS))
    ):
      lengths = groups[k][i] if token_buckets else rng.integers(lo, hi + 1, size=batch_size) + 1
      rows[side] = _fill(rng, lengths, vocab, int(lengths.max()))
    trimmed.append(rows)
    pad = {}
    for i, (side, array) in enumerate(rows.items()):
      width = shape[i] if shape else padded_length(array.shape[1], bucket_size, cap=16)
      pad[side] = np.pad(array, ((0, 0), (0, width - array.shape[1])), constant_values=PAD_ID)
    padded.append(pad)
  return padded, trimmed


def target_tokens(batch: dict) -> int:
  """Real (non-PAD) target tokens, EOS included: what tokens/s counts."""
  return int(np.sum(batch['target'] != PAD_ID))
