"""What every translation task shares (parallel_text, wmt14_translate, bible): vocabularies of
one side and the scores of decoded output.

Vocabularies come from the training side only. 'char' and 'word' keep the `size` most frequent
symbols; 'sentencepiece' trains a unigram model with byte fallback (sentencepiece_vocab.py) on
an evenly spaced sample of at most 1M sentences, cached under the data dir.

Scores (`translation_metrics`): corpus BLEU and chrF (sacrebleu, 13a tokenization) of the
detokenized hypotheses against the raw reference text, and `bleu_by_length`: corpus BLEU (with
its brevity penalty, and chrF) per bucket of source length in whitespace-separated WORDS, 0-9,
10-19, ..., 40-49, 50+ (Bahdanau et al. 2015, Figure 2), so that buckets mean the same whatever
the tokenizer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from attnlab import bleu_scores
from attnlab.data.sentencepiece_vocab import SentencePieceVocab, evenly_spaced, train_sentencepiece
from attnlab.data.tasks import Task
from attnlab.data.vocab import TOKENIZERS, Vocab


def make_vocab(
  texts: Sequence[str], tokenizer: str, size: int, cache_dir: str | None = None
) -> Vocab | SentencePieceVocab:
  """A vocabulary of one side from its training texts (deterministic)."""
  if tokenizer not in TOKENIZERS:
    raise ValueError(f'unknown tokenizer {tokenizer!r}; choose from {", ".join(TOKENIZERS)}')
  if tokenizer == 'sentencepiece':
    return train_sentencepiece(evenly_spaced(texts), size, cache_dir)
  full = Vocab.build(texts, tokenizer)  # most frequent first
  return Vocab(full.symbols[:size], tokenizer)


def translation_metrics(task: Task, split: str, rows: list[dict]) -> dict:
  """BLEU/chrF of detokenized outputs against the raw target text, and BLEU by source words."""
  if not rows:
    return {}
  source = task.split(split)
  hyps = [task.target_vocab.decode(r['hypothesis']) for r in rows]
  refs = [source[r['index']]['target'] for r in rows]
  words = [len(source[r['index']]['source'].split()) for r in rows]
  out = bleu_scores.bleu_chrf(hyps, refs, signature=True)
  out['bleu_by_length'] = bleu_scores.bleu_by_length(
    hyps, refs, words, bleu_scores.BLEU_LENGTH_EDGES
  )
  return out


def translation_task(
  name: str, source_vocab, target_vocab, splits: Mapping[str, Callable[[], Any]]
) -> Task:
  """A Task whose decoded output is scored by `translation_metrics`."""
  task = Task(
    name,
    source_vocab,
    target_vocab,
    splits,
    decoded_metrics=lambda split, rows: translation_metrics(task, split, rows),
  )
  return task
