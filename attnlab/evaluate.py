"""Evaluation of one split: teacher-forced loss/accuracy and free decoding with `search`.

Teacher forcing gives loss, perplexity and token accuracy (run data-parallel like training).
Free decoding (greedy or beam, `eval.search`) gives the sequence accuracy, its breakdown by
source length (the view of Bahdanau et al. 2015, Fig. 2) and attention statistics; process 0
writes decoded samples to `samples/` and attention heatmaps of the split's first examples to
`attention/`. In multi-process runs each process decodes its share of every eval batch and the
shares are gathered, so every process computes the metrics over the whole split.
"""

from __future__ import annotations

import functools
import json
import os

import jax
import numpy as np

from attnlab import data, distributed, metrics, search, steps
from attnlab.config import RunConfig
from attnlab.models import EOS_ID, PAD_ID
from attnlab.parallel import DataParallel
from attnlab.reporting import heatmaps

LENGTH_BUCKET_WIDTH = 5  # source tokens per bucket in the by-length breakdown


def decode_batch(model, params, src_BxS, *, method: str, beam_size: int, max_length: int,
                 length_penalty: float) -> search.SearchResult:
  """Encodes once, then searches over `model.decode_step`; jit with the sizes static."""
  variables = {'params': params}
  memory = model.apply(variables, src_BxS, method='encode')
  carry = model.apply(variables, memory, max_length, method='init_decode_carry')
  batch_size = src_BxS.shape[0]
  if method == 'beam':
    memory = search.expand_to_beams(memory, beam_size)
  step_fn = lambda tokens, c: model.apply(variables, memory, tokens, c, method='decode_step')
  if method == 'beam':
    return search.beam_search(step_fn, carry, batch_size=batch_size, beam_size=beam_size,
                              max_length=max_length, length_penalty=length_penalty)
  return search.greedy_search(step_fn, carry, batch_size=batch_size, max_length=max_length)


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
               enabled: bool):
    self.model, self.task, self.cfg, self.parallel = model, task, cfg, parallel
    self.workdir, self.enabled = workdir, enabled
    self._batches: dict[str, list] = {}
    self._eval_step = parallel.compile_eval_step(
        functools.partial(steps.eval_step, apply_fn=model.apply))
    self._decode = jax.jit(
        functools.partial(decode_batch, model, method=cfg.eval.search,
                          beam_size=cfg.eval.beam_size, length_penalty=cfg.eval.length_penalty),
        static_argnames=('max_length',))

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
    for batch in batches:
      out = self._decode(params, batch['source'],
                         max_length=self.max_decode_length(batch['target'].shape[1]))
      # Each process decoded its share of the global batch (same shapes on all processes);
      # gathered in process order, every process holds the rows of the whole split.
      batch, out = distributed.gather_rows((batch, jax.device_get(out)))
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
    if self.cfg.model.attention.timing != 'none' or self.cfg.model.kind == 'transformer':
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
    folder = os.path.join(self.workdir, 'samples')
    os.makedirs(folder, exist_ok=True)
    src_vocab, tgt_vocab = self.task.source_vocab, self.task.target_vocab
    with open(os.path.join(folder, f'{split}_step{step:07d}.txt'), 'w') as f:
      for r in rows[:self.cfg.eval.num_samples]:
        mark = 'ok ' if r['correct'] else 'ERR'
        f.write(f"{mark} #{r['index']}\n  src: {src_vocab.decode(r['source'])}\n"
                f"  ref: {tgt_vocab.decode(r['reference'])}\n"
                f"  hyp: {tgt_vocab.decode(r['hypothesis'])}\n")

  def _write_predictions(self, split: str, rows: list[dict]) -> None:
    """Per-example correctness of the latest evaluation (paired significance tests)."""
    with open(os.path.join(self.workdir, f'predictions_{split}.jsonl'), 'w') as f:
      for r in sorted(rows, key=lambda r: r['index']):
        f.write(json.dumps({'index': r['index'], 'correct': bool(r['correct']),
                            'source_length': len(r['source'])}) + '\n')

  def _write_heatmaps(self, split: str, step: int, rows: list[dict]) -> None:
    if self.cfg.model.kind == 'rnn' and self.cfg.model.attention.timing == 'none':
      return  # no attention to draw
    folder = os.path.join(self.workdir, 'attention')
    os.makedirs(folder, exist_ok=True)
    src_vocab, tgt_vocab = self.task.source_vocab, self.task.target_vocab
    arrays = {}
    for r in sorted(rows, key=lambda r: r['index'])[:self.cfg.eval.num_heatmaps]:
      source, output = src_vocab.tokens(r['source'] + [EOS_ID]), tgt_vocab.tokens(r['output'])
      heatmaps.save_heatmap(
          os.path.join(folder, f"{split}_step{step:07d}_ex{r['index']}.png"), r['attention'],
          source, output,
          title=f"{split} #{r['index']} step {step} ({'correct' if r['correct'] else 'wrong'})")
      arrays[f"weights_{r['index']}"] = np.asarray(r['attention'], np.float32)
      arrays[f"source_{r['index']}"] = np.array(source, dtype=str)
      arrays[f"output_{r['index']}"] = np.array(output, dtype=str)
    np.savez_compressed(os.path.join(folder, f'{split}_step{step:07d}.npz'), **arrays)
