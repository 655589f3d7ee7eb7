"""From what the systems wrote to the measures: WER, time to quality, the result records.

Every system is scored the same way: its output file, one phoneme string per exported word,
through attnlab's own `metrics.error_rates` against every pronunciation of the word (the G2P
task's WER: a word is wrong unless the output equals one of them).

Time to quality: each checkpoint carries the wall and CPU seconds at which it appeared
(supervise.py) and the WER of its greedy decode of the dev words. Only checkpoints within the
CPU budget count. The shared threshold is the loosest best: the highest of the systems' best
dev WERs, rounded up to a tenth of a point, so every system reaches it; a system's time to
quality is the stamp of its first checkpoint at or below it.
"""

from __future__ import annotations

import dataclasses
import math

from attnlab import metrics

RECORD_KEYS = ('system', 'measure', 'value', 'unit', 'machine')
SEARCHES = {'greedy': 1, 'beam5': 5}  # name in the measures -> beam size
MEASURES = {
  'train_target_tokens_per_s': 'tokens/s',  # steady: median logging window after the first
  'wall_s_to_threshold': 's',
  'cpu_s_to_threshold': 's',
  'best_dev_wer_in_budget': '%',
  'steps_in_budget': 'steps',
  **{f'decode_words_per_s_{s}': 'words/s' for s in SEARCHES},  # the test words, start-up aside
  **{f'decode_command_s_{s}': 's' for s in SEARCHES},  # the whole command on the test words
  **{f'test_wer_{s}': '%' for s in SEARCHES},  # of the checkpoint with the best dev WER
}


@dataclasses.dataclass(frozen=True)
class Point:
  step: int
  wall_s: float
  cpu_s: float
  wer: float  # dev WER, percent


def wer_percent(outputs: list[str], references: list[list[str]]) -> float:
  """G2P word error rate (percent) of one output line per word."""
  if len(outputs) != len(references):
    raise ValueError(f'{len(outputs)} output lines for {len(references)} words')
  hyps = [line.split() for line in outputs]
  refs = [[ref.split() for ref in refs] for refs in references]
  return 100 * metrics.error_rates(hyps, refs)['wer']


def best(points: list[Point]) -> Point | None:
  """The lowest dev WER (the earliest among equals)."""
  return min(points, key=lambda p: (p.wer, p.step), default=None)


def shared_threshold(curves: dict[str, list[Point]]) -> float | None:
  """The highest of the systems' best dev WERs, rounded up to 0.1 (None if one has none)."""
  bests = [best(points) for points in curves.values()]
  if not bests or any(b is None for b in bests):
    return None
  return math.ceil(round(max(b.wer for b in bests) * 10, 6)) / 10


def first_reaching(points: list[Point], threshold: float) -> Point | None:
  return next((p for p in points if p.wer <= threshold), None)


def words_per_s(words: int, command_s: float, start_s: float) -> float | None:
  """Decoding rate with the command's start-up (its time on one word) taken out."""
  if command_s <= start_s:
    return None
  return words / (command_s - start_s)


def record(system: str, measure: str, value: float, machine: str) -> dict:
  if measure not in MEASURES:
    raise ValueError(f'unknown measure {measure!r}; choose from {", ".join(MEASURES)}')
  return {
    'system': system,
    'measure': measure,
    'value': value,
    'unit': MEASURES[measure],
    'machine': machine,
  }


def system_records(
  system: str,
  machine: str,
  *,
  points: list[Point],
  threshold: float | None,
  speed: float | None,
  decodes: dict[str, dict],
) -> list[dict]:
  """One system's records: what could be measured (a measure without a value is left out).

  Args:
    points: its dev WER curve within the budget.
    speed: steady training target tokens/s.
    decodes: search name -> {'words_per_s', 'command_s', 'test_wer'} of its test decodes.
  """
  values = {'train_target_tokens_per_s': speed}
  reached = first_reaching(points, threshold) if threshold is not None else None
  if reached:
    values.update(wall_s_to_threshold=reached.wall_s, cpu_s_to_threshold=reached.cpu_s)
  top = best(points)
  if top:
    values.update(best_dev_wer_in_budget=top.wer, steps_in_budget=points[-1].step)
  for search, d in decodes.items():
    values[f'decode_words_per_s_{search}'] = d.get('words_per_s')
    values[f'decode_command_s_{search}'] = d.get('command_s')
    values[f'test_wer_{search}'] = d.get('test_wer')
  return [record(system, m, round(v, 3), machine) for m, v in values.items() if v is not None]
