"""A run of any config without training: random parameters in the shapes of a real run."""

import jax

from attnlab.config import run as config_lib
from attnlab.data import load_task
from attnlab.decoding import runs
from attnlab.models.factory import build_model


def random_run(config, workdir):
  """A TrainedRun of `config` with random parameters (the shapes of a real run, no training)."""
  cfg = config_lib.parse(config)
  task = load_task(cfg)
  model = build_model(cfg.model, task.source_vocab.size, task.target_vocab.size)
  leaves, tree = jax.tree.flatten(runs.abstract_params(model, cfg))
  keys = jax.random.split(jax.random.key(1), len(leaves))
  params = tree.unflatten(
    [jax.random.normal(k, p.shape, p.dtype) for k, p in zip(keys, leaves, strict=True)]
  )
  return runs.TrainedRun(
    workdir=str(workdir),
    cfg=cfg,
    config_dict={},
    model=model,
    params=params,
    step=0,
    note='',
    source_vocab=task.source_vocab,
    target_vocab=task.target_vocab,
  )
