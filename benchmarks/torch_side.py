"""The PyTorch reference's side of the benchmark: model from a workload, timed train/decode.

Feeds each batch trimmed to its longest row and optionally loads attnlab's parameters so that
both frameworks run the same network. Intra-op threads: XLA's CPU backend uses every core, so
PyTorch may too, but its OpenMP barriers spin and collapse when the machine is oversubscribed
(other processes running); `pick_threads` times 1 and all cores and keeps the faster per
phase, so the reference is never handicapped by the thread count.
"""

from __future__ import annotations

import os
import time

import torch

from benchmarks import torch_reference, torch_transformer, workloads


def _tensors(batch: dict) -> dict:
  return {k: torch.from_numpy(v).long() for k, v in batch.items()}


class TorchRunner:
  def __init__(self, workload: workloads.Workload, *, quick: bool, params=None):
    torch.set_num_threads(os.cpu_count() or 1)
    cfg = workloads.run_config(workload, quick=quick)
    m = cfg.model
    if m.kind == 'rnn':
      self.model = torch_reference.TorchSeq2Seq(
        workloads.SOURCE_VOCAB,
        workloads.TARGET_VOCAB,
        embed_dim=m.embed_dim,
        hidden_size=m.hidden_size,
        timing=m.attention.timing,
        score=m.attention.score,
        input_feeding=m.attention.input_feeding,
        dropout=m.dropout,
      )
    else:
      self.model = torch_transformer.TorchTransformer(
        workloads.SOURCE_VOCAB,
        workloads.TARGET_VOCAB,
        hidden_size=m.hidden_size,
        num_heads=m.transformer.num_heads,
        mlp_dim=m.transformer.mlp_dim,
        encoder_layers=m.encoder_layers,
        decoder_layers=m.decoder_layers,
        dropout=m.dropout,
        max_length=m.transformer.max_length,
      )
    if params is not None:
      self.model.load_flax_params(params)
    self.length_penalty = cfg.eval.length_penalty
    # attnlab's float32 model with bf16 weight matmuls is compared with torch.autocast.
    self.autocast = m.dtype == 'bfloat16_matmuls'
    self._train_step = torch_reference.make_train_step(
      self.model, learning_rate=cfg.optim.learning_rate, clip_norm=cfg.optim.clip_norm,
      autocast=self.autocast,
    )
    self._cache = {}
    self.threads = {}

  def pick_threads(self, phase: str, fn) -> int:
    """Times `fn` (twice each) with 1 and with all cores; keeps the faster for `phase`."""
    best = None
    for n in sorted({1, os.cpu_count() or 1}):
      torch.set_num_threads(n)
      seconds = min(fn() for _ in range(2))
      if best is None or seconds < best[1]:
        best = (n, seconds)
    self.threads[phase] = best[0]
    torch.set_num_threads(best[0])
    return best[0]

  def _as_tensors(self, batch: dict) -> dict:
    key = id(batch)
    if key not in self._cache:
      self._cache[key] = (batch, _tensors(batch))  # keep `batch` alive so ids stay unique
    return self._cache[key][1]

  def train(self, batches: list[dict]) -> float:
    tensors = [self._as_tensors(b) for b in batches]
    torch.set_num_threads(self.threads.get('train', torch.get_num_threads()))
    start = time.perf_counter()
    for t in tensors:
      self._train_step(t['source'], t['target'])
    return time.perf_counter() - start

  def decode(self, method: str, batches: list[dict], max_length: int):
    tensors = [self._as_tensors(b) for b in batches]
    torch.set_num_threads(self.threads.get(method, torch.get_num_threads()))
    start = time.perf_counter()
    with torch_reference.precision(self.autocast):
      if method == 'greedy':
        outs = [torch_reference.greedy(self.model, t['source'], max_length) for t in tensors]
      else:
        outs = [
          torch_reference.beam(
            self.model, t['source'], max_length, workloads.BEAM_SIZE, self.length_penalty
          )
          for t in tensors
        ]
    return time.perf_counter() - start, outs
