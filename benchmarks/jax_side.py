"""attnlab's side of the benchmark: the real training step and the real eval-time search.

Training runs `attnlab.train.steps.train_step` through `attnlab.runtime.parallel.DataParallel`
on one device (the code path `attnlab.train.loop` runs), with a fresh `shard_batch` per step and
no host sync inside a repetition. Decoding runs `attnlab.decoding.search.decode_batch` jitted as the
`Evaluator` does. Traces are counted so that recompilation shows up in the results.
"""

from __future__ import annotations

import time

import jax
import numpy as np

from attnlab.decoding import search
from attnlab.models.factory import build_model
from attnlab.runtime.parallel import DataParallel
from attnlab.train import optim, steps
from attnlab.train import start as train_start
from benchmarks import flops as flops_lib
from benchmarks import workloads


class JaxRunner:
  """Model, state and compiled steps of one workload; counts traces of every function."""

  def __init__(
    self, workload: workloads.Workload, *, quick: bool, bucket_size: int = 8, mode: str = 'pmap'
  ):
    self.cfg = cfg = workloads.run_config(workload, quick=quick, bucket_size=bucket_size)
    self.model = build_model(cfg.model, workloads.SOURCE_VOCAB, workloads.TARGET_VOCAB)
    tx, _ = optim.make_optimizer(cfg.optim, cfg.train.num_steps)
    state = train_start.init_state(self.model, tx, cfg)
    self.params = state.params
    self.parallel = DataParallel(mode, devices=jax.local_devices()[:1])
    self.traces = {'train': 0, 'greedy': 0, 'beam': 0}

    def counted_train_step(s, b, k, axis_name):
      self.traces['train'] += 1
      return steps.train_step(s, b, k, axis_name=axis_name)

    self._train_step = self.parallel.compile_train_step(counted_train_step)
    self._p_state = self.parallel.replicate(state)
    self._key = jax.random.key(1)
    self._decoders = {}
    for method in ('greedy', 'beam'):

      def counted_decode(params, src, *, max_length, method=method):
        self.traces[method] += 1
        return search.decode_batch(
          self.model,
          params,
          src,
          method=method,
          beam_size=workloads.BEAM_SIZE,
          max_length=max_length,
          length_penalty=cfg.eval.length_penalty,
        )

      self._decoders[method] = jax.jit(counted_decode, static_argnames=('max_length',))
    self.donated = None

  # --- training ------------------------------------------------------------------------
  def train(self, batches: list[dict]) -> float:
    """Runs one step per batch (dispatch only, as train.py's loop); returns wall seconds."""
    start = time.perf_counter()
    sums = None
    for batch in batches:
      old = self._p_state
      self._p_state, sums = self._train_step(old, self.parallel.shard_batch(batch), self._key)
      if self.donated is None:
        self.donated = all(x.is_deleted() for x in jax.tree.leaves(old.params))
    jax.block_until_ready(sums)
    return time.perf_counter() - start

  def train_step_flops(self, batch: dict) -> int:
    """Matmul FLOPs of one training step on `batch` (forward + backward, all steps)."""
    state = self.parallel.fetch(self._p_state)
    # train_step needs a named axis for its collectives: trace it under a size-1 vmap.
    vm = jax.vmap(
      lambda s, b: steps.train_step(s, b, self._key, axis_name='d'),
      in_axes=(None, 0),
      axis_name='d',
    )
    one = jax.tree.map(lambda x: x[None], batch)
    return flops_lib.matmul_flops(vm, state, one)

  # --- decoding ------------------------------------------------------------------------
  def decode(self, method: str, batches: list[dict], max_length: int):
    start = time.perf_counter()
    outs = [
      self._decoders[method](self.params, b['source'], max_length=max_length) for b in batches
    ]
    jax.block_until_ready(outs)
    return time.perf_counter() - start, outs


def check_same_logits(runner: JaxRunner, torch_model, batch: dict, autocast: bool = False) -> float:
  """Max |logit difference| between attnlab and the reference on a teacher-forced batch (the
  reference under torch.autocast where attnlab runs model.dtype=bfloat16_matmuls)."""
  import torch

  from attnlab.train.steps import decoder_input
  from benchmarks.torch_reference import precision

  tgt_in = np.asarray(decoder_input(batch['target']))
  ours = np.asarray(runner.model.apply({'params': runner.params}, batch['source'], tgt_in))
  torch_model.eval()
  with torch.inference_mode(), precision(autocast):
    theirs = torch_model(
      torch.from_numpy(np.array(batch['source'])).long(), torch.from_numpy(np.array(tgt_in)).long()
    ).float().numpy()
  valid = batch['target'] != 0
  return float(np.max(np.abs(ours - theirs)[valid]))
