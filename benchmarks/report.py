"""Turns benchmark results into a one-line progress print and the Markdown results page."""

from __future__ import annotations

from benchmarks import measure


def _f(value, fmt: str = '{:,.0f}') -> str:
  if value is None:
    return '-'
  return fmt.format(value)


def _mem(row: dict, framework: str) -> str:
  m = row.get(f'memory_{framework}')
  if not m or 'error' in m:
    return '-'
  return f'{m["peak_mib"] - m["baseline_mib"]:,.0f}'


def row_line(row: dict) -> str:
  return (
    f'{row["workload"]:<22} train {_f(row.get("train_jax_tok_s"))} tok/s '
    f'(x{_f(row.get("train_ratio"), "{:.2f}")})  greedy {_f(row.get("greedy_jax_seq_s"))}'
    f' seq/s (x{_f(row.get("greedy_ratio"), "{:.2f}")})  beam {_f(row.get("beam_jax_seq_s"))}'
    f' seq/s (x{_f(row.get("beam_ratio"), "{:.2f}")})  load {row.get("train_load")}'
  )


HEADER = (
  '| workload (attnlab padded SxT) | train tok/s attnlab | PyTorch | x | MFU attnlab / PyTorch '
  '| greedy seq/s attnlab | PyTorch | x | beam(5) seq/s attnlab | PyTorch | x '
  '| compile s train / greedy / beam | peak MiB attnlab / PyTorch | load |\n'
  '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n'
)


def _table_row(r: dict) -> str:
  ratio = lambda k: f'**{r[k]:.2f}**' if r.get(k) is not None else '-'
  mfu = f'{100 * r["train_jax_mfu"]:.1f}% / ' + (
    f'{100 * r["train_torch_mfu"]:.1f}%' if 'train_torch_mfu' in r else '-'
  )
  compile_s = ' / '.join(f'{r[f"{k}_compile_s"]:.1f}' for k in ('train', 'greedy', 'beam'))
  return (
    f'| {r["workload"]} ({r["padded_shape"]}) | {_f(r["train_jax_tok_s"])} '
    f'| {_f(r.get("train_torch_tok_s"))} '
    f'| {ratio("train_ratio")} | {mfu} | {_f(r["greedy_jax_seq_s"])} '
    f'| {_f(r.get("greedy_torch_seq_s"))} | {ratio("greedy_ratio")} '
    f'| {_f(r["beam_jax_seq_s"])} | {_f(r.get("beam_torch_seq_s"))} | {ratio("beam_ratio")} '
    f'| {compile_s} | {_mem(r, "jax")} / {_mem(r, "torch")} | {r["train_load"]} |\n'
  )


def _step_matmul(result: dict) -> str:
  """The rate at the RNN step's matmul shape: the ceiling of the RNN rows' MFU."""
  rates = result.get('step_matmul_gflops')
  if not rates:
    return ''  # results written before it was measured
  m, k, n = measure.STEP_MATMUL
  peak = max(result['matmul_gflops'].values())
  return (
    f' At the RNN step\'s matmul shape ({m}x{k} @ {k}x{n}, {measure.STEP_LOOP} dependent steps '
    f'in a loop, as in the decoder): XLA {rates["jax"]} GFLOP/s ({100 * rates["jax"] / peak:.0f}% '
    f'of the peak), PyTorch {rates["torch"]} GFLOP/s: the ceiling of the RNN rows\' MFU.'
  )


def _bf16_peak(result: dict) -> str:
  rates = result.get('matmul_gflops_bf16')
  if not rates:
    return ''  # no bf16 row in the run (or written before it was measured)
  return (
    f' Bfloat16 operands summed in float32 (1024^3): XLA {rates["jax"]} GFLOP/s, PyTorch '
    f'{rates["torch"]} GFLOP/s; the MFU of the bf16 and bf16-matmuls rows uses the larger.'
  )


def markdown(result: dict) -> str:
  s = result['settings']
  d = result.get('default_config')
  lines = [
    f'# attnlab benchmark: {result["machine"]}\n\n',
    f'Command: `{result["command"]}` ({result["wall_s"]:.0f} s; jax {result["versions"]["jax"]}, '
    f'torch {result["versions"]["torch"]}; attnlab on {result.get("backend", "cpu")}, PyTorch on '
    f'cpu; {result["cpu_count"]} CPU cores, load average '
    f'{result["load_at_start"]} at start, {result["load_at_end"]} at end).\n\n',
    f'Float32 matmul peak (1024^3, best of {measure.PEAK_REPS} calls, or of at least '
    f'{measure.PEAK_MIN_REPS} within {measure.PEAK_BUDGET_S:.0f} s): '
    f'XLA {result["matmul_gflops"]["jax"]} GFLOP/s, '
    f'PyTorch {result["matmul_gflops"]["torch"]} GFLOP/s; MFU uses the larger.'
    + _bf16_peak(result)
    + _step_matmul(result)
    + '\n\n',
    'x = attnlab / PyTorch speed, both measured in the same run, repetitions alternated '
    f'(training: median of {s["train_reps"]} repetitions of {s["train_steps"]} steps; '
    f'decoding: median of {s["decode_reps"]} repetitions of {s["decode_batches"]} batch); '
    'same parameters, same rows (attnlab pads to buckets of 8 (-bucket4: 4; -tokens: the rows '
    'and shapes of token batching with 8 buckets fit to the length histogram, as the real '
    'tasks train), PyTorch trims each batch to its longest row); tokens/s counts real target '
    'tokens. -bf16: model.dtype=bfloat16, attnlab only; -bf16-matmuls: model.dtype='
    'bfloat16_matmuls against the reference under torch.autocast(bfloat16), where the two '
    'round at different points, so their tokens agree less. Decoding runs to 16 '
    'steps unless every row ended (both sides emit the same tokens: agreement below). '
    'Compile = first call minus a steady call. Peak MiB = resident-set high-water mark of a '
    'fresh process running 3 training steps '
    'and one beam batch, above its RSS after imports (attnlab: includes XLA compilation). '
    'Load = 1-minute load average during the training repetitions. Host allocator tuned '
    f'(attnlab.runtime.parallel.tune_host_allocator): {result["allocator_tuned"]}.\n\n',
    HEADER,
  ]
  lines += [_table_row(r) for r in result['rows']]
  lines.append(
    '\nAgreement with the reference (same parameters): max |logit diff| '
    + ', '.join(
      f'{r["workload"]} {r["max_logit_diff"]:.1e}' for r in result['rows'] if 'max_logit_diff' in r
    )
    + '; greedy/beam tokens equal: '
    + ', '.join(
      f'{r["workload"]} {r.get("greedy_agreement", 0):.3f}/{r.get("beam_agreement", 0):.3f}'
      for r in result['rows']
      if 'greedy_agreement' in r
    )
    + '.\n'
  )
  for r in result['rows']:
    if 'greedy_b1_jax_ms' in r:
      lines.append(
        f'\nOne sentence at a time ({r["workload"]}, greedy, up to 16 steps): attnlab '
        f'{r["greedy_b1_jax_ms"]:.1f} ms, PyTorch {_f(r.get("greedy_b1_torch_ms"), "{:.1f}")} ms '
        f'(x{_f(r.get("greedy_b1_ratio"), "{:.2f}")}).\n'
      )
  if d:  # not in an --only run
    lines.append(
      f'\nDefault config ({d["config"]}), real input pipeline, {d["steps"]} steps: batch shapes '
      f'{", ".join(d["batch_shapes"])}; the train step was traced {d["train_traces"]} time(s); '
      f'first call per shape (trace + compile + 1 step) {d["train_first_call_s"]} s; greedy '
      f'search first call {d["greedy_first_call_s"]} s.\n'
    )
  return ''.join(lines)
