"""From what the systems wrote to the measures: scores, time to quality, the result records.

Every system is scored the same way: its output file, one line per exported source, made text
(a peer's pieces detokenized) and scored by the task's metric (tasks.py: attnlab's G2P WER, or
sacrebleu BLEU) against the exported references.

Time to quality: each checkpoint carries the wall and CPU seconds at which it appeared
(supervise.py) and the dev score of its greedy decode of the dev split. Only checkpoints within
the CPU budget count. The shared threshold is the loosest best: the worst of the systems' best
dev scores, rounded to a tenth of a point towards worse, so every system reaches it; a system's
time to quality is the stamp of its first checkpoint at or beyond it. Taken apart (`Apart`),
it is the steps that system needed times its steady CPU time a step, plus what is left: start-up,
compilation and anything else the first steps cost.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics

RECORD_KEYS = ('task', 'system', 'measure', 'value', 'unit', 'machine')
SEARCHES = {'greedy': 1, 'beam5': 5}  # name in the measures -> beam size


def measures(task) -> dict[str, str]:
  """Measure name -> unit, for a tasks.PeerTask."""
  metric, unit = task.metric, '%' if task.metric == 'wer' else 'BLEU'
  return {
    'train_target_tokens_per_s': 'tokens/s',  # steady: median logging window after the first
    'wall_s_to_threshold': 's',
    'cpu_s_to_threshold': 's',
    f'best_dev_{metric}_in_budget': unit,
    'steps_in_budget': 'steps',
    # the test split, start-up aside
    **{f'decode_inputs_per_s_{s}': f'{task.input_name}/s' for s in SEARCHES},
    **{f'decode_command_s_{s}': 's' for s in SEARCHES},  # the whole command on the test split
    **{f'test_{metric}_{s}': unit for s in SEARCHES},  # of the checkpoint with the best dev score
  }


@dataclasses.dataclass(frozen=True)
class Point:
  step: int
  wall_s: float
  cpu_s: float
  score: float  # the dev metric: WER percent or BLEU


def _better(task, a: float, b: float) -> bool:
  return a < b if task.lower_is_better else a > b


def best(task, points: list[Point]) -> Point | None:
  """The best dev score (the earliest among equals)."""
  top = None
  for p in points:
    if top is None or _better(task, p.score, top.score):
      top = p
  return top


def shared_threshold(task, curves: dict[str, list[Point]]) -> float | None:
  """The worst of the systems' best dev scores, rounded to 0.1 towards worse (None if one has
  none)."""
  bests = [best(task, points) for points in curves.values()]
  if not bests or any(b is None for b in bests):
    return None
  if task.lower_is_better:
    return math.ceil(round(max(b.score for b in bests) * 10, 6)) / 10
  return math.floor(round(min(b.score for b in bests) * 10, 6)) / 10


def first_reaching(task, points: list[Point], threshold: float) -> Point | None:
  return next((p for p in points if not _better(task, threshold, p.score)), None)


def cpu_s_per_step(points: list[Point]) -> float | None:
  """Steady CPU seconds a step: the median over the intervals between consecutive checkpoints
  (each holds its share of validating and saving; the time before the first is left out)."""
  rates = [(b.cpu_s - a.cpu_s) / (b.step - a.step)
           for a, b in itertools.pairwise(points) if b.step > a.step]
  return statistics.median(rates) if rates else None


@dataclasses.dataclass(frozen=True)
class Apart:
  """A system's CPU time to the threshold as steps x steady cost + the rest."""

  steps: int  # of its first checkpoint at the threshold
  cpu_s_per_1000_steps: float
  other_cpu_s: float  # start-up, compilation, whatever else the first steps cost
  cpu_s: float  # to the threshold


def taken_apart(task, points: list[Point], threshold: float) -> Apart | None:
  """None when the system did not reach the threshold or has fewer than two checkpoints."""
  reached, per_step = first_reaching(task, points, threshold), cpu_s_per_step(points)
  if reached is None or per_step is None:
    return None
  return Apart(reached.step, 1000 * per_step, reached.cpu_s - reached.step * per_step,
               reached.cpu_s)


def inputs_per_s(inputs: int, command_s: float, start_s: float) -> float | None:
  """Decoding rate with the command's start-up (its time on one input) taken out."""
  if command_s <= start_s:
    return None
  return inputs / (command_s - start_s)


def record(task, system: str, measure: str, value: float, machine: str) -> dict:
  units = measures(task)
  if measure not in units:
    raise ValueError(f'unknown measure {measure!r}; choose from {", ".join(units)}')
  return {
    'task': task.name,
    'system': system,
    'measure': measure,
    'value': value,
    'unit': units[measure],
    'machine': machine,
  }


def system_records(
  task,
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
    points: its dev curve within the budget.
    speed: steady training target tokens/s.
    decodes: search name -> {'inputs_per_s', 'command_s', 'test_score'} of its test decodes.
  """
  values = {'train_target_tokens_per_s': speed}
  reached = first_reaching(task, points, threshold) if threshold is not None else None
  if reached:
    values.update(wall_s_to_threshold=reached.wall_s, cpu_s_to_threshold=reached.cpu_s)
  top = best(task, points)
  if top:
    values.update({f'best_dev_{task.metric}_in_budget': top.score,
                   'steps_in_budget': points[-1].step})
  for search, d in decodes.items():
    values[f'decode_inputs_per_s_{search}'] = d.get('inputs_per_s')
    values[f'decode_command_s_{search}'] = d.get('command_s')
    values[f'test_{task.metric}_{search}'] = d.get('test_score')
  return [record(task, system, m, round(v, 3), machine) for m, v in values.items()
          if v is not None]
