"""The tasks the systems are measured on, and all that differs between them.

  g2p    attnlab's CMUdict G2P split (configs/g2p.py): a word's letters -> its phonemes, one
         token each; scored by WER against every pronunciation of the word
  bible  attnlab's Bible Spanish -> English split (configs/bible.py): verses as attnlab's
         SentencePiece pieces (2,000 a side, trained on the training verses), the peers
         reading and writing the same pieces; scored by sacrebleu BLEU of the detokenized
         output against the raw English verse

Both use the same matched network (recipes.py) with each recipe's own dropout and label
smoothing, so a system's speed and quality on the two tasks show what the data changes: G2P
has short sequences (at most 22 letters) and a vocabulary of 30-odd symbols, the Bible
sentences of 30-90 pieces from 2,000.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib

import sentencepiece as spm

from attnlab import bleu_scores, metrics
from attnlab.data import load_task


@dataclasses.dataclass(frozen=True)
class PeerTask:
  name: str  # --task
  label: str  # in the report
  config: str  # attnlab's recipe, whose data and vocabularies every system uses
  metric: str  # metrics.DIRECTIONS: 'wer' (percent) or 'bleu'
  metric_label: str  # in the report's headers
  input_name: str  # what one source line is, for the decoding rate ('words', 'verses')
  dropout: float  # the recipe's
  label_smoothing: float  # the recipe's
  max_length: int  # tokens a training source or target may have (longer pairs are dropped)
  max_output: int  # tokens a decoded output may have
  tokens_per_batch: int  # attnlab's token batching: about the sentence batches' padded tokens
  every: int  # steps between checkpoints (and validations) in a full run
  # OpenNMT-py batches from a buffer of bucket_size examples, reading its corpus again until the
  # buffer is full: its default, 262,144, is 2 passes over G2P's 120,356 lines but 9 over the
  # Bible's 27,896 pairs (94 over --quick's 3,000), its two data workers then taking a core from
  # training. None: the default.
  opennmt_bucket_size: int | None = None
  # Times the timed decode reads the test sources: G2P's 6,175 words decode in ~2 s beyond a
  # command's start-up, too short to time against its noise.
  decode_repeats: int = 1

  @property
  def lower_is_better(self) -> bool:
    return metrics.lower_is_better(self.metric)

  def shown(self, score: float) -> str:
    """'WER 34.5%', 'BLEU 22.3': a score in the report's words."""
    return f'WER {score:g}%' if self.metric == 'wer' else f'BLEU {score:g}'

  @functools.cached_property
  def data(self):
    """attnlab's Task (records and vocabularies) of the recipe."""
    module = importlib.import_module(self.config.removesuffix('.py').replace('/', '.'))
    return load_task(module.get_config())

  def columns(self, record: dict) -> tuple[str, str, str, str]:
    """(source tokens, target tokens, attnlab's input, references) of one record: a line of
    each exported file."""
    if self.name == 'g2p':
      return (' '.join(record['source']), record['target'], record['source'],
              '\t'.join(record['references']))
    source = ' '.join(self.data.source_vocab.pieces(record['source']))
    target = ' '.join(self.data.target_vocab.pieces(record['target']))
    return source, target, record['source'], record['target']

  def text(self, lines: list[str], pieces: bool) -> list[str]:
    """A system's output lines as text to score: a peer's pieces detokenized as attnlab's
    target vocabulary detokenizes its own."""
    if not pieces or self.name == 'g2p':
      return lines
    processor = spm.SentencePieceProcessor(model_proto=self.data.target_vocab.model_proto)
    return [processor.decode_pieces(line.split()) for line in lines]

  def score(self, outputs: list[str], references: list[str]) -> float:
    """The task's metric of output texts against the exported reference lines: WER in
    percent (a word is right when it equals any of its pronunciations) or corpus BLEU."""
    if len(outputs) != len(references):
      raise ValueError(f'{len(outputs)} output lines for {len(references)} references')
    if self.name == 'g2p':
      hyps = [line.split() for line in outputs]
      refs = [[ref.split() for ref in line.split('\t')] for line in references]
      return 100 * metrics.error_rates(hyps, refs)['wer']
    return bleu_scores.bleu_chrf(outputs, references)['bleu']


TASKS = {
  'g2p': PeerTask(
    name='g2p', label='CMUdict G2P', config='configs/g2p.py', metric='wer',
    metric_label='WER %', input_name='words', dropout=0.2, label_smoothing=0.1,
    max_length=32, max_output=32, tokens_per_batch=640, every=1000, decode_repeats=8,
  ),
  # 99.8% of the training pairs have at most 96 pieces a side (configs/bible.py); outputs may
  # run longer, as the longest test verses do.
  'bible': PeerTask(
    name='bible', label='Bible Spanish -> English', config='configs/bible.py', metric='bleu',
    metric_label='BLEU', input_name='verses', dropout=0.3, label_smoothing=0.0,
    max_length=96, max_output=192, tokens_per_batch=2624, every=500,
    opennmt_bucket_size=16_384,
  ),
}
