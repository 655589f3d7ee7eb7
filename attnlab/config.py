"""Typed, validated views of the ml-collections config (defaults: configs/base.py).

Each config group maps one-to-one onto a frozen dataclass. `parse(config)` checks every group
before anything is compiled: an unknown key or a value outside its choices raises
`ConfigError` naming the dotted key and the valid choices.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import ml_collections


class ConfigError(ValueError):
  """A config key or value that attnlab cannot run with."""


def check_choice(key: str, value: Any, choices) -> None:
  if value not in choices:
    listed = ', '.join(sorted(str(c) for c in choices))
    raise ConfigError(f'{key}={value!r} is not valid; choose from {listed}')


def _check_positive(key: str, value: Any, allow_zero: bool = False) -> None:
  ok = isinstance(value, int) and not isinstance(value, bool)
  ok = ok and (value >= 0 if allow_zero else value > 0)
  if not ok:
    raise ConfigError(f'{key}={value!r} must be a {"non-negative" if allow_zero else "positive"}'
                      ' integer')


def from_group(cls, group: Mapping[str, Any], prefix: str):
  """Builds dataclass `cls` from a config group; unknown or missing keys name the dotted key."""
  values = dict(group.items()) if hasattr(group, 'items') else dict(group)
  fields = {f.name: f for f in dataclasses.fields(cls)}
  unknown = sorted(set(values) - set(fields))
  if unknown:
    raise ConfigError(f'unknown config key {prefix}.{unknown[0]}; {prefix} has '
                      f'{", ".join(sorted(fields))}')
  kwargs = {}
  for name, field in fields.items():
    if name not in values:
      if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
        raise ConfigError(f'missing config key {prefix}.{name}')
      continue
    value = values[name]
    nested = getattr(cls, '_nested', {}).get(name)
    if nested is not None:
      value = from_group(nested, value, f'{prefix}.{name}')
    elif isinstance(value, list):
      value = tuple(value)
    kwargs[name] = value
  obj = cls(**kwargs)
  obj.validate(prefix)
  return obj


SCORES = ('dot', 'scaled_dot', 'general', 'concat', 'location')
TIMINGS = ('bahdanau', 'luong', 'none')
WINDOWS = ('global', 'local_m', 'local_p')


@dataclasses.dataclass(frozen=True)
class AttentionConfig:
  score: str = 'general'
  timing: str = 'luong'
  input_feeding: bool = True
  window: str = 'global'
  window_radius: int = 10
  num_heads: int = 1
  max_source_length: int = 0

  def validate(self, prefix: str = 'model.attention') -> None:
    check_choice(f'{prefix}.score', self.score, SCORES)
    check_choice(f'{prefix}.timing', self.timing, TIMINGS)
    check_choice(f'{prefix}.window', self.window, WINDOWS)
    _check_positive(f'{prefix}.window_radius', self.window_radius)
    _check_positive(f'{prefix}.num_heads', self.num_heads)
    _check_positive(f'{prefix}.max_source_length', self.max_source_length, allow_zero=True)
    if self.score == 'location' and self.max_source_length <= 0:
      raise ConfigError(f'{prefix}.score=location needs {prefix}.max_source_length > 0 (one '
                        'score per source position, Luong 2015)')
    if self.input_feeding and self.timing != 'luong':
      raise ConfigError(f'{prefix}.input_feeding=True feeds h~_(t-1) into a Luong decoder; with '
                        f'{prefix}.timing={self.timing!r} set {prefix}.input_feeding=False')
    if self.timing == 'none' and (self.window != 'global' or self.num_heads > 1):
      raise ConfigError(f'{prefix}.timing=none has no attention; leave {prefix}.window=global '
                        f'and {prefix}.num_heads=1')
    if self.num_heads > 1 and self.window != 'global':
      raise ConfigError(f'{prefix}.num_heads={self.num_heads} supports {prefix}.window=global '
                        f'only (got {self.window!r})')
    if self.num_heads > 1 and self.score not in ('scaled_dot',):
      raise ConfigError(f'{prefix}.num_heads={self.num_heads} uses multi-head scaled-dot '
                        f'attention; set {prefix}.score=scaled_dot (got {self.score!r})')


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
  num_heads: int = 4
  mlp_dim: int = 512
  norm: str = 'pre'
  max_length: int = 512

  def validate(self, prefix: str = 'model.transformer') -> None:
    _check_positive(f'{prefix}.num_heads', self.num_heads)
    _check_positive(f'{prefix}.mlp_dim', self.mlp_dim)
    _check_positive(f'{prefix}.max_length', self.max_length)
    check_choice(f'{prefix}.norm', self.norm, ('pre', 'post'))


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  kind: str = 'rnn'
  embed_dim: int = 64
  hidden_size: int = 128
  encoder_layers: int = 1
  decoder_layers: int = 1
  dropout: float = 0.1
  dtype: str = 'float32'
  cell: str = 'lstm'
  bidirectional: bool = True
  bridge: str = 'dense'
  attention: AttentionConfig = dataclasses.field(default_factory=AttentionConfig)
  transformer: TransformerConfig = dataclasses.field(default_factory=TransformerConfig)

  _nested = {'attention': AttentionConfig, 'transformer': TransformerConfig}

  def validate(self, prefix: str = 'model') -> None:
    check_choice(f'{prefix}.kind', self.kind, ('rnn', 'transformer'))
    check_choice(f'{prefix}.cell', self.cell, ('lstm', 'gru'))
    check_choice(f'{prefix}.bridge', self.bridge, ('dense', 'copy', 'zero'))
    check_choice(f'{prefix}.dtype', self.dtype, ('float32', 'bfloat16'))
    for key in ('embed_dim', 'hidden_size', 'encoder_layers', 'decoder_layers'):
      _check_positive(f'{prefix}.{key}', getattr(self, key))
    if not 0.0 <= float(self.dropout) < 1.0:
      raise ConfigError(f'{prefix}.dropout={self.dropout!r} must be in [0, 1)')
    if self.kind == 'rnn':
      if self.bidirectional and self.hidden_size % 2:
        raise ConfigError(f'{prefix}.hidden_size={self.hidden_size} must be even with '
                          f'{prefix}.bidirectional=True (each direction gets H/2 units)')
      heads = self.attention.num_heads
      if self.hidden_size % heads:
        raise ConfigError(f'{prefix}.attention.num_heads={heads} does not divide '
                          f'{prefix}.hidden_size={self.hidden_size}')
      if self.attention.timing == 'none' and self.bridge == 'zero':
        raise ConfigError(f'{prefix}.attention.timing=none with {prefix}.bridge=zero leaves the '
                          'decoder blind to the source; choose bridge from copy, dense')
    else:
      heads = self.transformer.num_heads
      if self.hidden_size % heads:
        raise ConfigError(f'{prefix}.transformer.num_heads={heads} does not divide '
                          f'{prefix}.hidden_size={self.hidden_size}')


def parse_model(config: ml_collections.ConfigDict) -> ModelConfig:
  return from_group(ModelConfig, config.model, 'model')
