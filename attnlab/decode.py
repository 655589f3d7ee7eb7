"""`python -m attnlab.decode --workdir=RUN`: a trained model answers your own inputs.

    echo abcdefg | python -m attnlab.decode --workdir=runs/demo          # prints gfedcba
    python -m attnlab.decode --workdir=runs/g2p --input=words.txt --output=phonemes.txt
    python -m attnlab.decode --workdir=runs/g2p --nbest=3 --format=jsonl < words.txt

Reads one input per line (`--input=FILE`, else stdin) in the task's raw form and writes one
output per input line, in input order (`--output=FILE`, else stdout), detokenized. FILE is
written in full when decoding ends (a temporary file beside it is renamed over it), so an
interrupted or failed decode leaves it as it was; it may not be the --input file:

  --format=text   the output text; with --nbest=K, K lines per input in the Moses n-best
                  form `LINE ||| OUTPUT ||| SCORE` (LINE: 0-based input line). A line break
                  (\\n, \\r) inside an output, which a subword model can spell byte by byte,
                  is written as a space, so that line N of the file stays input N's

  --format=jsonl  one object per input: index, input, output, outputs, scores, log_probs,
                  source_tokens, output_tokens, unknown, error

--checkpoint=best|latest|STEP picks the parameters; --search, --beam_size, --length_penalty
and --max_decode_length override the run's eval.* settings. --attention_dir=DIR writes, per
decoded line N, DIR/lineNNNNN.png (the best output's attention; multi-head models: one panel
per head and their mean, per layer) and DIR/lineNNNNN.npz ('weights' [T, S] as search used
them, 'source_tokens', 'output_tokens' and, multi-head, 'heads_<layer>' [heads, T, S]).

Input handling (attnlab/decoding/inference.py): surrounding whitespace is stripped; an empty line
gives an empty output line; symbols outside the vocabulary are read as <unk> and counted in one
warning; a line longer than `data.max_source_length` tokens (EOS included; change with
--max_input_length, 0 = up to the model's own limit) is not decoded: its output line is empty
(jsonl: `error` says why) and stderr names it. Files are decoded in batches bucketed by
length (compiled once per padded shape); from a terminal (or with --interactive) each line is
answered as soon as it is entered. A workdir without config, vocabularies or checkpoint is
refused in one line (`error: ...`, exit status 2). --workdir may be a bucket's folder
(gs://bucket/run); --input, --output and --attention_dir are local paths.
"""

from __future__ import annotations

import argparse
import errno
import json
import math
import os
import re
import shutil
import sys
from collections.abc import Iterator

import numpy as np

from attnlab import cli, storage
from attnlab.config.run import SEARCH_METHODS
from attnlab.decoding import heatmaps, inference, runs
from attnlab.errors import UserError
from attnlab.runtime import compilation_cache, parallel

CHUNK_LINES = 8192  # lines decoded (and written) together when reading a file or a pipe


def _parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog='python -m attnlab.decode',
                              description='Decode your own inputs with a trained run.')
  p.add_argument('--workdir', required=True, help='the run directory')
  p.add_argument('--input', help='file with one input per line (default: stdin)')
  p.add_argument('--output', help='file for the outputs (default: stdout)')
  p.add_argument('--checkpoint', default='best', help='best (default), latest or a step number')
  p.add_argument('--search', choices=SEARCH_METHODS, help="default: the run's eval.search")
  p.add_argument('--beam_size', type=int, help="default: the run's eval.beam_size")
  p.add_argument('--length_penalty', type=float, help='GNMT alpha (beam search)')
  p.add_argument('--max_decode_length', type=int, help='most output tokens, EOS included')
  p.add_argument('--nbest', type=int, default=1, help='hypotheses per input (beam search)')
  p.add_argument('--format', choices=('text', 'jsonl'), default='text')
  p.add_argument('--attention_dir', help='write a heatmap PNG and .npz per decoded line')
  p.add_argument('--batch_size', type=int, help='rows per batch (default data.global_batch_size)')
  p.add_argument('--max_input_length', type=int,
                 help='most input tokens incl. EOS (default data.max_source_length; 0: no limit)')
  p.add_argument('--interactive', action=argparse.BooleanOptionalAction, default=None,
                 help='answer each line as it is read (default: when stdin is a terminal)')
  return p


def _lines(stream) -> Iterator[tuple[str | None, str | None]]:
  """(text, error) per line of a binary stream; bytes that are not UTF-8 are an error."""
  while True:
    raw = stream.readline()
    if not raw:
      return
    raw = raw.rstrip(b'\n').rstrip(b'\r')
    try:
      yield raw.decode('utf-8'), None
    except UnicodeDecodeError as e:
      yield None, f'bytes {raw[e.start:e.end]!r} at byte {e.start + 1} are not valid UTF-8'


LINE_BREAK = re.compile(r'\r\n|\r|\n')


def one_line(text: str) -> str:
  """`text` with each line break a file reader sees (\\n, \\r, \\r\\n) written as a space."""
  return LINE_BREAK.sub(' ', text)


class Writer:
  """Writes results in input order and keeps the counts the closing warnings report."""

  def __init__(self, out, fmt: str, nbest: int, attention_dir: str | None, multi_head: bool):
    self.out, self.fmt, self.nbest = out, fmt, nbest
    self.attention_dir, self.multi_head = attention_dir, multi_head
    self.unknown: dict[str, int] = {}
    self.unknown_lines, self.failed, self.lines = 0, 0, 0

  def write(self, result: inference.Decoded) -> None:
    self.lines += 1
    line_no = result.index + 1
    if result.error:
      self.failed += 1
      print(f'line {line_no}: not decoded: {result.error}', file=sys.stderr)
    if result.unknown:
      self.unknown_lines += 1
      for symbol in result.unknown:
        self.unknown[symbol] = self.unknown.get(symbol, 0) + 1
    if self.fmt == 'jsonl':
      self.out.write(json.dumps(inference.as_json(result), ensure_ascii=False) + '\n')
    elif self.nbest == 1:
      self.out.write(one_line(result.output) + '\n')
    else:
      for h in result.hypotheses:
        self.out.write(f'{result.index} ||| {one_line(h.text)} ||| {h.score:.6g}\n')
    if self.attention_dir and result.hypotheses:
      save_attention(self.attention_dir, line_no, result)

  def warn(self) -> None:
    if self.unknown:
      shown = ', '.join(repr(s) for s in sorted(self.unknown, key=self.unknown.get,
                                                reverse=True)[:10])
      total = sum(self.unknown.values())
      print(f'warning: {total} input symbols in {self.unknown_lines} lines are not in the '
            f'source vocabulary and were read as <unk>: {shown}', file=sys.stderr)
    if self.failed:
      print(f'warning: {self.failed} of {self.lines} lines were not decoded (see above); their '
            'output lines are empty', file=sys.stderr)


def save_attention(folder: str, line_no: int, result: inference.Decoded) -> None:
  """lineNNNNN.png and .npz of the best hypothesis (module docstring)."""
  best, src = result.hypotheses[0], result.source_tokens
  stem = os.path.join(folder, f'line{line_no:05d}')
  title = f'line {line_no}: {result.input.strip()[:40]}'
  arrays = {'weights': best.attention, 'source_tokens': np.array(src, dtype=str),
            'output_tokens': np.array(best.tokens, dtype=str)}
  if best.heads:
    panels = []
    for name, weights_NxTxS in best.heads.items():
      arrays[f"heads_{name.replace(' ', '_')}"] = weights_NxTxS
      panels += [(f'{name} head {n}', w, src, best.tokens) for n, w in enumerate(weights_NxTxS)]
      panels.append((f'{name} mean', weights_NxTxS.mean(axis=0), src, best.tokens))
    ncols = next(iter(best.heads.values())).shape[0] + 1
    heatmaps.save_heatmap_grid(f'{stem}.png', panels, ncols=ncols)
  else:
    heatmaps.save_heatmap(f'{stem}.png', best.attention, src, best.tokens, title=title)
  np.savez_compressed(f'{stem}.npz', **arrays)


def _decode_stream(decoder, lines, writer: Writer, *, nbest: int, interactive: bool) -> None:
  heads = bool(writer.attention_dir) and decoder.multi_head
  chunk: list[tuple[str | None, str | None]] = []

  def flush():
    texts = [text if error is None else '' for text, error in chunk]
    results = decoder.decode(texts, nbest=nbest, heads=heads)
    offset = writer.lines  # lines written before this chunk
    for result, (_, error) in zip(results, chunk, strict=True):
      result.index += offset
      if error is not None:
        result.input, result.error = '', error
      writer.write(result)
    writer.out.flush()
    if interactive:
      writer.warn()  # per line: the user sees it next to the answer
      writer.unknown, writer.unknown_lines = {}, 0
    chunk.clear()

  for item in lines:
    chunk.append(item)
    if interactive or len(chunk) >= CHUNK_LINES:
      flush()
  if chunk:
    flush()


def main(argv=None) -> int:
  args = _parser().parse_args(argv)
  parallel.cpu_device_per_core()  # before JAX starts: a batch's rows on every core
  compilation_cache.enable()
  try:
    with cli.library_warnings_only():
      return _run(args)
  except UserError as e:
    print(f'error: {e}', file=sys.stderr)
    return 2


def _check_args(args) -> None:
  """Mistakes in the flags alone, reported before the run is read."""
  if args.nbest < 1:
    raise UserError(f'--nbest={args.nbest} must be at least 1 (hypotheses per input)')
  if args.length_penalty is not None and not math.isfinite(args.length_penalty):
    raise UserError(f'--length_penalty={args.length_penalty} must be a finite number (GNMT '
                    'alpha, e.g. 0.6)')
  for flag, value in (('input', args.input), ('output', args.output),
                      ('attention_dir', args.attention_dir)):
    if value and storage.is_remote(value):
      raise UserError(f'--{flag}={value}: decode reads and writes local files only (its '
                      '--workdir may be a bucket\'s); name a local path and copy it from or to '
                      'the bucket')
  if args.input and not os.path.isfile(args.input):
    raise UserError(f'--input={args.input}: no such file')
  if args.output:
    if os.path.isdir(args.output):
      raise UserError(f'--output={args.output} is a folder; name a file in it')
    folder = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(folder):
      raise UserError(f'--output={args.output}: folder {folder} does not exist')
    if args.input and os.path.exists(args.output) and os.path.samefile(args.input, args.output):
      raise UserError(f'--output={args.output} is the --input file: decoding would overwrite '
                      'the inputs; choose another --output')
  if args.attention_dir:
    existing = os.path.abspath(args.attention_dir)
    while not os.path.exists(existing):
      existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
      raise UserError(f'--attention_dir={args.attention_dir}: {existing} is a file, not a folder')


class _Output:
  """--output written to a temporary file beside it and renamed over it once every line is
  decoded: a failure midway leaves the file as it was. A device or pipe (/dev/null, a FIFO) is
  written directly; a symbolic link keeps pointing at the file it names."""

  def __init__(self, path: str):
    target = os.path.realpath(path)
    self.target, self.tmp = target, None
    try:
      if os.path.exists(target) and not os.path.isfile(target):
        self.file = open(target, 'w', encoding='utf-8')
        return
      if os.path.exists(target) and not os.access(target, os.W_OK):
        # Not replaced behind its owner's back: the shell's `>` refuses it too.
        raise PermissionError(errno.EACCES, 'Permission denied')
      self.tmp = os.path.join(os.path.dirname(target),
                              f'.{os.path.basename(target)}.{os.getpid()}.partial')
      fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)  # the umask applies
    except OSError as e:
      raise UserError(f'--output={path} cannot be written: {e.strerror}') from None
    if os.path.isfile(target):
      shutil.copymode(target, self.tmp)
    self.file = open(fd, 'w', encoding='utf-8')

  def close(self, complete: bool) -> None:
    self.file.close()
    if self.tmp is None:
      return
    if complete:
      os.replace(self.tmp, self.target)
    else:
      os.remove(self.tmp)


def _run(args) -> int:
  _check_args(args)
  output = _Output(args.output) if args.output else None
  complete = False
  try:
    _decode(args, output.file if output else sys.stdout)
    complete = True
  finally:
    if output:
      output.close(complete)
  return 0


def _decode(args, out) -> None:
  run = runs.load_run(args.workdir, args.checkpoint)
  if run.note:
    print(f'note: {run.note}', file=sys.stderr)
  decoder = run.decoder(search=args.search, beam_size=args.beam_size,
                        length_penalty=args.length_penalty,
                        max_decode_length=args.max_decode_length, batch_size=args.batch_size,
                        max_input_length=args.max_input_length)
  decoder.decode([], nbest=args.nbest)  # checks --nbest against the search before reading
  attention_dir = args.attention_dir
  if attention_dir:
    m = run.cfg.model
    if m.kind == 'rnn' and not m.attention.attends:
      print('warning: this model has no attention '
            f'(model.attention.timing={m.attention.timing}); --attention_dir writes nothing',
            file=sys.stderr)
      attention_dir = None
    else:
      try:
        os.makedirs(attention_dir, exist_ok=True)
      except OSError as e:
        raise UserError(f'--attention_dir={attention_dir} cannot be made: {e.strerror}') from None
  stdin = sys.stdin.buffer if hasattr(sys.stdin, 'buffer') else sys.stdin
  source = open(args.input, 'rb') if args.input else stdin
  interactive = args.interactive
  if interactive is None:
    interactive = not args.input and stdin.isatty()
  if interactive and stdin.isatty():
    print(f'{args.workdir} (step {run.step}): one input per line, Ctrl-D to end',
          file=sys.stderr)
  writer = Writer(out, args.format, args.nbest, attention_dir, decoder.multi_head)
  try:
    _decode_stream(decoder, _lines(source), writer, nbest=args.nbest, interactive=interactive)
  finally:
    if args.input:
      source.close()
  writer.warn()


if __name__ == '__main__':
  sys.exit(main())
