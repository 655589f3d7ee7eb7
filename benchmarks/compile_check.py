"""Compile time and recompilation of the default config on the real input pipeline.

Builds `configs/base.py` as it is (the reverse task, H = 128, Luong general with input feeding,
batch 64, lengths up to 32, buckets of 8) with a smaller train split (the pre-pass tokenises
every example), runs `num_steps` training steps from `attnlab.data.train_batches` through the
same `DataParallel` step as training, and records how often the step was traced (= compiled),
the distinct batch shapes the pipeline produced, the time of each first call of a new shape
(trace + compile + one step) and the eval-time greedy search's first call.
"""

from __future__ import annotations

import time

import jax
import ml_collections

from attnlab import data
from attnlab.config import run as config_lib
from attnlab.decoding import search
from attnlab.models.factory import build_model
from attnlab.runtime.parallel import DataParallel
from attnlab.train import optim, steps
from attnlab.train import start as train_start
from configs import base


def check_default_config(num_steps: int, *, quick: bool = False) -> dict:
  c = base.get_config()
  c.task.num_train_examples = 2000
  if quick:
    c.data.global_batch_size = 8
    c.model.hidden_size = 32
    c.model.embed_dim = 16
  cfg = config_lib.parse(ml_collections.ConfigDict(c))
  task = data.load_task(cfg)
  model = build_model(cfg.model, task.source_vocab.size, task.target_vocab.size)
  tx, _ = optim.make_optimizer(cfg.optim, cfg.train.num_steps)
  state = train_start.init_state(model, tx, cfg)
  parallel = DataParallel(cfg.parallel.mode, devices=jax.local_devices()[:1])
  traces = {'train': 0, 'greedy': 0}

  def counted(s, b, k, axis_name):
    traces['train'] += 1
    return steps.train_step(s, b, k, axis_name=axis_name)

  step_fn = parallel.compile_train_step(counted)
  p_state = parallel.replicate(state)
  key = jax.random.key(0)
  batches = data.train_batches(task, cfg, process_index=0, process_count=1)
  shapes, first_call_s = [], {}
  for _ in range(num_steps):
    batch = next(batches)
    shape = (batch['source'].shape[1], batch['target'].shape[1])
    start = time.perf_counter()
    p_state, sums = step_fn(p_state, parallel.shard_batch(batch), key)
    if shape not in shapes:
      jax.block_until_ready(sums)
      first_call_s[f'{shape[0]}x{shape[1]}'] = round(time.perf_counter() - start, 2)
      shapes.append(shape)
  jax.block_until_ready(p_state)
  batches.close()

  def counted_greedy(params, src, *, max_length):
    traces['greedy'] += 1
    return search.decode_batch(
      model, params, src, method='greedy', beam_size=1, max_length=max_length, length_penalty=0.0
    )

  greedy = jax.jit(counted_greedy, static_argnames=('max_length',))
  src = next(iter(data.eval_batches(task, cfg, 'eval', process_index=0, process_count=1)))
  start = time.perf_counter()
  jax.block_until_ready(greedy(state.params, src['source'], max_length=32))
  greedy_first_s = time.perf_counter() - start
  return {
    'config': 'configs/base.py (reverse, H=128, luong general + input feeding, batch 64)'
    + (' [quick: batch 8, H=32]' if quick else ''),
    'steps': num_steps,
    'batch_shapes': [f'{s}x{t}' for s, t in shapes],
    'train_traces': traces['train'],
    'train_first_call_s': first_call_s,
    'max_train_first_call_s': max(first_call_s.values()),
    'greedy_first_call_s': round(greedy_first_s, 2),
  }
