"""The optimiser from the `optim` config group: an optax chain plus its learning-rate schedule.

    tx, schedule = make_optimizer(config.optim, config.train.num_steps)

The chain is `clip_by_global_norm(clip_norm)` (left out when clip_norm = 0) followed by Adam or
AdamW whose learning rate is `schedule(count)`. optax evaluates the schedule at `count`, the
number of updates applied before the current one, so the first update uses `schedule(0)`.

Schedule (peak = learning_rate, W = warmup_steps, N = num_steps, f = end_lr_fraction):

    step < W:      peak * step / W                                    (linear warmup from 0)
    step >= W:     constant  peak
                   cosine    peak * (f + (1 - f) * (1 + cos(pi * p)) / 2)
                   linear    peak * (1 - (1 - f) * p)
                   rsqrt     peak * sqrt(max(W, 1) / max(step, 1))
                   plateau   peak * scale
    where p = clip((step - W) / max(N - W, 1), 0, 1), so cosine and linear reach f * peak at N
    and stay there.

With W = 0 the warmup is skipped (rsqrt then decays as peak / sqrt(step) from step 1).

`plateau` (reduce on plateau, as Bahdanau et al. 2015 and Luong et al. 2015 trained and
Joey NMT / OpenNMT-py offer): `scale` starts at 1 and is multiplied by `plateau_factor` each
time the eval metric has not improved for `plateau_patience` evaluations (attnlab.train.selection
decides, attnlab.train.loop applies it). The scale is part of the optimiser state (the last link of
the chain, `LrScaleState`), so checkpoints carry it and a resumed run continues at the same
learning rate; warmup still multiplies it. With `plateau_min_scale` > 0 a cut that would take
the scale below it is not made (`next_plateau_scale` is None): the run ends there
(`plateau_at_floor='stop'`) or goes on at the floor until `train.patience` ends it ('hold').
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from attnlab.config.fields import ConfigError, from_group
from attnlab.config.run import OptimConfig

Schedule = Callable[[jnp.ndarray | int], jnp.ndarray]


class LrScaleState(NamedTuple):
  """The plateau schedule's learning-rate multiplier (float32 scalar), set by the host."""

  scale: jnp.ndarray


def scale_by_lr_scale() -> optax.GradientTransformation:
  """Multiplies every update by the `LrScaleState.scale` in its state (1 at init)."""

  def init(params):
    del params
    return LrScaleState(scale=jnp.ones([], jnp.float32))

  def update(updates, state, params=None):
    del params
    return jax.tree.map(lambda u: u * state.scale.astype(u.dtype), updates), state

  return optax.GradientTransformation(init, update)


def _is_scale(x) -> bool:
  return isinstance(x, LrScaleState)


def _lr_scale_states(opt_state) -> list[LrScaleState]:
  return [x for x in jax.tree.leaves(opt_state, is_leaf=_is_scale) if _is_scale(x)]


def lr_scale(opt_state) -> float | None:
  """The plateau multiplier in an optimiser state (host or device), None without one."""
  found = _lr_scale_states(opt_state)
  return float(np.asarray(found[0].scale).reshape(-1)[0]) if found else None


def with_lr_scale(opt_state, value: float):
  """`opt_state` (host arrays) with the plateau multiplier set to `value`."""
  if not _lr_scale_states(opt_state):
    raise ValueError('this optimiser state has no learning-rate scale (optim.schedule != plateau)')
  return jax.tree.map(
    lambda x: LrScaleState(np.full_like(np.asarray(x.scale), value)) if _is_scale(x) else x,
    opt_state, is_leaf=_is_scale)


def next_plateau_scale(cfg: OptimConfig, scale: float) -> float | None:
  """The plateau multiplier after one more cut of `scale`, None when it would fall below
  `plateau_min_scale` (no cut: the run stops or holds the rate, `plateau_at_floor`). float32,
  as the optimiser state holds it."""
  cut = float(np.float32(scale * cfg.plateau_factor))
  # A relative tolerance: 0.5 ** 4 must reach a floor of 0.0625 written as 1 / 16.
  if cut < cfg.plateau_min_scale * (1 - 1e-6):
    return None
  return cut


def parse_optim(optim_cfg) -> OptimConfig:
  """Validated `config.OptimConfig` from the `optim` group in any of its forms.

  Accepts an `OptimConfig` (as in `config.parse(c).optim`), a ConfigDict/mapping (which must
  hold exactly its fields: unknown keys fail), or any object with its attributes (extra
  attributes are ignored). Adds the range checks the schedule and clipping rely on.
  """
  if isinstance(optim_cfg, OptimConfig):
    cfg = optim_cfg
    cfg.validate()
  elif hasattr(optim_cfg, 'items'):
    cfg = from_group(OptimConfig, optim_cfg, 'optim')
  else:
    values = {}
    for field in dataclasses.fields(OptimConfig):
      if not hasattr(optim_cfg, field.name):
        raise ConfigError(f'missing config key optim.{field.name}')
      values[field.name] = getattr(optim_cfg, field.name)
    cfg = OptimConfig(**values)
    cfg.validate()
  if not 0.0 <= cfg.end_lr_fraction <= 1.0:
    raise ConfigError(f'optim.end_lr_fraction={cfg.end_lr_fraction!r} must be in [0, 1]')
  if cfg.clip_norm < 0:
    raise ConfigError(f'optim.clip_norm={cfg.clip_norm!r} must be >= 0 (0 = off)')
  if cfg.weight_decay < 0:
    raise ConfigError(f'optim.weight_decay={cfg.weight_decay!r} must be >= 0')
  return cfg


def make_schedule(optim_cfg, num_steps: int) -> Schedule:
  """Learning rate as a function of the update count (jittable; see the module docstring)."""
  cfg = parse_optim(optim_cfg)
  if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps <= 0:
    raise ConfigError(f'train.num_steps={num_steps!r} must be a positive integer')
  peak = float(cfg.learning_rate)
  warmup = cfg.warmup_steps
  end = float(cfg.end_lr_fraction)
  decay_steps = max(num_steps - warmup, 1)
  kind = cfg.schedule

  def schedule(step):
    step = jnp.asarray(step, jnp.float32)
    progress = jnp.clip((step - warmup) / decay_steps, 0.0, 1.0)
    if kind in ('constant', 'plateau'):  # plateau: the cuts are LrScaleState's
      after = jnp.full_like(step, peak)
    elif kind == 'cosine':
      after = peak * (end + (1.0 - end) * 0.5 * (1.0 + jnp.cos(jnp.pi * progress)))
    elif kind == 'linear':
      after = peak * (1.0 - (1.0 - end) * progress)
    else:  # rsqrt
      after = peak * jnp.sqrt(max(warmup, 1) / jnp.maximum(step, 1.0))
    if warmup == 0:
      return after
    return jnp.where(step < warmup, peak * step / warmup, after)

  return schedule


def make_optimizer(optim_cfg, num_steps: int) -> tuple[optax.GradientTransformation, Schedule]:
  """Returns `(tx, schedule)`: the optax chain and its learning rate as a function of step.

  Args:
    optim_cfg: the `optim` config group (ConfigDict, mapping, `OptimConfig` or any object with
      its attributes).
    num_steps: total optimiser steps (`train.num_steps`); cosine and linear decay end there.

  Raises:
    ConfigError (a ValueError): an unknown name or schedule, or a value out of range; the
      message names the dotted key and the valid choices.
  """
  cfg = parse_optim(optim_cfg)
  schedule = make_schedule(cfg, num_steps)
  if cfg.name == 'adam':
    opt = optax.adam(schedule, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps)
  else:
    # AdamW decays every parameter (biases and norm scales included), as torch.optim.AdamW does.
    opt = optax.adamw(schedule, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, weight_decay=cfg.weight_decay)
  if cfg.schedule == 'plateau':
    opt = optax.chain(opt, scale_by_lr_scale())
  if cfg.clip_norm > 0:
    opt = optax.chain(optax.clip_by_global_norm(cfg.clip_norm), opt)
  return opt, schedule
