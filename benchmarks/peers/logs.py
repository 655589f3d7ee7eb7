"""Training speed as each system reports it: one (step, target tokens/s) per logging window.

Each system counts the target tokens of its window's batches (padding excluded, end-of-sequence
included) over the window's seconds:

  OpenNMT-py  onmt/utils/statistics.py, one line per report_every steps:
              `... Step 200/24000; acc: 61.2; ppl:  4.1; xent: 1.4; lr: 0.00100; sents:    6400;
              bsz:    8/   8/64; 6234/5678 tok/s;     25 sec;` (source/target tokens per second)
  Joey NMT    joeynmt/training.py, one line per logging_freq steps (its validations excluded):
              `... Epoch   1, Step:      200, Batch Loss:    12.345678, Batch Acc: 0.612345,
              Tokens per Sec:     5678, Lr: 0.001000`
  attnlab     metrics.jsonl, one record per train.log_every steps:
              `{"step": 200, "split": "train", ..., "tokens_per_sec": 5678.0}`

The steady rate is the median window after the first (which holds start-up and, for attnlab,
compilation): a window that holds a validation or a checkpoint does not move it.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Iterable

OPENNMT_LINE = re.compile(r'Step\s+(\d+)(?:/\s*\d+)?;.*?([\d.]+)/\s*([\d.]+) tok/s;')
JOEY_LINE = re.compile(r'Step:\s*(\d+),.*Tokens per Sec:\s*([\d.]+)')

Window = tuple[int, float]  # (step at the window's end, target tokens per second)


def opennmt_windows(lines: Iterable[str]) -> list[Window]:
  return [(int(m[1]), float(m[3])) for m in map(OPENNMT_LINE.search, lines) if m]


def joey_windows(lines: Iterable[str]) -> list[Window]:
  return [(int(m[1]), float(m[2])) for m in map(JOEY_LINE.search, lines) if m]


def attnlab_windows(lines: Iterable[str]) -> list[Window]:
  windows = []
  for line in lines:
    if not line.strip():
      continue
    record = json.loads(line)
    if record.get('split') == 'train' and 'tokens_per_sec' in record:
      windows.append((int(record['step']), float(record['tokens_per_sec'])))
  return windows


def steady_rate(windows: list[Window]) -> float | None:
  """The median rate of the windows after the first; None with fewer than two windows."""
  if len(windows) < 2:
    return None
  return statistics.median(rate for _, rate in windows[1:])
