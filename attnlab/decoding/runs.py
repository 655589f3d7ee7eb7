"""A trained run directory read back: its config, vocabularies and one checkpoint's parameters.

What train.py leaves in a run directory and what is read here:

    RUN/config.json                       the run's config (parsed and validated again)
    RUN/source_vocab.json, target_vocab.json
                                          the tokenizers; a SentencePiece model is stored
                                          inside its file, so nothing outside RUN is needed
    RUN/checkpoints/<step>/               orbax checkpoints (attnlab.rundir.checkpoint)

RUN may be a bucket's folder (gs://bucket/run), read through etils.epath (attnlab/storage.py).

`load_run(workdir, checkpoint='best')` returns a `TrainedRun` whose `decode` answers new
inputs (decoding/inference.py). `checkpoint` is 'best' (the checkpoint model selection kept; the
latest one, with a note, when the run recorded none), 'latest' or a step number; only the
parameters are read (attnlab/rundir/checkpoint_params.py), not the optimiser state. A directory
that is not a finished-enough run raises `RunDirError` (a `UserError`: one line on the
command line) saying what is missing; a damaged vocabulary file, a checkpoint that does not
read (`UnreadableCheckpointError`, naming the ones that do) or one whose parameter shapes are
not config.json's model are also one such line.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
from etils import epath

from attnlab import storage
from attnlab.config import run as config_lib
from attnlab.data.sentencepiece_vocab import load_vocab
from attnlab.data.tasks import DataError
from attnlab.decoding import inference
from attnlab.errors import UserError
from attnlab.models.factory import build_model
from attnlab.rundir import checkpoint as checkpoint_lib
from attnlab.rundir import checkpoint_params, damage, layout

CHECKPOINT_CHOICES = ('best', 'latest')  # or a step number


class RunDirError(UserError):
  """A workdir that cannot be used: missing, no config, no vocabularies or no checkpoint."""


_REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BASE_CONFIG = os.path.join(_REPOSITORY, 'configs', 'base.py')  # in a checkout of the repository


def current_defaults() -> dict | None:
  """configs/base.py's defaults as a dict, where the repository's configs/ is at hand."""
  if not os.path.isfile(BASE_CONFIG):
    return None
  spec = importlib.util.spec_from_file_location('_attnlab_base_config', BASE_CONFIG)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config().to_dict()


TRAINING_ONLY = ('optim.', 'train.')  # config groups that steer only training


def fill_missing(raw: dict, defaults: dict, prefix: str = '') -> list[str]:
  """Adds to `raw` (in place) the keys of `defaults` it lacks; returns their dotted names."""
  added = []
  for key, value in defaults.items():
    name = f'{prefix}{key}'
    if key not in raw:
      raw[key] = value
      added.append(name)
    elif isinstance(value, dict) and isinstance(raw[key], dict):
      added += fill_missing(raw[key], value, f'{name}.')
  return added


def read_config(workdir: str) -> tuple[config_lib.RunConfig, dict, list[str]]:
  """The run's validated config, the raw dict from RUN/config.json, and the keys it lacked.

  A run made before attnlab gained a config key has no value for it; reading the run (never
  training it further) takes the key's default from configs/base.py and names it, since new
  keys default to the old behaviour. Without configs/ at hand a missing key is an error.
  """
  storage.check_reachable(workdir, '--workdir')
  path = os.path.join(workdir, layout.CONFIG_FILE)
  if not epath.Path(workdir).is_dir():
    raise RunDirError(f'run directory {workdir} does not exist')
  if not epath.Path(path).is_file():
    raise RunDirError(f'{workdir} has no config.json: not a run directory (train one with '
                      f'python -m attnlab.main --config=... --workdir={workdir})')
  try:
    raw = json.loads(storage.read_text(path))
  except (OSError, ValueError) as e:  # not JSON, or not UTF-8
    raise RunDirError(f'{path} cannot be read: {e}') from None
  defaults = current_defaults()
  added = fill_missing(raw, defaults) if defaults else []
  try:
    cfg = config_lib.parse(ml_collections.ConfigDict(raw))
  except config_lib.ConfigError as e:
    raise RunDirError(f'{path}: {e} (the run was made by another version of attnlab)') from None
  return cfg, raw, added


def read_vocabularies(workdir: str):
  """(source, target) tokenizers saved with the run: `Vocab` or `SentencePieceVocab`."""
  vocabs = []
  for name in layout.VOCAB_FILES.values():
    path = os.path.join(workdir, name)
    if not epath.Path(path).is_file():
      raise RunDirError(f'{workdir} has no {name}; train.py writes it when a run starts')
    try:
      vocabs.append(load_vocab(path))
    except DataError as e:
      raise RunDirError(f'{e}; it is the run\'s tokenizer: restore it from a copy of the run') \
        from None
  return tuple(vocabs)


def check_shapes(params: Any, target: Any, where: str) -> None:
  """Restored parameters have the shapes config.json's model needs (a checkpoint written by
  another config in the same workdir would otherwise fail later, inside the model)."""
  flat = lambda tree: {'/'.join(str(getattr(k, 'key', k)) for k in path): tuple(v.shape)
                       for path, v in jax.tree_util.tree_flatten_with_path(tree)[0]}
  got, want = flat(params), flat(target)
  for name, shape in want.items():
    if got.get(name) != shape:
      raise RunDirError(f'{where}: parameter {name} has shape {got.get(name)}, but the model of '
                        f'config.json needs {shape}; the checkpoint was written with another '
                        'config')


def choose_checkpoint(ckpt: checkpoint_lib.Checkpointer, choice: str | int) -> tuple[str, str]:
  """(what to restore, note): 'best' falls back to 'latest', with a note, in a run without a
  best checkpoint (one made before model selection existed)."""
  choice = str(choice)
  if choice not in CHECKPOINT_CHOICES and not choice.isdigit():
    raise RunDirError(f'--checkpoint={choice!r} is not valid; choose from best, latest or a step '
                      f'number ({", ".join(map(str, ckpt.all_steps()))})')
  if choice == 'best' and ckpt.best_step() is None:
    return 'latest', f'no best checkpoint recorded; using the latest (step {ckpt.latest_step()})'
  return choice, ''


def abstract_params(model, cfg: config_lib.RunConfig) -> Any:
  """Shapes and dtypes of the model's parameters, without computing them (a restore target)."""
  src = jnp.ones((1, cfg.data.max_source_length), jnp.int32)
  tgt = jnp.ones((1, cfg.data.max_target_length), jnp.int32)
  init = lambda key: model.init(key, src, tgt, train=False)['params']
  return jax.eval_shape(init, jax.random.key(cfg.seed))


@dataclasses.dataclass
class TrainedRun:
  """A run's model with one checkpoint's parameters, ready to decode new inputs."""

  workdir: str
  cfg: config_lib.RunConfig
  config_dict: dict
  model: Any
  params: Any
  step: int
  note: str  # why the checkpoint differs from the one asked for ('' if it does not)
  source_vocab: Any
  target_vocab: Any
  _decoders: dict = dataclasses.field(default_factory=dict, repr=False)

  def decoder(self, **settings):
    """The `inference.Decoder` for these settings (cached: compiled shapes are reused).

    Settings: search, beam_size, length_penalty, max_decode_length (default: the run's eval.*
    config), batch_size (default data.global_batch_size), max_input_length (default
    data.max_source_length; 0 = only the model's own limit).
    """
    key = tuple(sorted(settings.items()))
    if key not in self._decoders:
      self._decoders[key] = inference.Decoder(self, **settings)
    return self._decoders[key]

  def decode(self, inputs, *, nbest: int = 1, heads: bool = False, **settings):
    """Decodes raw input strings; returns one `inference.Decoded` per input, in order.

    `nbest=K` returns K hypotheses with scores (beam search with beam_size >= K); `heads=True`
    adds per-head cross-attention weights (multi-head and Transformer models).
    """
    return self.decoder(**settings).decode(inputs, nbest=nbest, heads=heads)


def load_run(workdir: str, checkpoint: str | int = 'best') -> TrainedRun:
  """Reads RUN's config, vocabularies and the chosen checkpoint (module docstring)."""
  workdir = os.fspath(workdir)
  cfg, raw, added = read_config(workdir)
  source_vocab, target_vocab = read_vocabularies(workdir)
  # A published results folder (attnlab.run_report --model) holds the best checkpoint alone.
  available = layout.saved_steps(workdir) or layout.saved_steps(workdir, best=True)
  if not available:
    raise RunDirError(f'{workdir} has no checkpoint in {layout.checkpoint_dir(workdir)}; '
                      f'training saves one every train.checkpoint_every='
                      f'{cfg.train.checkpoint_every} steps and at the end')
  model = build_model(cfg.model, source_vocab.size, target_vocab.size)
  target = abstract_params(model, cfg)
  with damage.orbax_logs_dropped():  # its errors that matter are raised, one line each
    ckpt = checkpoint_lib.Checkpointer(layout.checkpoint_dir(workdir),
                                       keep=cfg.train.keep_checkpoints, read_only=True)
    try:
      which, note = choose_checkpoint(ckpt, checkpoint)
      params, step = checkpoint_params.restore(ckpt, which, target_params=target)
      damaged = checkpoint_params.damaged_metadata(ckpt)
    finally:
      ckpt.close()
  check_shapes(params, target, f'checkpoint step {step} in {ckpt.directory}')
  params = jax.device_put(params)  # on the default device once, not per call
  notes = [note]
  if damaged:
    notes.append(f'{", ".join(map(str, damaged))} is not JSON (orbax\'s record of the save; the '
                 'parameters read without it)')
  # Keys that only steer training cannot change what a trained run decodes: not worth a note.
  added = [key for key in added if not key.startswith(TRAINING_ONLY)]
  if added:
    notes.append(f'config.json predates {", ".join(added)}: using their defaults from '
                 'configs/base.py')
  note = '; '.join(filter(None, notes))
  return TrainedRun(workdir=workdir, cfg=cfg, config_dict=raw, model=model, params=params,
                    step=int(step), note=note, source_vocab=source_vocab,
                    target_vocab=target_vocab)
