"""Padding of training batches, example-count vs token batching, on the real tasks.

    python -m benchmarks.padding               # G2P, Bible, dates: padding only, no training
    python -m benchmarks.padding --throughput  # and G2P training throughput, examples vs tokens

Each task config is read as it is (configs/g2p.py, bible.py, dates.py) and its training
pipeline built with `data.batching=examples` (the config's batch and buckets) and with
`data.batching=tokens` for each --num_buckets. One epoch of global batches is laid out with
`TrainBatches.layout` (the pipeline's own shapes, without tokenizing), and for each:
padding = (sum of rows x (S + T)) / (real source + target tokens) - 1, the padded work as a
fraction of the real work ('real' = the share of computed positions that are real tokens);
also per side, the distinct shapes (= compilations of the train step) and pairs per step.
`tokens_per_batch` is set to keep the pairs per step of the config: global_batch_size x the
mean over pairs of max(S, T) of their shape, rounded to a multiple of 64, so an epoch takes
about as many steps as before.

--throughput trains configs/g2p.py's model on one device for --rounds x --round_steps steps
per mode, alternating examples / tokens rounds in this process (other jobs share the cores);
every padded shape is compiled first (timed apart), then steps are timed as the training loop
runs them (host pipeline with prefetch, transfer, step). Reported: real target tokens per
second (what training logs as tokens_per_sec), pairs and steps per second, load averages.

Writes benchmarks/results/padding_<machine>.json and .md.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import time

import numpy as np

from attnlab.runtime import machine
from benchmarks import measure

RESULTS_DIR = os.path.join(os.path.dirname(__file__), 'results')
TASKS = ('g2p', 'bible', 'dates')


def task_config(name: str, **data):
  config = importlib.import_module(f'configs.{name}').get_config()
  with config.unlocked():
    config.data.update(data)
  return config


def epoch_layout(batches) -> dict:
  """Padding, shapes and batch sizes of the first epoch's global steps of `batches`."""
  src_len, tgt_len = batches.source_lengths, batches.target_lengths
  steps = math.ceil(batches.steps_per_epoch)
  real = {'source': 0, 'target': 0}
  computed = {'source': 0, 'target': 0}
  shapes, pairs = set(), 0
  for k in range(steps):
    indices, S, T = batches.layout(k)
    rows = len(indices)
    real['source'] += int(src_len[indices].sum())
    real['target'] += int(tgt_len[indices].sum())
    computed['source'] += rows * S
    computed['target'] += rows * T
    shapes.add((rows, S, T))
    pairs += rows
  both = sum(computed.values()) / sum(real.values()) - 1
  return {'steps': steps, 'padding': round(both, 4),
          'padding_source': round(computed['source'] / real['source'] - 1, 4),
          'padding_target': round(computed['target'] / real['target'] - 1, 4),
          'real_share': round(sum(real.values()) / sum(computed.values()), 4),
          'compilations': len(shapes), 'pairs_per_step': round(pairs / steps, 1),
          'target_tokens_per_step': round(real['target'] / steps, 1)}


def matching_tokens_per_batch(batches, num_buckets: int, global_batch_size: int) -> int:
  """global_batch_size x mean max(S, T) of the pairs' shapes, to a multiple of 64."""
  from attnlab.data import batching

  src, tgt = batches.kept_lengths()
  shapes = batching.choose_shapes(src, tgt, num_buckets)
  longer = shapes.max(axis=1)[batching.assign_shapes(src, tgt, shapes)]
  return int(round(global_batch_size * float(longer.mean()) / 64)) * 64


def train_pipeline(config, task):
  from attnlab import data
  from attnlab.config import run as config_lib

  return data.train_batches(task, config_lib.parse(config), process_index=0, process_count=1,
                            num_devices=1)


def padding_rows(name: str, num_buckets: list[int]) -> dict:
  """The examples row and one tokens row per bucket count for task config `name`."""
  from attnlab import data
  from attnlab.config import run as config_lib

  base = task_config(name)
  task = data.load_task(config_lib.parse(base))
  examples = train_pipeline(base, task)
  b = base.data.global_batch_size
  rows = {'examples': {'global_batch_size': b, 'bucket_size': base.data.bucket_size,
                       **epoch_layout(examples)}}
  for k in num_buckets:
    tokens = matching_tokens_per_batch(examples, k, b)
    batches = train_pipeline(task_config(name, batching='tokens', num_buckets=k,
                                         tokens_per_batch=tokens), task)
    rows[f'tokens_{k}'] = {'num_buckets': k, 'tokens_per_batch': tokens,
                           'shapes': [list(s) for s in batches.shapes], **epoch_layout(batches)}
    batches.close()
    print(name, k, rows[f'tokens_{k}']['padding'], flush=True)
  examples.close()
  return {'kept_pairs': len(examples.kept_lengths()[0]), 'rows': rows}


def throughput(num_buckets: int, rounds: int, round_steps: int) -> dict:
  """G2P training, examples vs tokens rounds alternating in this process."""
  from attnlab.runtime import parallel as parallel_lib

  parallel_lib.tune_host_allocator()  # as training does, before JAX starts its threads
  import jax

  from attnlab import data
  from attnlab.config import run as config_lib
  from attnlab.models.factory import build_model
  from attnlab.tokens import PAD_ID
  from attnlab.train import loop as train
  from attnlab.train import optim, steps

  base = task_config('g2p')
  cfg = config_lib.parse(base)
  task = data.load_task(cfg)
  configs = {'examples': base}
  batches = {'examples': train_pipeline(base, task)}
  tokens = matching_tokens_per_batch(batches['examples'], num_buckets,
                                     base.data.global_batch_size)
  configs['tokens'] = task_config('g2p', batching='tokens', tokens_per_batch=tokens,
                                  num_buckets=num_buckets)
  batches['tokens'] = train_pipeline(configs['tokens'], task)
  model = build_model(cfg.model, task.source_vocab.size, task.target_vocab.size)
  tx, _ = optim.make_optimizer(cfg.optim, cfg.train.num_steps)
  dp = parallel_lib.DataParallel(cfg.parallel.mode, devices=jax.local_devices()[:1])
  step_fn = dp.compile_train_step(lambda s, b, k, axis_name: steps.train_step(
      s, b, k, axis_name=axis_name, label_smoothing=cfg.train.label_smoothing))
  key = jax.random.key(0)
  out = {}
  for mode in configs:
    total = rounds * round_steps
    shapes = sorted({(len(i), S, T) for i, S, T in map(batches[mode].layout, range(total))})
    p_state = dp.replicate(train.init_state(model, tx, cfg))
    started = time.perf_counter()
    for rows, S, T in shapes:  # compile every shape the timed steps meet
      dummy = {'source': np.full((rows, S), 3, np.int32), 'target': np.full((rows, T), 3, np.int32)}
      p_state, sums = step_fn(p_state, dp.shard_batch(dummy), key)
    jax.block_until_ready(sums)
    out[mode] = {'batches': batches[mode], 'state': p_state, 'compilations': len(shapes),
                 'compile_s': round(time.perf_counter() - started, 1), 'rounds': []}
  for r in range(rounds):
    for mode, o in out.items():
      load_before = os.getloadavg()[0]
      started = time.perf_counter()
      target_tokens = pairs = 0
      for _ in range(round_steps):
        batch = next(o['batches'])
        target_tokens += int((batch['target'] != PAD_ID).sum())
        pairs += len(batch['target'])
        o['state'], sums = step_fn(o['state'], dp.shard_batch(batch), key)
      jax.block_until_ready(o['state'])
      wall = time.perf_counter() - started
      o['rounds'].append({'round': r, 'wall_s': round(wall, 2),
                          'target_tokens_per_s': round(target_tokens / wall, 1),
                          'pairs_per_s': round(pairs / wall, 1),
                          'steps_per_s': round(round_steps / wall, 3),
                          'load_before': round(load_before, 2),
                          'load_after': round(os.getloadavg()[0], 2)})
      print(mode, o['rounds'][-1], flush=True)
  result = {'task': 'g2p', 'tokens_per_batch': tokens, 'num_buckets': num_buckets,
            'round_steps': round_steps}
  for mode, o in out.items():
    o['batches'].close()
    per_s = [x['target_tokens_per_s'] for x in o['rounds']]
    result[mode] = {'compilations': o['compilations'], 'compile_s': o['compile_s'],
                    'target_tokens_per_s_median': float(np.median(per_s)), 'rounds': o['rounds']}
  return result


def markdown(result: dict) -> str:
  lines = [f'# Padding of training batches: {result["machine"]}\n',
           f'`{result["command"]}`. padding = padded / real tokens (source + target), over one '
           'epoch of global batches; real = real / computed positions.\n',
           '| task | batching | shapes (compiles) | padding | source | target | real | pairs/step '
           '| target tokens/step |', '|---|---|---:|---:|---:|---:|---:|---:|---:|']
  for name, task in result['padding'].items():
    for label, r in task['rows'].items():
      how = (f'examples {r["global_batch_size"]}, buckets of {r["bucket_size"]}'
             if label == 'examples' else
             f'tokens {r["tokens_per_batch"]}, num_buckets {r["num_buckets"]}')
      lines.append(f'| {name} | {how} | {r["compilations"]} | {100 * r["padding"]:.1f}% | '
                   f'{100 * r["padding_source"]:.1f}% | {100 * r["padding_target"]:.1f}% | '
                   f'{100 * r["real_share"]:.1f}% | {r["pairs_per_step"]:g} | '
                   f'{r["target_tokens_per_step"]:g} |')
  t = result.get('throughput')
  if t:
    lines += ['', f'## G2P training throughput (configs/g2p.py model, 1 device, rounds of '
              f'{t["round_steps"]} steps alternating)\n',
              '| batching | compiles | compile s | round | target tokens/s | pairs/s | steps/s '
              '| load |', '|---|---:|---:|---:|---:|---:|---:|---|']
    for mode in ('examples', 'tokens'):
      for x in t[mode]['rounds']:
        lines.append(f'| {mode} | {t[mode]["compilations"]} | {t[mode]["compile_s"]} | '
                     f'{x["round"]} | {x["target_tokens_per_s"]:,.0f} | {x["pairs_per_s"]:,.0f} '
                     f'| {x["steps_per_s"]} | {x["load_before"]}-{x["load_after"]} |')
    new, old = (t[m]['target_tokens_per_s_median'] for m in ('tokens', 'examples'))
    lines.append(f'\nMedian target tokens/s: tokens {new:,.0f} / examples {old:,.0f} = '
                 f'{new / old:.2f}x (tokens_per_batch={t["tokens_per_batch"]}, '
                 f'num_buckets={t["num_buckets"]}).')
  return '\n'.join(lines) + '\n'


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(prog='python -m benchmarks.padding')
  parser.add_argument('--tasks', default=','.join(TASKS))
  parser.add_argument('--num_buckets', default='8,12,16,20,24')
  parser.add_argument('--throughput', action='store_true')
  parser.add_argument('--throughput_buckets', type=int, default=12)
  parser.add_argument('--rounds', type=int, default=3)
  parser.add_argument('--round_steps', type=int, default=50)
  parser.add_argument('--out', default=RESULTS_DIR)
  parser.add_argument('--machine', default='', help='results file name (default: the '
                      'accelerator JAX uses, else the CPU kind)')
  args = parser.parse_args(argv)
  command = 'python -m benchmarks.padding' + (' --throughput' if args.throughput else '')
  result = {'command': command, 'padding': {}}
  if args.throughput:  # first: the allocator tuning must precede JAX's start
    result['throughput'] = throughput(args.throughput_buckets, args.rounds, args.round_steps)
  buckets = [int(k) for k in args.num_buckets.split(',')]
  for name in args.tasks.split(','):
    result['padding'][name] = padding_rows(name, buckets)
  result = {'machine': args.machine or machine.default_machine_name(), **result}
  measure.write_result(os.path.join(args.out, f'padding_{result["machine"]}'), result,
                       markdown(result))
  print(markdown(result))
  return result


if __name__ == '__main__':
  main()
