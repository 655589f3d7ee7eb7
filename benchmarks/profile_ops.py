"""Where a benchmark workload's time goes: per-op self time from a `jax.profiler` trace, joined
with the optimised HLO of the same program: a target out of reach is explained by a profile,
not by totals.

    python -m benchmarks.profile_ops [--workload=luong-general-feed] [--what=train|greedy|beam]
        [--calls=8] [--top=20] [--out=FILE.md]
    python -m benchmarks.profile_ops --workdir=results/bible --what=greedy|beam

The program is compiled and warmed up, then `--calls` calls (training steps on the workload's
batches, or searches of one batch) run under the profiler. With --workdir the search is a
trained run's (its model, its eval search settings, beam 5) on one batch of its test sources:
the first `data.global_batch_size` of the length bucket that holds the most of them.

XLA:CPU records one event per executed thunk, named after its HLO instruction (`fusion.12`,
`dot.3`, `while.1`, ...); an event's self time is its duration less that of the events nested
in it on the same thread, so a loop's body counts once, in its ops. Each instruction gets its
kind from the HLO: `matmul` (a dot, a fusion or custom call around one: Eigen or YNNPACK),
`loop` (while/call/conditional overhead), `copy`, `gather/scatter/slice`, `elementwise` (other
fusions), `other`. Wall time and the sum of self times differ: thunks of the two cores
overlap, and the host dispatch between calls is not an op.
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import re
import tempfile

import jax

from attnlab.data import load_task
from attnlab.data.pipeline import pad_rows, padded_length
from attnlab.decoding import runs
from attnlab.decoding import search as search_lib
from attnlab.runtime import machine
from attnlab.runtime.parallel import tune_host_allocator
from benchmarks import jax_side, measure, workloads

KINDS = ('matmul', 'elementwise', 'copy', 'gather/scatter/slice', 'loop', 'other')
_INSTRUCTION = re.compile(r'^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*[^=]*?\s([\w\-]+)\((.*)$')
_COMPUTATION = re.compile(r'^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$')
_CALLS = re.compile(r'(?:calls|to_apply|body|condition)=%?([\w.\-]+)')


def hlo_kinds(hlo_text: str) -> dict[str, str]:
  """HLO instruction name -> one of KINDS, from the optimised module's text."""
  opcodes, calls, computations, current = {}, {}, collections.defaultdict(list), None
  for line in hlo_text.splitlines():
    match = _COMPUTATION.match(line)
    if match and ' = ' not in line:  # a computation's header, not an instruction
      current = match.group(1)
      continue
    match = _INSTRUCTION.match(line)
    if match:
      name, opcode, rest = match.groups()
      opcodes[name] = opcode
      calls[name] = _CALLS.findall(rest)
      if current:
        computations[current].append(opcode)
  has_dot = lambda comp: any(op in ('dot', 'convolution') for op in computations.get(comp, ()))
  kinds = {}
  for name, opcode in opcodes.items():
    if opcode in ('dot', 'convolution') or (
      opcode in ('fusion', 'custom-call') and any(has_dot(c) for c in calls[name])
    ):
      kinds[name] = 'matmul'
    elif opcode in ('while', 'call', 'conditional'):
      kinds[name] = 'loop'
    elif opcode == 'copy':
      kinds[name] = 'copy'
    elif opcode in ('gather', 'scatter', 'dynamic-slice', 'dynamic-update-slice', 'slice'):
      kinds[name] = 'gather/scatter/slice'
    elif opcode == 'fusion':
      kinds[name] = 'elementwise'
    else:
      kinds[name] = 'other'
  return kinds


def op_self_times(events: list[dict]) -> dict[str, float]:
  """HLO op -> summed self time (microseconds) of its thunk events.

  Thunk events carry `args.hlo_op`; an event nested in another of the same thread (a loop's
  body inside its `while`) is taken off its parent's time."""
  by_thread = collections.defaultdict(list)
  for e in events:
    if e.get('ph') == 'X' and (e.get('args') or {}).get('hlo_op'):
      by_thread[(e.get('pid'), e.get('tid'))].append(e)
  totals = collections.Counter()
  for thread_events in by_thread.values():
    thread_events.sort(key=lambda e: (float(e['ts']), -float(e['dur'])))
    open_ops: list[tuple[float, str]] = []  # (end, op) of the events enclosing this one
    for e in thread_events:
      start, dur, op = float(e['ts']), float(e['dur']), e['args']['hlo_op']
      while open_ops and start >= open_ops[-1][0]:
        open_ops.pop()
      if open_ops:
        totals[open_ops[-1][1]] -= dur
      totals[op] += dur
      open_ops.append((start + dur, op))
  return dict(totals)


def read_trace(log_dir: str) -> list[dict]:
  (path,) = glob.glob(os.path.join(log_dir, '**', 'perfetto_trace.json.gz'), recursive=True)
  with gzip.open(path) as f:
    trace = json.load(f)
  return trace['traceEvents'] if isinstance(trace, dict) else trace


def _program(jr: jax_side.JaxRunner, what: str, batches: list[dict]):
  """(compiled program, a call of it on batch i) for `what`."""
  if what == 'train':
    shard = [jr.parallel.shard_batch(b) for b in batches]
    compiled = jr._train_step.lower(jr._p_state, shard[0], jr._key).compile()

    def call(i):
      jr._p_state, sums = compiled(jr._p_state, shard[i % len(shard)], jr._key)
      return sums

    return compiled, call
  decode = jr._decoders[what]
  max_length = workloads.DECODE_LENGTH
  compiled = decode.lower(jr.params, batches[0]['source'], max_length=max_length).compile()
  return compiled, lambda i: compiled(jr.params, batches[i % len(batches)]['source'])


def _workload_program(workload: workloads.Workload, what: str, quick: bool):
  """(compiled program, a call of it, the padded 'SxT' of its batches) of `workload`: one
  compiled program, the first batch's shape."""
  jr = jax_side.JaxRunner(workload, quick=quick, mode='shard_map')
  padded, _ = workloads.make_batches(
    4, jr.cfg.data.global_batch_size, workload.bucket_size, token_buckets=workload.token_buckets
  )
  shape = lambda b: (b['source'].shape, b['target'].shape)
  padded = [b for b in padded if shape(b) == shape(padded[0])]
  compiled, call = _program(jr, what, padded)
  return compiled, call, f'{padded[0]["source"].shape[1]}x{padded[0]["target"].shape[1]}'


def _run_search(workdir: str, what: str):
  """(compiled search, a call of it, 'B sources x S') of the run in `workdir` on one batch of
  its test sources (module docstring)."""
  run = runs.load_run(workdir)
  cfg, decoder = run.cfg, run.decoder(search=what, beam_size=workloads.BEAM_SIZE)
  buckets = collections.defaultdict(list)
  for example in load_task(cfg).split('test'):
    ids = run.source_vocab.encode(example['source'])
    buckets[padded_length(len(ids), cfg.data.bucket_size, decoder.model_limit)].append(ids)
  width_S, members = max(buckets.items(), key=lambda kv: len(kv[1]))
  rows = members[: decoder.batch_size]
  src_BxS = pad_rows(rows, len(rows), width_S)
  search = jax.jit(
    lambda params, src: search_lib.search_batch(
      run.model, params, src, method=what, beam_size=decoder.beam_size,
      max_length=decoder.max_decode_length, length_penalty=decoder.length_penalty,
    )
  )
  compiled = search.lower(run.params, src_BxS).compile()
  return compiled, lambda i: compiled(run.params, src_BxS), f'{len(rows)} sources x {width_S}'


def profile(
  workload: workloads.Workload | None, what: str, calls: int, quick: bool = False,
  workdir: str = '',
) -> dict:
  """Per-kind and per-op self times of `calls` calls (one padded shape: the first batch's), of
  `workload`, or with `workdir` of that run's search on its test sources."""
  if workdir:
    (compiled, call, shape), name = _run_search(workdir, what), workdir
  else:
    (compiled, call, shape), name = _workload_program(workload, what, quick), workload.name
  kinds = hlo_kinds(compiled.as_text() or '')
  for i in range(3):
    jax.block_until_ready(call(i))  # warm-up
  with tempfile.TemporaryDirectory() as log_dir:
    with jax.profiler.trace(log_dir, create_perfetto_trace=True):
      wall = measure.timed(lambda: jax.block_until_ready([call(i) for i in range(calls)]))[0]
    events = read_trace(log_dir)
  ops = op_self_times(events)
  by_kind = collections.Counter()
  for op, us in ops.items():
    by_kind[kinds.get(op, 'other')] += us
  return {
    'workload': name,
    'what': what,
    'calls': calls,
    'padded_shape': shape,
    'wall_ms_per_call': 1000 * wall / calls,
    'by_kind_ms_per_call': {k: by_kind[k] / 1000 / calls for k in KINDS},
    'ops_ms_per_call': {
      op: (us / 1000 / calls, kinds.get(op, 'other'))
      for op, us in sorted(ops.items(), key=lambda kv: -kv[1])
    },
    'load': measure.load_average(),
  }


def markdown(result: dict, top: int) -> str:
  total = sum(result['by_kind_ms_per_call'].values())
  lines = [
    f'## {result["workload"]}: {result["what"]} ({result["padded_shape"]}), '
    f'{result["wall_ms_per_call"]:.2f} ms wall per call, {total:.2f} ms of op self time '
    f'(load {result["load"]})\n\n',
    '| kind | ms per call | share |\n|---|---:|---:|\n',
  ]
  for kind, ms in sorted(result['by_kind_ms_per_call'].items(), key=lambda kv: -kv[1]):
    lines.append(f'| {kind} | {ms:.3f} | {100 * ms / total:.1f}% |\n')
  lines.append('\n| top op | kind | ms per call | share |\n|---|---|---:|---:|\n')
  for op, (ms, kind) in list(result['ops_ms_per_call'].items())[:top]:
    lines.append(f'| `{op}` | {kind} | {ms:.3f} | {100 * ms / total:.1f}% |\n')
  return ''.join(lines)


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  names = [w.name for w in workloads.all_workloads()]
  parser.add_argument('--workload', default='luong-general-feed', choices=names)
  parser.add_argument('--workdir', default='', help="a trained run: profile its search "
                      "(--what=greedy|beam) on its test sources instead of a workload's")
  parser.add_argument('--what', default='train', choices=('train', 'greedy', 'beam'))
  parser.add_argument('--calls', type=int, default=8)
  parser.add_argument('--top', type=int, default=20)
  parser.add_argument('--out', default='', help='also write the Markdown here')
  args = parser.parse_args(argv)
  tune_host_allocator()  # as benchmarks.run and attnlab.main do, before JAX starts its threads
  if args.workdir and args.what == 'train':
    parser.error('--workdir profiles a run\'s search: give --what=greedy or --what=beam')
  workload = next(w for w in workloads.all_workloads() if w.name == args.workload)
  result = profile(None if args.workdir else workload, args.what, args.calls,
                   workdir=args.workdir)
  text = markdown(result, args.top)
  print(text)
  if args.out:
    chosen = f'--workdir={args.workdir}' if args.workdir else f'--workload={args.workload}'
    with open(args.out, 'w') as f:
      f.write(f'Command: `python -m benchmarks.profile_ops {chosen} '
              f'--what={args.what} --calls={args.calls}` on {machine.default_machine_name()}\n\n')
      f.write(text)
  return result


if __name__ == '__main__':
  main()
