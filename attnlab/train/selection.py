"""Model selection on the eval split, as the papers do it: keep the best checkpoint, stop early.

At every evaluation (`train.eval_every` and the last step) the metric `train.select_metric` of
the eval split is compared with the best value so far; an improvement makes that step the
selected one and its parameters are saved apart from the rolling latest checkpoints
(attnlab.rundir.checkpoint). An equal value improves only with a lower teacher-forced eval loss (a
coarse metric such as exact match stays at 0 for long early in training; the earlier of two
exact ties wins). `train.patience` > 0
stops training after that many evaluations in a row without a gain. With
`optim.schedule=plateau` every `optim.plateau_patience` evaluations without a gain (counted
since the last gain or the last cut) call for a learning-rate cut, which attnlab.train.loop
applies. A gain is an improvement by at least `train.min_improvement` points
(metrics.POINTS_PER_UNIT) over the value of the last gain: with 0 every improvement is one; with
more, a run that creeps forward by hundredths is stopped, while its best checkpoint still
follows every improvement. At the end the test split is evaluated with the selected checkpoint.

`DIRECTIONS` is the one table of which way each metric improves; `TASK_METRICS` holds the
metric a task selects on when the config says 'auto'.

The state (best step and value, the last gain, evaluations since it and since the last cut) is plain
JSON, saved with every latest checkpoint, so a killed and resumed run selects the same step
(and cuts the learning rate at the same evaluations) as an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import math

from attnlab.config.fields import ConfigError
from attnlab.config.run import SELECT_METRICS, SELECT_SPLIT
from attnlab.metrics import DIRECTIONS, POINTS_PER_UNIT

# The metric `train.select_metric='auto'` picks per task; every other task selects on
# sequence_accuracy (exact match: synthetic tasks and dates).
TASK_METRICS = {
  'cmudict_g2p': 'wer',
  'parallel_text': 'bleu',
  'wmt14_translate': 'bleu',
  'bible': 'bleu',
}
DEFAULT_METRIC = 'sequence_accuracy'


def resolve_metric(select_metric: str, task_name: str) -> str:
  """The metric selection uses: `select_metric`, or the task's own for 'auto'."""
  if select_metric == 'auto':
    return TASK_METRICS.get(task_name, DEFAULT_METRIC)
  if select_metric not in DIRECTIONS:
    raise ValueError(f'unknown metric {select_metric!r}; choose from {", ".join(SELECT_METRICS)}')
  return select_metric


def is_better(metric: str, value: float, than: float | None) -> bool:
  """Whether `value` improves on `than` (None: nothing yet) in `metric`'s direction."""
  if than is None:
    return True
  return value > than if DIRECTIONS[metric] == 'max' else value < than


@dataclasses.dataclass
class Selection:
  """Best step and value so far, and evaluations without improvement since."""

  metric: str
  patience: int  # 0 = never stop early
  plateau_patience: int = 0  # optim.schedule=plateau: evaluations before a cut (0 = no cuts)
  best_step: int | None = None
  best_value: float | None = None
  best_loss: float | None = None  # the eval loss at the best step: breaks ties
  min_improvement: float = 0.0  # points a gain needs (train.min_improvement)
  gain_value: float | None = None  # the value of the last gain (the best, with 0 points)
  evals_since_best: int = 0  # since the last gain: train.patience counts these
  evals_since_change: int = 0  # since the last gain or the last learning-rate cut

  @property
  def mode(self) -> str:
    return DIRECTIONS[self.metric]

  def update(self, step: int, metrics: dict) -> bool:
    """Records the eval metrics of `step`; returns True if `step` is the new best."""
    if self.metric not in metrics:
      available = ', '.join(sorted(k for k, v in metrics.items() if isinstance(v, int | float)))
      raise ConfigError(f'train.select_metric={self.metric!r} is not among the eval metrics of '
                        f'this task; choose from {available}')
    value = float(metrics[self.metric])
    loss = float(metrics.get('loss', math.nan))
    tie_won = (value == self.best_value and self.best_loss is not None and loss < self.best_loss)
    improved = math.isfinite(value) and (is_better(self.metric, value, self.best_value) or tie_won)
    if improved:
      self.best_step, self.best_value = int(step), value
      self.best_loss = loss if math.isfinite(loss) else None
    if improved and self._is_gain(value):
      self.gain_value, self.evals_since_best, self.evals_since_change = value, 0, 0
    else:
      self.evals_since_best += 1
      self.evals_since_change += 1
    return improved

  def _is_gain(self, value: float) -> bool:
    """Whether an improved `value` moved at least min_improvement points from the last gain."""
    if self.gain_value is None or not self.min_improvement:
      return True
    moved = value - self.gain_value if self.mode == 'max' else self.gain_value - value
    # A relative tolerance: 0.5 points must count as 0.5 when the metric is a float fraction.
    return moved * POINTS_PER_UNIT[self.metric] >= self.min_improvement * (1 - 1e-9)

  @property
  def lr_cut_due(self) -> bool:
    """Whether the plateau schedule should cut the learning rate now (not when stopping)."""
    return (self.plateau_patience > 0 and not self.patience_exhausted
            and self.evals_since_change >= self.plateau_patience)

  def lr_cut_made(self) -> None:
    self.evals_since_change = 0

  @property
  def patience_exhausted(self) -> bool:
    return self.patience > 0 and self.evals_since_best >= self.patience

  def to_json(self) -> dict:
    return {'metric': self.metric, 'best_step': self.best_step, 'best_value': self.best_value,
            'best_loss': self.best_loss, 'gain_value': self.gain_value,
            'evals_since_best': self.evals_since_best,
            'evals_since_change': self.evals_since_change}

  def restore(self, saved: dict | None) -> None:
    """Continues from `to_json()` output saved under the same metric (else starts afresh)."""
    if saved and saved.get('metric') == self.metric:
      self.best_step, self.best_value = saved['best_step'], saved['best_value']
      self.best_loss = saved.get('best_loss')
      # Saved before min_improvement existed: every improvement was a gain.
      self.gain_value = saved.get('gain_value', self.best_value)
      self.evals_since_best = int(saved['evals_since_best'])
      # Saved before plateau cuts existed: no cut was made, so the count is the same.
      self.evals_since_change = int(saved.get('evals_since_change', self.evals_since_best))

  def describe(self) -> str:
    """`eval sequence_accuracy (higher is better)`, for the console."""
    way = 'higher' if self.mode == 'max' else 'lower'
    return f'{SELECT_SPLIT} {self.metric} ({way} is better)'
