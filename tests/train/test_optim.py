"""optim.make_optimizer: schedule values against hand formulas, clipping, AdamW decay, errors."""

import math
import types

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from attnlab.config import run as config
from attnlab.train import optim
from configs import base


def _cfg(**overrides):
  c = base.get_config().optim
  for key, value in overrides.items():
    c[key] = value
  return c


def _lr(cfg, num_steps, step):
  _, schedule = optim.make_optimizer(cfg, num_steps)
  return float(schedule(step))


@pytest.mark.parametrize('step', [0, 1, 5, 9])
@pytest.mark.parametrize('schedule', config.SCHEDULES)
def test_warmup_is_linear_from_zero(schedule, step):
  cfg = _cfg(schedule=schedule, learning_rate=0.5, warmup_steps=10)
  assert _lr(cfg, 100, step) == pytest.approx(0.5 * step / 10, rel=1e-6)


def test_cosine_values():
  cfg = _cfg(schedule='cosine', learning_rate=2.0, warmup_steps=10, end_lr_fraction=0.1)
  for step in (10, 32, 55, 77, 100, 150):
    p = min((step - 10) / 90, 1.0)
    want = 2.0 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))
    assert _lr(cfg, 100, step) == pytest.approx(want, rel=1e-5), step
  assert _lr(cfg, 100, 100) == pytest.approx(0.2, rel=1e-5)  # end_lr_fraction * peak at N
  assert _lr(cfg, 100, 55) == pytest.approx(1.1, rel=1e-5)  # halfway: mean of peak and end


def test_linear_values():
  cfg = _cfg(schedule='linear', learning_rate=1.0, warmup_steps=4, end_lr_fraction=0.25)
  # Hand values: p = (step - 4) / 16, lr = 1 - 0.75 p.
  for step, want in ((4, 1.0), (8, 0.8125), (12, 0.625), (20, 0.25), (30, 0.25)):
    assert _lr(cfg, 20, step) == pytest.approx(want, rel=1e-6), step


def test_rsqrt_values():
  cfg = _cfg(schedule='rsqrt', learning_rate=0.3, warmup_steps=16)
  for step, want in ((16, 0.3), (64, 0.15), (256, 0.075), (100, 0.3 * 0.4)):
    assert _lr(cfg, 1000, step) == pytest.approx(want, rel=1e-6), step


def test_rsqrt_without_warmup_and_constant():
  cfg = _cfg(schedule='rsqrt', learning_rate=1.0, warmup_steps=0)
  assert _lr(cfg, 10, 0) == pytest.approx(1.0)
  assert _lr(cfg, 10, 4) == pytest.approx(0.5)
  cfg = _cfg(schedule='constant', learning_rate=0.01, warmup_steps=0)
  assert [_lr(cfg, 10, s) for s in (0, 5, 50)] == pytest.approx([0.01] * 3)


def test_schedule_is_jittable_and_vectorised():
  _, schedule = optim.make_optimizer(_cfg(warmup_steps=5), 50)
  steps = jnp.arange(0, 60, 7)
  got = jax.jit(schedule)(steps)
  want = np.array([float(schedule(int(s))) for s in steps])
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)


def test_first_updates_follow_adam_with_scheduled_lr():
  cfg = _cfg(
    name='adam',
    learning_rate=0.1,
    warmup_steps=2,
    schedule='constant',
    clip_norm=0.0,
    b1=0.9,
    b2=0.99,
    eps=1e-8,
  )
  tx, _ = optim.make_optimizer(cfg, 10)
  params = {'w': jnp.array([1.0, -2.0])}
  grads = {'w': jnp.array([0.5, -4.0])}
  state = tx.init(params)
  # Update 0 uses lr = schedule(0) = 0.
  upd, state = tx.update(grads, state, params)
  np.testing.assert_allclose(upd['w'], [0.0, 0.0], atol=0)
  # Update 1 uses lr = 0.05; with a constant gradient Adam's bias-corrected step is -lr * sign(g).
  upd, state = tx.update(grads, state, params)
  g = np.array([0.5, -4.0])
  m = 0.9 * (0.1 * g) + 0.1 * g
  v = 0.99 * (0.01 * g**2) + 0.01 * g**2
  want = -0.05 * (m / (1 - 0.9**2)) / (np.sqrt(v / (1 - 0.99**2)) + 1e-8)
  np.testing.assert_allclose(upd['w'], want, rtol=1e-5)


def test_global_norm_clipping():
  grads1 = {'a': jnp.array([3.0, 0.0]), 'b': jnp.array([[40.0]])}  # global norm ~40.1: clipped
  grads2 = {'a': jnp.array([0.1, 0.2]), 'b': jnp.array([[-0.3]])}  # norm < 1: untouched
  norm1 = math.sqrt(9.0 + 1600.0)
  clipped1 = jax.tree.map(lambda g: g / norm1, grads1)
  params = jax.tree.map(jnp.zeros_like, grads1)

  def run(tx, seq):
    state = tx.init(params)
    for g in seq:
      upd, state = tx.update(g, state, params)
    return upd

  common = dict(learning_rate=1.0, warmup_steps=0, schedule='constant')
  tx_on, _ = optim.make_optimizer(_cfg(clip_norm=1.0, **common), 10)
  tx_off, _ = optim.make_optimizer(_cfg(clip_norm=0.0, **common), 10)
  adam = optax.adam(1.0, b1=0.9, b2=0.98, eps=1e-9)
  # Adam's second update depends on the size of the first gradient relative to the second, so
  # it tells clipped from unclipped histories apart.
  want_on = run(adam, [clipped1, grads2])
  want_off = run(adam, [grads1, grads2])
  close = lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-5)
  jax.tree.map(close, run(tx_on, [grads1, grads2]), want_on)
  jax.tree.map(close, run(tx_off, [grads1, grads2]), want_off)
  assert not np.allclose(want_on['b'], want_off['b'], rtol=1e-2)


def test_adamw_decays_and_adam_rejects_weight_decay():
  cfg = _cfg(
    name='adamw',
    weight_decay=0.1,
    learning_rate=0.5,
    warmup_steps=0,
    schedule='constant',
    clip_norm=0.0,
  )
  tx, _ = optim.make_optimizer(cfg, 10)
  params = {'w': jnp.array([2.0])}
  upd, _ = tx.update({'w': jnp.array([0.0])}, tx.init(params), params)
  np.testing.assert_allclose(upd['w'], [-0.5 * 0.1 * 2.0], rtol=1e-6)  # zero grad: decay only
  with pytest.raises(ValueError, match=r'optim.weight_decay=0.1 .*adamw'):
    optim.make_optimizer(_cfg(name='adam', weight_decay=0.1), 10)


def test_plain_object_config():
  obj = types.SimpleNamespace(**dict(_cfg(schedule='linear', warmup_steps=0, end_lr_fraction=0.5)))
  _, schedule = optim.make_optimizer(obj, 10)
  assert float(schedule(10)) == pytest.approx(0.5 * 3e-3)
  del obj.b2
  with pytest.raises(ValueError, match='missing config key optim.b2'):
    optim.make_optimizer(obj, 10)


@pytest.mark.parametrize(
  ('overrides', 'message'),
  [
    (
      {'schedule': 'cosin'},
      "optim.schedule='cosin' is not valid; choose from constant, cosine, linear, plateau, rsqrt",
    ),
    ({'name': 'sgd'}, "optim.name='sgd' is not valid; choose from adam, adamw"),
    ({'warmup_steps': -1}, 'optim.warmup_steps=-1 must be a non-negative integer'),
    ({'end_lr_fraction': 1.5}, r'optim.end_lr_fraction=1.5 must be in \[0, 1\]'),
    ({'clip_norm': -1.0}, 'optim.clip_norm=-1.0 must be >= 0'),
    ({'learning_rate': 0.0}, 'optim.learning_rate=0.0 must be a finite number > 0'),
    ({'learning_rate': -1e-3}, 'optim.learning_rate=-0.001 must be a finite number > 0'),
    ({'learning_rate': math.inf}, 'optim.learning_rate=inf must be a finite number > 0'),
    ({'learning_rate': math.nan}, 'optim.learning_rate=nan must be a finite number > 0'),
  ],
)
def test_errors_name_the_key(overrides, message):
  with pytest.raises(ValueError, match=message):
    optim.make_optimizer(_cfg(**overrides), 100)


def test_unknown_key_and_bad_num_steps():
  c = _cfg()
  c.momentum = 0.9
  with pytest.raises(ValueError, match='unknown config key optim.momentum'):
    optim.make_optimizer(c, 100)
  with pytest.raises(ValueError, match='train.num_steps=0 must be a positive integer'):
    optim.make_optimizer(_cfg(), 0)


def test_parsed_run_config_group():
  c = base.get_config()
  c.optim.schedule = 'linear'
  c.optim.warmup_steps = 0
  c.optim.end_lr_fraction = 0.0
  _, schedule = optim.make_optimizer(config.parse(c).optim, 4)
  assert [float(schedule(s)) for s in (0, 2, 4)] == pytest.approx([3e-3, 1.5e-3, 0.0])


def test_plateau_is_warmup_then_the_peak_times_the_state_scale():
  cfg = _cfg(schedule='plateau', learning_rate=0.5, warmup_steps=10)
  assert [_lr(cfg, 100, s) for s in (5, 10, 99, 10_000)] == pytest.approx([0.25, 0.5, 0.5, 0.5])
  # Only plateau puts a scale in the optimiser state; it starts at 1.
  params = {'w': jnp.ones((3,))}
  tx, _ = optim.make_optimizer(cfg, 100)
  assert optim.lr_scale(tx.init(params)) == 1.0
  cosine, _ = optim.make_optimizer(_cfg(schedule='cosine'), 100)
  assert optim.lr_scale(cosine.init(params)) is None
  with pytest.raises(ValueError, match='no learning-rate scale'):
    optim.with_lr_scale(cosine.init(params), 0.5)


def test_the_plateau_floor_allows_cuts_down_to_it_and_no_further():
  # Halving from 1: 0.5, 0.25, 0.125, 0.0625 = 1 / 16 (the floor itself is allowed), then None.
  cfg = _cfg(schedule='plateau', plateau_factor=0.5, plateau_min_scale=1 / 16)
  scales, scale = [], 1.0
  while (scale := optim.next_plateau_scale(cfg, scale)) is not None:
    scales.append(scale)
  assert scales == [0.5, 0.25, 0.125, 0.0625]
  # A floor of 0 never stops the cuts; a factor of 0.3 from 1 stops below 0.1 after 0.3.
  assert optim.next_plateau_scale(_cfg(schedule='plateau'), 1e-30) > 0
  third = _cfg(schedule='plateau', plateau_factor=0.3, plateau_min_scale=0.1)
  assert optim.next_plateau_scale(third, 1.0) == pytest.approx(0.3)
  assert optim.next_plateau_scale(third, 0.3) is None


@pytest.mark.slow
def test_a_cut_scale_multiplies_every_adam_update():
  # Adam's update is linear in its learning rate: with the scale at 0.25 the chain must give
  # what optax's own clip + Adam give at a quarter of the learning rate, step after step.
  cfg = _cfg(schedule='plateau', learning_rate=0.01, warmup_steps=0, clip_norm=1.0)
  tx, _ = optim.make_optimizer(cfg, 100)
  reference = optax.chain(optax.clip_by_global_norm(1.0),
                          optax.adam(0.0025, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps))
  params = {'w': jnp.array([1.0, -2.0, 3.0]), 'b': jnp.array(0.5)}
  state = optim.with_lr_scale(jax.device_get(tx.init(params)), 0.25)
  assert optim.lr_scale(state) == 0.25
  ref_state = reference.init(params)
  for i in range(3):
    grads = {'w': jnp.array([0.3, -4.0, 1.0]) * (i + 1), 'b': jnp.array(2.0 - i)}
    got, state = tx.update(grads, state, params)
    want, ref_state = reference.update(grads, ref_state, params)
    for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
      np.testing.assert_allclose(x, y, rtol=1e-6)
  assert optim.lr_scale(state) == 0.25  # updates never change the scale: only the host does
