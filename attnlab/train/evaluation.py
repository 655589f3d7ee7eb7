"""Evaluation of one split: teacher-forced loss/accuracy and free decoding with `search`.

Teacher forcing gives loss, perplexity and token accuracy (run data-parallel like training).
Free decoding (greedy or beam, `eval.search`) gives the sequence accuracy, its breakdown by
source length (the view of Bahdanau et al. 2015, Fig. 2) and attention statistics. Process 0
writes, into its output directory (the run's workdir during training):
  samples/<split>_step<N>.txt   `eval.num_samples` decoded examples: a fixed random subset of
                                the split (seeded by `seed`), the same examples at every step
  attention/                    heatmaps (PNG + .npz) of the split's first `eval.num_heatmaps`
  predictions_<split>.jsonl     one line per example: index, correct, source_length, and the
                                source, reference(s) and hypothesis as text (score them with
                                any external tool, e.g. sacrebleu on the hypothesis column)
Decoding a large split prints a progress line to stderr every `PROGRESS_EVERY_S` seconds.
In multi-process runs each process decodes its share of every eval batch and the shares are
gathered, so every process computes the metrics over the whole split.

`python -m attnlab.evaluate` (attnlab/evaluate.py) runs the same evaluation on a saved
checkpoint.
"""

from __future__ import annotations

import functools
import io
import json
import os
import sys
import time
import zlib

import jax
import numpy as np
from etils import epath

from attnlab import data, metrics, storage
from attnlab.config.run import RunConfig
from attnlab.decoding import heatmaps, search, spread
from attnlab.rundir import layout
from attnlab.runtime import distributed, interrupt
from attnlab.runtime.parallel import DataParallel
from attnlab.tokens import EOS_ID, PAD_ID
from attnlab.train import steps

LENGTH_BUCKET_WIDTH = 5  # source tokens per bucket in the by-length breakdown
PROGRESS_EVERY_S = 10.0  # seconds between decoding progress lines (short evals print none)


def sample_positions(num_rows: int, num_samples: int, seed: int, split: str) -> list[int]:
  """A fixed random subset of `num_rows` positions (sorted), the same at every evaluation."""
  k = min(num_samples, num_rows)
  rng = np.random.default_rng([seed, zlib.crc32(split.encode())])
  return sorted(int(i) for i in rng.choice(num_rows, size=k, replace=False))


class DecodeProgress:
  """`decoding test: 640/6175 examples | 52.1/s | ETA 1m46s` on stderr, at most every
  `every_s` seconds (None: never)."""

  def __init__(self, split: str, total: int, *, every_s: float | None, stream=None):
    self.split, self.total, self.every_s = split, total, every_s
    self.stream = stream or sys.stderr
    self.start = self.last = time.monotonic()

  def update(self, done: int) -> None:
    now = time.monotonic()
    if self.every_s is None or now - self.last < self.every_s or done >= self.total:
      return
    self.last = now
    rate = done / max(now - self.start, 1e-9)
    eta = (self.total - done) / rate if rate > 0 else float('inf')
    eta_text = f'{int(eta // 60)}m{int(eta % 60):02d}s' if np.isfinite(eta) else '?'
    print(f'decoding {self.split}: {done}/{self.total} examples | {rate:.1f}/s | ETA {eta_text}',
          file=self.stream, flush=True)


def strip(ids) -> list[int]:
  """Token ids up to (without) the first EOS, padding removed."""
  out = []
  for i in np.asarray(ids).tolist():
    if i == EOS_ID:
      break
    if i != PAD_ID:
      out.append(i)
  return out


class Evaluator:
  """Evaluates params on a split; batches and compiled functions are built once and reused."""

  def __init__(self, model, task, cfg: RunConfig, parallel: DataParallel, workdir: str, *,
               enabled: bool, progress_every_s: float | None = PROGRESS_EVERY_S):
    """`workdir` is where samples, heatmaps and predictions go (process 0, if `enabled`)."""
    self.model, self.task, self.cfg, self.parallel = model, task, cfg, parallel
    self.workdir, self.enabled = workdir, enabled
    self.progress_every_s = progress_every_s if enabled else None
    self._batches: dict[str, list] = {}
    self._eval_step = parallel.compile_eval_step(
        functools.partial(steps.eval_step, apply_fn=model.apply))
    self._search = spread.SpreadSearch(
        functools.partial(search.decode_batch, model, method=cfg.eval.search,
                          beam_size=cfg.eval.beam_size, length_penalty=cfg.eval.length_penalty),
        devices=parallel.local_devices)

  def batches(self, split: str) -> list:
    if split not in self._batches:
      self._batches[split] = list(data.eval_batches(self.task, self.cfg, split))
    return self._batches[split]

  def max_decode_length(self, target_width: int) -> int:
    # Never shorter than the references, so long eval examples can be decoded in full.
    return max(self.cfg.eval.max_decode_length or self.cfg.data.max_target_length, target_width)

  def evaluate(self, replicated_params, split: str, step: int) -> dict:
    batches = self.batches(split)
    sums = [self._eval_step(replicated_params, self.parallel.shard_batch(b)) for b in batches]
    result = metrics.summarize(self.parallel.fetch_sums(sums))
    result['teacher_forced_sequence_accuracy'] = result.pop('sequence_accuracy')
    params = self.parallel.fetch(replicated_params)
    if jax.process_count() > 1:  # each process decodes with its own copy: they must agree
      distributed.check_same_on_all_processes(params, f'params at step {step} ({split})')
    rows = self._decode_rows(params, batches, split)
    result.update(self._decoded_metrics(split, rows))
    if self.enabled:
      self._write_samples(split, step, rows)
      self._write_heatmaps(split, step, rows)
      self._write_predictions(split, rows)
    return result

  def _decode_rows(self, params, batches, split: str) -> list[dict]:
    rows = []
    total = sum(int(b['weight'].sum()) for b in batches) * jax.process_count()
    progress = DecodeProgress(split, total, every_s=self.progress_every_s)
    searches = ((batch, batch['source'], self.max_decode_length(batch['target'].shape[1]))
                for batch in batches)
    for batch, out in self._search.results(self._search.replicate(params), searches):
      interrupt.check()  # decoding a large split takes minutes: stop between batches
      # Each process decoded its share of the global batch (same shapes on all processes);
      # gathered in process order, every process holds the rows of the whole split.
      batch, out = distributed.gather_rows((batch, out))
      tokens, attention = np.asarray(out.tokens_BxT), np.asarray(out.attention_BxTxS)
      lengths = np.asarray(out.lengths_B)
      for b in np.flatnonzero(batch['weight']):
        hyp, ref = strip(tokens[b]), strip(batch['target'][b])
        src = strip(batch['source'][b])
        row = {'index': int(batch['index'][b]), 'source': src, 'hypothesis': hyp,
               'reference': ref,
               'output': tokens[b, :lengths[b]].tolist(),  # EOS included if emitted
               # Rows: output steps; columns: source tokens incl. EOS.
               'attention': attention[b, :lengths[b], :len(src) + 1]}
        row['correct'] = self.task.is_correct(split, row)
        rows.append(row)
      progress.update(len(rows))
    return rows

  def _decoded_metrics(self, split: str, rows: list[dict]) -> dict:
    correct = np.array([r['correct'] for r in rows], np.float64)
    lengths = np.array([len(r['source']) for r in rows])
    top = int(lengths.max()) + LENGTH_BUCKET_WIDTH if len(rows) else LENGTH_BUCKET_WIDTH
    edges = list(range(0, top + 1, LENGTH_BUCKET_WIDTH))
    out = {'sequence_accuracy': float(correct.mean()) if len(rows) else 0.0,
           'num_examples': len(rows),
           'by_length': metrics.by_length_bucket(lengths, correct, edges)}
    out.update(self.task.decoded_metrics(split, rows))
    if self.cfg.model.kind == 'transformer' or self.cfg.model.attention.attends:
      entropies = [metrics.attention_entropy(r['attention']) for r in rows]
      out['attention_entropy'] = float(np.mean(entropies)) if entropies else 0.0
      # Hard-alignment error of correctly decoded examples, where gold alignments exist.
      source, errors = self.task.split(split), []
      for r in rows:
        gold = self.task.alignment(source[r['index']]) if r['correct'] else None
        if gold is not None:
          errors.append(metrics.alignment_error_rate(r['attention'][:len(gold)], gold))
      if errors:
        out['alignment_error_rate'] = float(np.mean(errors))
    return out

  def _write_samples(self, split: str, step: int, rows: list[dict]) -> None:
    folder = os.path.join(self.workdir, layout.SAMPLES)
    storage.make_folder(folder)
    src_vocab, tgt_vocab = self.task.source_vocab, self.task.target_vocab
    rows = sorted(rows, key=lambda r: r['index'])
    chosen = sample_positions(len(rows), self.cfg.eval.num_samples, self.cfg.seed, split)
    text = ''.join(f"{'ok ' if r['correct'] else 'ERR'} #{r['index']}\n"
                   f"  src: {src_vocab.decode(r['source'])}\n"
                   f"  ref: {tgt_vocab.decode(r['reference'])}\n"
                   f"  hyp: {tgt_vocab.decode(r['hypothesis'])}\n"
                   for r in (rows[i] for i in chosen))
    storage.write_text(os.path.join(folder, f'{split}_step{step:07d}.txt'), text)

  def _write_predictions(self, split: str, rows: list[dict]) -> None:
    """Per-example results of the latest evaluation: correctness (paired significance tests)
    and the texts (source and references as in the split, the detokenized hypothesis)."""
    source, tgt_vocab = self.task.split(split), self.task.target_vocab
    lines = []
    for r in sorted(rows, key=lambda r: r['index']):
      example = source[r['index']]
      line = {'index': r['index'], 'correct': bool(r['correct']),
              'source_length': len(r['source']), 'source': example['source'],
              'reference': example['target']}
      if 'references' in example:  # tasks scored against several (G2P)
        line['references'] = list(example['references'])
      line['hypothesis'] = tgt_vocab.decode(r['hypothesis'])
      lines.append(json.dumps(line, ensure_ascii=False) + '\n')
    # One write: a bucket's object is uploaded whole.
    storage.write_text(os.path.join(self.workdir, layout.predictions_file(split)), ''.join(lines))

  def _write_heatmaps(self, split: str, step: int, rows: list[dict]) -> None:
    if self.cfg.model.kind == 'rnn' and not self.cfg.model.attention.attends:
      return  # no attention to draw
    folder = os.path.join(self.workdir, layout.ATTENTION)
    storage.make_folder(folder)
    src_vocab, tgt_vocab = self.task.source_vocab, self.task.target_vocab
    examples = self.task.split(split)
    arrays = {}
    for r in sorted(rows, key=lambda r: r['index'])[:self.cfg.eval.num_heatmaps]:
      source, output = src_vocab.tokens(r['source'] + [EOS_ID]), tgt_vocab.tokens(r['output'])
      title = heatmap_title(split, r['index'], step, bool(r['correct']),
                            examples[r['index']]['target'])
      heatmaps.save_heatmap(
          os.path.join(folder, f"{split}_step{step:07d}_ex{r['index']}.png"), r['attention'],
          source, output, title=title)
      arrays[f"weights_{r['index']}"] = np.asarray(r['attention'], np.float32)
      arrays[f"source_{r['index']}"] = np.array(source, dtype=str)
      arrays[f"output_{r['index']}"] = np.array(output, dtype=str)
    npz = io.BytesIO()
    np.savez_compressed(npz, **arrays)
    epath.Path(folder, f'{split}_step{step:07d}.npz').write_bytes(npz.getvalue())


def heatmap_title(split: str, index: int, step: int, correct: bool, reference: str,
                  width: int = 40) -> str:
  """`test #0 step 24000 (correct)`, or with the reference on a second line when the output is
  wrong (cut to `width` characters: the figure is only as wide as the source)."""
  if correct:
    return f'{split} #{index} step {step} (correct)'
  if len(reference) > width:
    reference = reference[:width - 3] + '...'
  return f'{split} #{index} step {step} (wrong)\nreference: {reference}'
