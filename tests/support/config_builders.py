"""Configs as the code under test gets them: the validated `model` group of configs/base.py,
and the config that `--config` flags on a command line build."""

from absl import flags
from ml_collections import config_flags

from attnlab.config import fields as config_fields
from attnlab.config.model import ModelConfig
from configs import base


def model_config(*, attention=None, transformer=None, **fields):
  """The validated `model` group of configs/base.py with `fields` (and the nested `attention` /
  `transformer` keys) replaced: the one way tests build a ModelConfig, so defaults stay in
  configs/base.py."""
  group = base.get_config().model
  group.update(fields)
  group.attention.update(attention or {})
  group.transformer.update(transformer or {})
  return config_fields.from_group(ModelConfig, group, 'model')


def parse_command_line(args):
  """The config that ml_collections' --config flags build from `args`, as attnlab.main does
  (private FlagValues: absl flags are process-global)."""
  argv = ['main'] + [a for a in args if a.startswith('--config')]
  values = flags.FlagValues()
  config_flags.DEFINE_config_file(
    'config', None, '', flag_values=values, lock_config=True, sys_argv=argv
  )
  values(argv)
  return values.config
