"""Every config file builds; bad keys and values fail before compiling, naming the key."""

import glob
import importlib
import os

import pytest
from support import REPO

from attnlab.config import model as model_config
from attnlab.config import run as config_lib
from attnlab.config.run import SEARCH_METHODS
from attnlab.models import attention, decoder, factory, recurrent, scoring
from configs import base

CONFIG_DIR = os.path.join(REPO, 'configs')


def config_modules():
  names = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(CONFIG_DIR, '*.py')))
  return [n for n in names if n not in ('__init__', 'base')]


@pytest.mark.parametrize('name', config_modules())
def test_every_config_and_variant_parses(name):
  module = importlib.import_module(f'configs.{name}')
  assert 'COMMAND:' in module.__doc__, f'configs/{name}.py docstring needs a COMMAND line'
  for variant in ('',) + tuple(getattr(module, 'VARIANTS', ())):
    run = config_lib.parse(module.get_config(variant))
    assert run.train.num_steps > 0


@pytest.mark.parametrize('name', config_modules())
def test_unknown_variant_lists_choices(name):
  module = importlib.import_module(f'configs.{name}')
  with pytest.raises(ValueError, match='choose from'):
    module.get_config('no_such_variant')


def set_key(c, dotted: str, value) -> None:
  *groups, leaf = dotted.split('.')
  for g in groups:
    c = getattr(c, g)
  setattr(c, leaf, value)


def test_defaults_parse():
  run = config_lib.parse(base.get_config())
  assert run.model.attention.score == 'general'


def _choices(registry) -> str:
  return 'choose from ' + ', '.join(sorted(registry))


@pytest.mark.parametrize('key, value, message', [
    ('model.attention.score', 'gneral',
     "model.attention.score='gneral' is not valid; " + _choices(scoring.SCORES)),
    ('model.attention.timing', 'early', _choices(decoder.TIMINGS)),
    ('model.attention.window', 'local', _choices(attention.WINDOWS)),
    ('model.kind', 'cnn', _choices(factory.MODEL_KINDS)),
    ('model.cell', 'rnn', _choices(recurrent.CELLS)),
    ('model.dtype', 'float16', 'choose from bfloat16, bfloat16_matmuls, float32$'),
    ('optim.schedule', 'cosin', 'choose from constant, cosine, linear, plateau, rsqrt$'),
    ('optim.plateau_factor', 1.0, r'optim.plateau_factor=1.0 must be in \(0, 1\)'),
    ('optim.plateau_patience', 0, 'optim.plateau_patience=0 must be a positive integer'),
    ('optim.plateau_min_scale', 1.0, r'optim.plateau_min_scale=1.0 must be in \[0, 1\)'),
    ('train.min_improvement', -0.1, r'train.min_improvement=-0.1 must be a finite number >= 0'),
    ('optim.plateau_at_floor', 'keep',
     "optim.plateau_at_floor='keep' is not valid; choose from hold, stop$"),
    ('parallel.mode', 'pjit', 'choose from pmap, shard_map'),
    ('eval.search', 'sample', _choices(SEARCH_METHODS)),
    ('model.hidden_size', 0, 'model.hidden_size=0 must be a positive integer'),
    ('model.dropout', 1.5, r'model.dropout=1.5 must be in \[0, 1\)'),
])
def test_bad_value_names_key_and_choices(key, value, message):
  c = base.get_config()
  set_key(c, key, value)
  with pytest.raises(config_lib.ConfigError, match=message):
    config_lib.parse(c)


@pytest.mark.parametrize('updates, message', [
    ({'model.attention.score': 'location'},
     'model.attention.score=location needs model.attention.max_source_length > 0'),
    ({'model.attention.score': 'location', 'model.attention.max_source_length': 8},
     'shorter than data.max_source_length=32'),
    ({'model.attention.num_heads': 3, 'model.attention.score': 'scaled_dot'},
     'model.attention.num_heads=3 does not divide model.hidden_size=128'),
    ({'model.attention.num_heads': 2}, 'set model.attention.score=scaled_dot'),
    ({'model.kind': 'transformer', 'model.transformer.num_heads': 5},
     'model.transformer.num_heads=5 does not divide model.hidden_size=128'),
    ({'model.attention.timing': 'bahdanau'}, 'set model.attention.input_feeding=False'),
    ({'model.attention.timing': 'none', 'model.attention.input_feeding': False,
      'model.bridge': 'zero'}, 'leaves the decoder blind'),
    ({'model.hidden_size': 65}, 'must be even with model.bidirectional=True'),
    ({'optim.weight_decay': 0.1}, 'optim.weight_decay=0.1 needs optim.name=adamw'),
    ({'task.train_lengths': (5, 2)}, r'task.train_lengths=\(5, 2\) must be \(min, max\)'),
    ({'optim.schedule': 'plateau', 'eval.splits': ('test',)},
     r"optim.schedule=plateau cuts the learning rate when the eval split stops improving; "
     r"eval.splits=\['test'\] has no eval"),
    ({'optim.schedule': 'plateau', 'optim.plateau_patience': 3, 'train.patience': 3},
     r'train.patience=3 would stop the run before optim.plateau_patience=3 evaluations cut '
     r'the learning rate; set train.patience > 3 \(or 0 = never stop\)'),
    ({'optim.schedule': 'plateau', 'optim.plateau_min_scale': 0.25, 'train.patience': 0,
      'optim.plateau_at_floor': 'hold'},
     r'optim.plateau_at_floor=hold leaves the end of the run to train.patience, which is 0'),
])
def test_impossible_combinations(updates, message):
  c = base.get_config()
  for key, value in updates.items():
    set_key(c, key, value)
  with pytest.raises(config_lib.ConfigError, match=message):
    config_lib.parse(c)


def test_unknown_key_is_named():
  c = base.get_config()
  c.model.attention.scroe = 'dot'
  with pytest.raises(config_lib.ConfigError, match='unknown config key model.attention.scroe'):
    config_lib.parse(c)


@pytest.mark.parametrize(
  'group,key', [('model.attention', 'window'), ('optim', 'b2'), ('', 'seed')]
)
def test_missing_key_is_named_not_filled(group, key):
  """configs/base.py is the one home of defaults: the typed views never fill a missing key."""
  c = base.get_config().to_dict()
  node = c
  for part in filter(None, group.split('.')):
    node = node[part]
  del node[key]
  dotted = f'{group}.{key}' if group else key
  with pytest.raises(config_lib.ConfigError, match=f'missing config key {dotted};'):
    config_lib.parse(c)


def test_typed_views_have_no_defaults():
  import dataclasses

  for cls in (config_lib.RunConfig, model_config.ModelConfig, model_config.AttentionConfig,
              model_config.TransformerConfig, config_lib.OptimConfig, config_lib.TrainConfig,
              config_lib.EvalConfig):
    defaults = [f.name for f in dataclasses.fields(cls)
                if f.default is not dataclasses.MISSING
                or f.default_factory is not dataclasses.MISSING]
    assert not defaults, (cls.__name__, defaults)
