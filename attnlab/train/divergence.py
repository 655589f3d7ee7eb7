"""The divergence guard: a run whose loss explodes stops, with the step and advice that fits it.

Two signals, both checked before anything of the step is saved, so every checkpoint a run saves
had a training loss under the threshold:
  - a logged training loss (the mean over a logging window) that is not finite, or above
    `train.divergence_factor` times the lowest loss so far. Before any logged loss goes lower,
    that is ln(target vocabulary size), the loss of a uniform guess, which a model starts near:
    a run that diverges within its first logging window stops there too. The lowest value is
    floored at `LOSS_FLOOR` nats so that a loss near 0 late in training does not turn noise
    into a stop; with the default factor 10 that means a stop only above 10 nats, more than the
    loss of a uniform guess over a 20,000-token vocabulary (ln 20000 = 9.9).
  - an eval metric that is not finite (a loss of 3e29 gives perplexity inf).
A checkpoint is named as the one to resume from only if its loss was under the threshold.
"""

from __future__ import annotations

import math

from attnlab.errors import UserError

LOSS_FLOOR = 1.0  # nats
EVAL_METRICS_CHECKED = ('loss', 'perplexity')


class DivergenceError(UserError):
  """Training diverged; the last good checkpoint is left untouched."""


class NonFiniteLossError(DivergenceError):
  """A NaN or inf training loss."""


def advice(cfg) -> str:
  """What to change, given the config (`cfg`: attnlab.config.run.RunConfig)."""
  optim = cfg.optim
  tips = [f'lower optim.learning_rate (now {optim.learning_rate:g})']
  tips.append(f'lengthen optim.warmup_steps (now {optim.warmup_steps})')
  if optim.clip_norm > 0:
    clipping = f'gradient clipping is on (optim.clip_norm={optim.clip_norm:g})'
  else:
    tips.append('set optim.clip_norm (e.g. 1.0; now 0 = off)')
    clipping = ''
  if cfg.model.dtype != 'float32':  # bfloat16 or bfloat16_matmuls
    tips.append('train in model.dtype=float32')
  text = '; '.join(tips)
  if clipping:
    text += f' ({clipping})'
  return text


def last_good(step: int | None, directory, checkpoint_every: int,
              bad_loss: float | None = None) -> str:
  """Which checkpoint a rerun resumes from; `bad_loss`: the training loss logged when the
  latest one (`step`) was saved, given when it was above the threshold already."""
  if step is None:
    return (f'no checkpoint was saved before it (the first is due at step {checkpoint_every}), '
            'so a rerun starts from scratch')
  if bad_loss is not None:
    return (f'the latest checkpoint (step {step}) in {directory} was saved at a training loss '
            f'of {bad_loss:.4g}, above the threshold already, so it is no good one to resume '
            'from: start again with a new --workdir')
  return (f'the last good checkpoint (step {step}) in {directory} is kept; rerunning resumes '
          f'from it, and --allow_config_change=optim.learning_rate lets it continue with a '
          'lower --config.optim.learning_rate')


class LossGuard:
  """Raises `DivergenceError` when a logged training loss runs away (module docstring).

  `lowest`: the lowest logged loss so far (a resumed run's); `vocab_size`: the target
  vocabulary's, whose uniform guess is the reference until a logged loss goes lower (None: no
  reference before the first logged loss).
  """

  def __init__(self, factor: float, lowest: float | None = None, *,
               vocab_size: int | None = None):
    self.factor = float(factor)
    self.lowest = math.inf if lowest is None else float(lowest)
    self.vocab_size = vocab_size
    self.uniform = math.log(vocab_size) if vocab_size else math.inf

  @property
  def threshold(self) -> float:
    """The loss above which the run stops; inf when the guard is off."""
    if self.factor <= 0:
      return math.inf
    return self.factor * max(min(self.lowest, self.uniform), LOSS_FLOOR)

  def exceeds(self, loss: float) -> bool:
    """Whether `loss` is not finite or above the threshold."""
    return not math.isfinite(loss) or loss > self.threshold

  def problem(self, loss: float) -> str | None:
    """Why `loss` means divergence, or None; records it as the new lowest otherwise."""
    if not math.isfinite(loss):
      return f'non-finite training loss ({loss})'
    if self.exceeds(loss):
      if self.lowest <= self.uniform:
        reference = f'{self.lowest:.4g}, floored at {LOSS_FLOOR:g}'
      else:
        reference = (f'{self.uniform:.4g} = ln {self.vocab_size}, the loss of a uniform guess '
                     'over the target vocabulary, as no logged loss was lower')
      return (f'training loss {loss:.4g} is above train.divergence_factor={self.factor:g} times '
              f'its lowest value so far ({reference})')
    self.lowest = min(self.lowest, loss)
    return None


def eval_problem(split: str, metrics: dict) -> str | None:
  """Why the eval metrics mean divergence (a non-finite loss or perplexity), or None."""
  for key in EVAL_METRICS_CHECKED:
    value = metrics.get(key)
    if isinstance(value, int | float) and not math.isfinite(value):
      return f'{split} {key} is {value}'
  return None
