"""How did a run end, was it still improving, did it converge, was it tested with its best
checkpoint?

A run ends in one of three ways (attnlab/train/start.py, `stops_early`): PATIENCE, when
`train.patience` dev evaluations in a row brought no gain (train.min_improvement); FLOOR, when
the plateau schedule's next learning-rate cut would fall below `optim.plateau_min_scale` under
`optim.plateau_at_floor=stop` (after as few as `optim.plateau_patience` evaluations without a
gain); or STEP_CAP, `train.num_steps` trained without either. final_metrics.json records which
(`ended_by`). Runs from before it did record only whether they stopped early: there the
evaluations after the selected step in metrics.jsonl tell the two early stops apart (they had
no min_improvement, so every improvement was a gain): at least `train.patience` of them means
patience (the floor is checked only while patience is not exhausted), fewer the floor. So
archived runs are read as they are.

A run is still improving when its dev selection metric moved at least CONVERGENCE_POINTS over
the last LAST_FRACTION of training, however it ended; it converged when it was not still
improving. Only where the last quarter holds too few evaluations to measure a movement does a
stop by patience or the floor count as converged (EARLY_STOPPED). The movement is taken on the
best-so-far curve in the metric's direction, i.e. on what model selection would pick:

    movement = |best_so_far(last evaluation) - best_so_far(last evaluation <= 0.75 x last step)|

in points: rates stored as fractions (sequence_accuracy, wer, per, ...) count in percentage
points, BLEU and chrF in their own 0-100 points, loss and perplexity in their own units. The
last quarter is the steps [0.75 x last step, last step], both ends included; with fewer than
MIN_EVALUATIONS evaluations in it there is no verdict ('undecided'), rather than a guess.

Inputs, as attnlab.train.loop writes them: final_metrics.json (`step`: the tested step,
`trained_steps`, `selection`: {`metric`, `mode`, `best_step`, `best_value`, `patience`,
`stopped_early`}, None without an eval split) and the `eval` rows of metrics.jsonl
({"step": N, "split": "eval", "<metric>": value, ...}).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from attnlab.config.run import SELECT_SPLIT
from attnlab.metrics import DIRECTIONS, POINTS_PER_UNIT, is_number

CONVERGENCE_POINTS = 0.3  # a converged dev metric moves less than this over the last quarter
LAST_FRACTION = 0.25  # the part of training, at its end, that must be flat
MIN_EVALUATIONS = 2  # evaluations the last quarter needs for a verdict
DEV = 'dev'  # what the reports call the selection split (SELECT_SPLIT)
MARK = '†'  # after a variant whose trials did not all converge


PATIENCE, FLOOR, STEP_CAP = 'patience', 'learning-rate floor', 'step cap'  # how a run ended

EARLY_STOPPED, CONVERGED, NOT_CONVERGED, UNDECIDED = (
  'early stopped',
  'converged',
  'not converged',
  'undecided',
)


@dataclasses.dataclass(frozen=True)
class Convergence:
  """The verdict on one run, with what it rests on."""

  verdict: str  # EARLY_STOPPED | CONVERGED | NOT_CONVERGED | UNDECIDED
  reason: str  # the evidence in words: 'dev wer moved 0.12 points over the last quarter (...)'
  movement: float | None  # points the best-so-far moved over the last quarter
  window: tuple[int, int] | None  # (last eval step <= 0.75 x last step, last eval step)
  evaluations_in_window: int  # evaluations in [0.75 x last step, last step]
  metric: str | None  # the dev metric the run selected on
  selected_step: int | None  # the best dev step (None without model selection)
  last_step: int | None  # the last step trained
  tested_step: int | None  # the step whose checkpoint the test metrics come from
  early_stopped: bool  # patience or the learning-rate floor stopped the run
  ended_by: str | None  # PATIENCE | FLOOR | STEP_CAP; None: stopped early, no dev curve to tell
  evaluations_after_best: int | None  # dev evaluations after the selected step, up to the end

  @property
  def converged(self) -> bool:
    return self.verdict in (EARLY_STOPPED, CONVERGED)

  @property
  def still_improving(self) -> bool | None:
    """The dev metric moved at least CONVERGENCE_POINTS over the last quarter, whatever ended
    the run (None without a movement): its test numbers may measure learning speed."""
    return None if self.movement is None else self.movement >= CONVERGENCE_POINTS

  @property
  def tested_on_best(self) -> bool:
    """Whether the test metrics come from the selected (best dev) checkpoint."""
    return self.selected_step is not None and self.tested_step == self.selected_step


def eval_curve(events: Iterable[dict], metric: str) -> list[tuple[int, float]]:
  """(step, value) of `metric` on the dev split, the last row per step (a resumed run logs some
  steps twice), sorted by step; non-finite values are left out, as model selection skips them."""
  by_step = {}
  for e in events:
    if e.get('split') == SELECT_SPLIT and is_number(e.get(metric)) and is_number(e.get('step')):
      by_step[int(e['step'])] = float(e[metric])
  return sorted(by_step.items())


def best_so_far(curve: Sequence[tuple[int, float]], metric: str) -> list[tuple[int, float]]:
  """The running best of `curve` in `metric`'s direction: what selection would hold at each step."""
  pick = max if DIRECTIONS[metric] == 'max' else min
  out, best = [], None
  for step, value in curve:
    best = value if best is None else pick(best, value)
    out.append((step, best))
  return out


def _steps(value: float) -> str:
  return f'{value:,.0f}' if float(value).is_integer() else f'{value:,.1f}'


def ending(chosen: dict, curve: Sequence[tuple[int, float]]) -> tuple[str | None, int | None]:
  """(how the run ended, dev evaluations after its selected step) from final_metrics.json's
  `selection` and the dev curve up to the last step trained (see the module docstring)."""
  best = chosen.get('best_step')
  after = sum(s > best for s, _ in curve) if best is not None and curve else None
  recorded = {'patience': PATIENCE, 'floor': FLOOR, 'cap': STEP_CAP}.get(chosen.get('ended_by'))
  if recorded:
    return recorded, after
  if not chosen.get('stopped_early'):
    return STEP_CAP, after
  if after is None:
    return None, None
  return (PATIENCE if 0 < (chosen.get('patience') or 0) <= after else FLOOR), after


def _evaluations(n: int) -> str:
  return f'{n} evaluation' + ('' if n == 1 else 's')


def _stop_line(ended_by: str | None, after: int | None, last: int, chosen: dict) -> str:
  patience, min_improvement = chosen.get('patience'), chosen.get('min_improvement') or 0
  if ended_by == PATIENCE:
    if not min_improvement:  # every improvement was a gain: the evaluations after the best
      return (
        f'patience ended the run at step {last:,}: {_evaluations(after)} without a {DEV} gain '
        f'(train.patience={patience})'
      )
    # A gain needs min_improvement points, so the best can come after the last gain.
    line = (f'patience ended the run at step {last:,}: train.patience={patience} {DEV} '
            f'evaluations in a row without a gain of {min_improvement:g} points '
            '(train.min_improvement)')
    if after is not None and after < patience:
      line += f'; the best, {_evaluations(after)} before the end, improved by less'
    return line
  if ended_by == FLOOR:
    return (
      f'the learning-rate floor ended the run at step {last:,}, {_evaluations(after)} after '
      'the best: the next plateau cut would go below optim.plateau_min_scale'
    )
  return f'early stopping ended the run at step {last:,}'


def assess(final: dict | None, events: Iterable[dict]) -> Convergence:
  """The convergence verdict of a run from its final_metrics.json and metrics.jsonl rows."""
  final = final or {}
  chosen = final.get('selection') or {}
  metric = chosen.get('metric')
  early = bool(chosen.get('stopped_early'))
  curve = eval_curve(events, metric) if metric in DIRECTIONS else []
  last = final.get('trained_steps', curve[-1][0] if curve else final.get('step'))
  curve = [(s, v) for s, v in curve if last is None or s <= last]
  ended_by, after = ending(chosen, curve)
  facts = dict(
    metric=metric,
    selected_step=chosen.get('best_step'),
    last_step=last,
    tested_step=final.get('step'),
    early_stopped=early,
    ended_by=ended_by,
    evaluations_after_best=after,
  )
  undecided = lambda why, n=0: Convergence(UNDECIDED, why, None, None, n, **facts)
  if metric not in DIRECTIONS:
    return undecided('no model selection recorded in final_metrics.json: tested at the last step')
  if not curve or last is None:
    return undecided(f'no {DEV} {metric} in metrics.jsonl')
  start = (1.0 - LAST_FRACTION) * last
  running = best_so_far(curve, metric)
  before = [(s, b) for s, b in running if s <= start]
  in_window = sum(s >= start for s, _ in curve)
  stop = _stop_line(ended_by, after, last, chosen)
  if in_window < MIN_EVALUATIONS or not before:
    if early:  # patience decided; the curve is too coarse to add a movement
      return Convergence(EARLY_STOPPED, stop, None, None, in_window, **facts)
    if not before:
      return undecided(
        f'no evaluation of {DEV} {metric} at or before step {_steps(start)}', in_window
      )
    return undecided(
      f'{in_window} evaluation(s) of {DEV} {metric} in the last quarter (steps '
      f'{_steps(start)}-{last:,}), {MIN_EVALUATIONS} needed: evaluate more often '
      '(train.eval_every)',
      in_window,
    )
  moved = abs(running[-1][1] - before[-1][1]) * POINTS_PER_UNIT[metric]
  movement = round(moved, 9)  # float noise must not decide a verdict at the threshold
  window = (before[-1][0], running[-1][0])
  span = (
    f'{DEV} {metric} moved {movement:.2f} points over the last quarter '
    f'(steps {window[0]:,}-{window[1]:,})'
  )
  # A stop by patience or the floor is no proof of a plateau: the floor often ends a run one or
  # two evaluations after a gain. The movement decides wherever there is one.
  why = f'{stop}; {span}' if early else span
  if movement < CONVERGENCE_POINTS:
    verdict = CONVERGED
  else:
    verdict, why = NOT_CONVERGED, f'{why}, not under {CONVERGENCE_POINTS}: still improving'
  return Convergence(verdict, why, movement, window, in_window, **facts)


# --- How the reports say it ---------------------------------------------------------------


def run_line(c: Convergence) -> str:
  """`Converged: yes - dev wer moved 0.12 points over the last quarter (steps 7,500-10,000);
  selected step 9,000`: the one line under a run's final metrics."""
  answer = {EARLY_STOPPED: 'yes', CONVERGED: 'yes', NOT_CONVERGED: 'no'}.get(c.verdict, c.verdict)
  line = f'Converged: {answer} - {c.reason}'
  if c.selected_step is not None:
    line += f'; selected step {c.selected_step:,}'
    if not c.tested_on_best:
      line += f'; tested at step {c.tested_step:,}, not with the selected checkpoint'
  return line


def count_cell(assessments: Sequence[Convergence]) -> str:
  """'3/3', or '2/3 (1 undecided)': converged trials out of those assessed."""
  if not assessments:
    return '–'
  cell = f'{sum(c.converged for c in assessments)}/{len(assessments)}'
  undecided = sum(c.verdict == UNDECIDED for c in assessments)
  return cell + (f' ({undecided} undecided)' if undecided else '')


def improving_cell(assessments: Sequence[Convergence]) -> str:
  """'1/2': trials still improving out of those with a last-quarter movement ('–': none)."""
  known = [c.still_improving for c in assessments if c.still_improving is not None]
  return f'{sum(known)}/{len(known)}' if known else '–'


def flag_line(rows: Sequence[tuple[str, list[tuple[object, Convergence]]]]) -> str | None:
  """One line naming every trial that did not converge, per (variant label, [(seed, verdict)])."""
  parts = []
  for label, trials in rows:
    bad = [f'seed {seed} ({c.verdict}: {c.reason})' for seed, c in trials if not c.converged]
    if bad:
      parts.append(f'{label}: ' + ', '.join(bad))
  if not parts:
    return None
  return (
    f'{MARK} Not all trials converged, so these test numbers may measure learning speed '
    f'rather than a converged model: ' + '; '.join(parts) + '.'
  )


TRIAL_HEAD = [
  'variant',
  'seed',
  'selected step',
  'last step',
  'ended by',
  'last-quarter movement (points)',
  'still improving',
  'tested on best',
  'verdict',
]


def trial_row(label: str, seed, c: Convergence) -> list[str]:
  step = lambda s: '–' if s is None else f'{s:,}'
  moved = '–'
  if c.movement is not None:
    moved = f'{c.movement:.2f} ({c.window[0]:,}-{c.window[1]:,})'
  verdict = c.verdict if c.verdict != UNDECIDED else f'{UNDECIDED}: {c.reason}'
  ended = c.ended_by or 'early stop'
  if c.ended_by in (PATIENCE, FLOOR):
    ended += f' ({_evaluations(c.evaluations_after_best)} after the best)'
  return [
    label,
    '–' if seed is None else str(seed),
    step(c.selected_step),
    step(c.last_step),
    ended,
    moved,
    {True: 'yes', False: 'no', None: '–'}[c.still_improving],
    'yes' if c.tested_on_best else 'no',
    verdict,
  ]


def trial_table(rows: Sequence[tuple[str, object, Convergence]]) -> list[str]:
  """Markdown table: one row per (variant label, seed, verdict)."""
  lines = ['| ' + ' | '.join(TRIAL_HEAD) + ' |', '|' + '---|' * len(TRIAL_HEAD)]
  return lines + ['| ' + ' | '.join(trial_row(*row)) + ' |' for row in rows]


def rule() -> str:
  """The criterion in one sentence, for the reports' introductions."""
  return (
    f'Ended by: {PATIENCE} (train.patience {DEV} evaluations in a row without a gain), the '
    f'{FLOOR} (the next plateau cut would go below optim.plateau_min_scale) or the {STEP_CAP} '
    f'(train.num_steps). Still improving: the best-so-far {DEV} selection metric moved at '
    f'least {CONVERGENCE_POINTS} points (percentage points for rates, BLEU/chrF points) over '
    f'the last {LAST_FRACTION:.0%} of training, however the run ended. Converged: not still '
    f'improving (where too few evaluations fall in that part to tell: stopped by {PATIENCE} or '
    f'the {FLOOR}). Tested on best: the test split was '
    f"evaluated with the trial's best {DEV} checkpoint."
  )
