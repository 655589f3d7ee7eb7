"""Pure per-device training and evaluation steps.

Steps return metric *sums* (and the number of tokens/sequences they cover), all-reduced over
the data axis; the host divides (attnlab.metrics.summarize). Gradients are the gradient of the
global token-mean loss: each device differentiates its loss *sum*, the sums of gradients and
token counts are all-reduced, then divided, so N devices equal one device exactly.
"""

from __future__ import annotations

from typing import Any

import flax
import jax
import jax.numpy as jnp
import optax
from flax.training import train_state

from attnlab.tokens import BOS_ID, PAD_ID
from attnlab.train import losses


class TrainState(train_state.TrainState):
  """Params, optimizer state and step; `apply_fn`/`tx` are static (not checkpointed)."""


def decoder_input(target_BxT: jax.Array) -> jax.Array:
  """[BOS] + target[:-1]: teacher forcing input for targets that end with EOS."""
  bos_Bx1 = jnp.full((target_BxT.shape[0], 1), BOS_ID, target_BxT.dtype)
  return jnp.concatenate([bos_Bx1, target_BxT[:, :-1]], axis=1)


def token_sums(logits_BxTxV: jax.Array, target_BxT: jax.Array, row_weight_B=None,
               label_smoothing: float = 0.0) -> dict[str, jax.Array]:
  """Cross-entropy and accuracy sums over non-pad target tokens.

  Returns `objective_sum` (label-smoothed, what is minimised), `loss_sum` (plain NLL, what is
  reported), `token_correct`, `token_count`, `seq_correct` (every token right), `seq_count`.
  """
  logits_BxTxV = logits_BxTxV.astype(jnp.float32)
  weight_BxT = (target_BxT != PAD_ID).astype(jnp.float32)
  if row_weight_B is not None:
    weight_BxT = weight_BxT * row_weight_B[:, None].astype(jnp.float32)
  objective_BxT, nll_BxT, correct_BxT = losses.token_cross_entropy(
    logits_BxTxV, target_BxT, label_smoothing
  )
  row_has_tokens_B = jnp.sum(weight_BxT, axis=1) > 0
  row_correct_B = jnp.all((correct_BxT > 0) | (weight_BxT == 0), axis=1) & row_has_tokens_B
  return {
      'objective_sum': jnp.sum(objective_BxT * weight_BxT),
      'loss_sum': jnp.sum(nll_BxT * weight_BxT),
      'token_correct': jnp.sum(correct_BxT * weight_BxT),
      'token_count': jnp.sum(weight_BxT),
      'seq_correct': jnp.sum(row_correct_B.astype(jnp.float32)),
      'seq_count': jnp.sum(row_has_tokens_B.astype(jnp.float32)),
  }


def train_step(state: TrainState, batch: dict[str, jax.Array], dropout_key: jax.Array, *,
               axis_name: str, label_smoothing: float = 0.0) -> tuple[TrainState, dict]:
  """One optimiser step on this device's shard; collectives over `axis_name`."""
  # Dropout differs per step and per device, and is reproducible from (seed, step, device).
  key = jax.random.fold_in(jax.random.fold_in(dropout_key, state.step),
                           jax.lax.axis_index(axis_name))
  src_BxS, target_BxT = batch['source'], batch['target']

  def objective(params):
    logits = state.apply_fn({'params': params}, src_BxS, decoder_input(target_BxT), train=True,
                            rngs={'dropout': key})
    sums = token_sums(logits, target_BxT, label_smoothing=label_smoothing)
    return sums['objective_sum'], sums

  grads, sums = jax.grad(objective, has_aux=True)(state.params)
  grads, sums = jax.lax.psum((grads, sums), axis_name)
  denom = jnp.maximum(sums['token_count'], 1.0)
  grads = jax.tree.map(lambda g: g / denom, grads)
  sums['grad_norm_sum'] = optax.global_norm(grads)
  sums['steps'] = jnp.ones((), jnp.float32)
  return state.apply_gradients(grads=grads), sums


def eval_step(params: Any, batch: dict[str, jax.Array], *, apply_fn, axis_name: str) -> dict:
  """Teacher-forced loss and accuracy sums; rows with weight 0 are batch padding."""
  logits = apply_fn({'params': params}, batch['source'], decoder_input(batch['target']),
                    train=False)
  sums = token_sums(logits, batch['target'], row_weight_B=batch['weight'])
  del sums['objective_sum']
  return jax.lax.psum(sums, axis_name)


def count_params(params: Any) -> int:
  return int(sum(x.size for x in jax.tree.leaves(flax.core.unfreeze(params))))
