"""Decoding new inputs with a trained run: tokenize, bucket by length, search, detokenize.

`Decoder(run, ...)` holds one set of search settings and decodes lists of raw input strings
(the task's own form: a word for G2P, '<locale> <date>' for dates, a sentence, a string of
symbols) into `Decoded` results, in input order:

  * Inputs are stripped of surrounding whitespace and encoded with the run's source
    vocabulary. An empty input gives an empty result (no hypotheses) without decoding.
    Symbols outside the vocabulary become UNK and are listed in `Decoded.unknown`.
  * An input longer than `max_input_length` tokens (EOS included; default
    `data.max_source_length`, the longest source the model was trained on) gets
    `Decoded.error` and no hypotheses; the others are decoded. `max_input_length=0` lifts
    that limit up to the model's own (`model.transformer.max_length` for a Transformer).
  * Inputs are grouped by padded length (multiples of `data.bucket_size`) and decoded in
    batches of `batch_size` rows (rounded up to a multiple of the local devices, which share
    every batch: decoding/spread.py). A smaller batch is padded to the fewest rows of a shape
    already compiled for its length, else to a power of two rows a device: a file compiles one
    shape per length bucket, a line typed at a terminal a one-row-a-device shape
    (`compilations` counts traces). The devices search the next batches while the host turns
    one into text.
  * Search is decoding/search.py's `search_batch`, the function evaluation runs, so decoding an
    eval split's sources gives its predictions. `nbest=K` keeps the K best finished beam
    hypotheses (distinct, best first); `heads=True` also returns each cross-attention head's
    weights (per layer for a Transformer), recomputed by feeding the chosen hypothesis back
    through `decode_step` with the sown 'intermediates' collected.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from attnlab.config.fields import ConfigError, check_choice
from attnlab.config.run import SEARCH_METHODS
from attnlab.data.pipeline import pad_rows, padded_length
from attnlab.data.vocab import split_text
from attnlab.decoding import hypotheses, spread
from attnlab.decoding import search as search_lib
from attnlab.tokens import BOS_ID, UNK_ID


@dataclasses.dataclass
class Hypothesis:
  """One output: detokenized text, ids and labels (EOS included if emitted) and scores."""

  text: str
  ids: list[int]
  tokens: list[str]
  score: float  # the search's ranking score (beam: length-penalised log-prob)
  log_prob: float  # sum of the token log-probabilities
  attention: np.ndarray  # float32 [len(tokens), len(source_tokens)], what search used
  heads: dict[str, np.ndarray] | None = None  # name -> [heads, T, S]; with heads=True


@dataclasses.dataclass
class Decoded:
  """The result of one input line."""

  index: int  # position in the inputs
  input: str
  source_tokens: list[str]  # labels of the encoded input, EOS included ([] if not decoded)
  hypotheses: list[Hypothesis]  # best first; [] for an empty or rejected input
  unknown: list[str]  # input symbols read as UNK
  error: str | None = None

  @property
  def output(self) -> str:
    return self.hypotheses[0].text if self.hypotheses else ''

  @property
  def attention(self) -> np.ndarray | None:
    return self.hypotheses[0].attention if self.hypotheses else None


def unknown_symbols(vocab, text: str, ids: list[int]) -> list[str]:
  """The symbols of `text` that `vocab` encoded as UNK (ids: `vocab.encode(text)`)."""
  if UNK_ID not in ids:
    return []
  symbols = vocab.pieces(text) if hasattr(vocab, 'pieces') else split_text(text, vocab.mode)
  if len(symbols) != len(ids) - 1:  # cannot align: report the count only
    return ['<unk>'] * ids.count(UNK_ID)
  return [s for s, i in zip(symbols, ids, strict=False) if i == UNK_ID]


def forced_attention(model, params, src_BxS, out_BxT) -> dict[str, jax.Array]:
  """Every multi-head cross attention's weights while `out_BxT` is fed back (teacher forcing
  through `decode_step`, the step search ran): name -> [B, heads, T, S]."""
  variables = {'params': params}
  memory = model.apply(variables, src_BxS, method='encode')
  carry = model.apply(variables, memory, out_BxT.shape[1], method='init_decode_carry')
  bos_Bx1 = jnp.full((out_BxT.shape[0], 1), BOS_ID, out_BxT.dtype)
  in_BxT = jnp.concatenate([bos_Bx1, out_BxT[:, :-1]], axis=1)

  def step(carry, tokens_B):
    (_, _, carry), state = model.apply(variables, memory, tokens_B, carry, method='decode_step',
                                       mutable=['intermediates'])
    return carry, state['intermediates']

  _, sown = lax.scan(step, carry, in_BxT.T)
  out = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path(sown)[0]:
    names = [str(getattr(p, 'key', '')) for p in path]
    if 'attention_weights' not in names or 'self_attn' in names:
      continue  # keep cross attention only
    layers = [n for n in names if n.startswith('decoder_layers_')]
    name = f"layer {layers[0].rsplit('_', 1)[1]}" if layers else 'cross attention'
    out[name] = leaf[:, :, :, 0, :].transpose(1, 2, 0, 3)  # TxBxNx1xS -> BxNxTxS
  return dict(sorted(out.items()))


def _counted(fn, counter: collections.Counter, key: str):
  """`fn`, counting its traces (each trace is one compilation under jit)."""

  @functools.wraps(fn)
  def wrapper(*args, **kwargs):
    counter[key] += 1
    return fn(*args, **kwargs)

  return wrapper


class Decoder:
  """Decodes raw inputs with one run and one set of search settings (module docstring)."""

  def __init__(self, run, *, search: str | None = None, beam_size: int | None = None,
               length_penalty: float | None = None, max_decode_length: int | None = None,
               batch_size: int | None = None, max_input_length: int | None = None):
    cfg = run.cfg
    self.run = run
    self.search = cfg.eval.search if search is None else search
    self.beam_size = cfg.eval.beam_size if beam_size is None else int(beam_size)
    self.length_penalty = cfg.eval.length_penalty if length_penalty is None else length_penalty
    self.max_decode_length = (max_decode_length or cfg.eval.max_decode_length
                              or cfg.data.max_target_length)
    self.batch_size = batch_size or cfg.data.global_batch_size
    self.model_limit = (cfg.model.transformer.max_length if cfg.model.kind == 'transformer'
                        else 0)  # the longest sequence the model can represent (0: any)
    self.max_input_length = (cfg.data.max_source_length if max_input_length is None
                             else int(max_input_length))
    self.multi_head = cfg.model.kind == 'transformer' or cfg.model.attention.num_heads > 1
    self._check()
    self.compilations = collections.Counter()
    self.compiled_rows: dict[int, set[int]] = collections.defaultdict(set)  # S -> row counts
    search_fn = functools.partial(search_lib.search_batch, run.model, method=self.search,
                                  beam_size=self.beam_size, length_penalty=self.length_penalty)
    self._search = spread.SpreadSearch(_counted(search_fn, self.compilations, 'search'))
    self._params = self._search.replicate(run.params)
    self._heads = jax.jit(_counted(functools.partial(forced_attention, run.model),
                                   self.compilations, 'heads'))

  def _check(self) -> None:
    check_choice('--search', self.search, SEARCH_METHODS)
    for name in ('beam_size', 'max_decode_length', 'batch_size'):
      if getattr(self, name) < 1:
        raise ConfigError(f'--{name}={getattr(self, name)} must be a positive integer')
    if not math.isfinite(self.length_penalty):
      raise ConfigError(f'--length_penalty={self.length_penalty} must be a finite number (GNMT '
                        'alpha, e.g. 0.6)')
    if self.max_input_length < 0:
      raise ConfigError(f'--max_input_length={self.max_input_length} must be >= 0 (0: no limit)')
    if self.model_limit and self.max_decode_length > self.model_limit:
      raise ConfigError(f'--max_decode_length={self.max_decode_length} exceeds the model\'s '
                        f'model.transformer.max_length={self.model_limit}')

  @property
  def input_limit(self) -> int:
    """The most input tokens (EOS included) a line may have; 0 = no limit."""
    limits = [n for n in (self.max_input_length, self.model_limit) if n]
    return min(limits) if limits else 0

  def decode(self, inputs, *, nbest: int = 1, heads: bool = False) -> list[Decoded]:
    """One `Decoded` per input string, in input order (module docstring)."""
    if isinstance(inputs, str):
      raise TypeError('decode takes a list of input strings, e.g. decode(["abc"])')
    width = 1 if self.search == 'greedy' else self.beam_size
    if nbest < 1:
      raise ConfigError(f'--nbest={nbest} must be at least 1 (hypotheses per input)')
    if nbest > width:
      need = '--search=beam with ' if self.search == 'greedy' else ''
      raise ConfigError(f'--nbest={nbest} needs {need}--beam_size >= {nbest} (the search keeps '
                        f'{width} hypotheses)')
    src_vocab = self.run.source_vocab
    results, groups = [], collections.defaultdict(list)
    for index, line in enumerate(inputs):
      text = str(line).strip()
      result = Decoded(index, str(line), [], [], [])
      results.append(result)
      if not text:
        continue
      ids = src_vocab.encode(text)
      result.unknown = unknown_symbols(src_vocab, text, ids)
      limit = self.input_limit
      if limit and len(ids) > limit:
        result.error = (f'{len(ids)} tokens (EOS included) exceed the limit of {limit} '
                        f'({self._limit_reason()})')
        continue
      result.source_tokens = src_vocab.tokens(ids)
      width_S = padded_length(len(ids), self.run.cfg.data.bucket_size, self.model_limit)
      groups[width_S].append((result, ids))
    for (members, src_BxS), found in self._search.results(self._params, self._batches(groups)):
      self._collect(members, src_BxS, found, nbest, heads)
    return results

  def _batches(self, groups: dict[int, list]) -> Iterator[tuple[Any, np.ndarray, int]]:
    """(members, src_BxS) with its src_BxS and max_length, for SpreadSearch.results."""
    for width_S, members in sorted(groups.items()):
      for start in range(0, len(members), self.batch_size):
        chunk = members[start:start + self.batch_size]
        src_BxS = pad_rows([ids for _, ids in chunk], self._rows(width_S, len(chunk)), width_S)
        yield (chunk, src_BxS), src_BxS, self.max_decode_length

  def _rows(self, width_S: int, members: int) -> int:
    """Rows of the padded batch: a shape already compiled for width_S, else a power of two
    rows a device (at most batch_size rounded up to the devices)."""
    compiled = [n for n in self.compiled_rows[width_S] if n >= members]
    if compiled:
      return min(compiled)
    devices = self._search.num_devices
    per_device = min(-(-self.batch_size // devices), 1 << (-(-members // devices) - 1).bit_length())
    self.compiled_rows[width_S].add(devices * per_device)
    return devices * per_device

  def _limit_reason(self) -> str:
    if self.model_limit and self.input_limit == self.model_limit:
      return f"the model's model.transformer.max_length={self.model_limit}"
    if self.max_input_length != self.run.cfg.data.max_source_length:
      return f'--max_input_length={self.max_input_length}'
    return ('data.max_source_length, the longest source the model was trained on; '
            '--max_input_length=0 lifts it')

  def _collect(self, members, src_BxS: np.ndarray, found, nbest: int, heads: bool) -> None:
    """Each member's hypotheses from its batch's search result (on the host)."""
    head_weights = None
    if heads and self.multi_head:
      K = nbest
      src_NxS = np.repeat(src_BxS, K, axis=0)  # row b*K + k: hypothesis k of input b
      out_NxT = np.asarray(found.tokens_BxKxT[:, :K]).reshape(src_BxS.shape[0] * K, -1)
      head_weights = jax.device_get(self._heads(self.run.params, src_NxS, out_NxT))
    tgt_vocab = self.run.target_vocab
    valid_BxK = np.asarray(found.scores_BxK) > hypotheses.NEG_INF / 2
    for b, (result, ids) in enumerate(members):
      for k in range(nbest):
        if not valid_BxK[b, k]:
          continue  # fewer finished hypotheses than asked for
        length = int(found.lengths_BxK[b, k])
        out_ids = np.asarray(found.tokens_BxKxT[b, k, :length]).tolist()
        hyp = Hypothesis(
            text=tgt_vocab.decode(out_ids), ids=out_ids, tokens=tgt_vocab.tokens(out_ids),
            score=float(found.scores_BxK[b, k]), log_prob=float(found.log_probs_BxK[b, k]),
            attention=np.asarray(found.attention_BxKxTxS[b, k, :length, :len(ids)], np.float32))
        if head_weights is not None:
          hyp.heads = {name: np.asarray(w[b * nbest + k, :, :length, :len(ids)], np.float32)
                       for name, w in head_weights.items()}
        result.hypotheses.append(hyp)


def as_json(result: Decoded) -> dict[str, Any]:
  """The jsonl record of one result: input, outputs with scores, token lists, UNKs, error."""
  return {
      'index': result.index,
      'input': result.input,
      'output': result.output,
      'outputs': [h.text for h in result.hypotheses],
      'scores': [h.score for h in result.hypotheses],
      'log_probs': [h.log_prob for h in result.hypotheses],
      'source_tokens': result.source_tokens,
      'output_tokens': [h.tokens for h in result.hypotheses],
      'unknown': result.unknown,
      'error': result.error,
  }
