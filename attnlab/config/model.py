"""The `model` config group: `ModelConfig` with its `attention` and `transformer` subgroups,
validated against the model choices declared here (attnlab/config/run.py has the others)."""

from __future__ import annotations

import dataclasses

from attnlab.config.fields import ConfigError, check_choice, check_positive

# The model choices. Each model module implements exactly these and checks so at import
# (models/scoring.py, models/matmul.py), so validation needs no JAX and no model import.
MODEL_KINDS = ('rnn', 'transformer')  # models/seq2seq.py, models/transformer.py
CELLS = ('lstm', 'gru')  # models/recurrent.py
DTYPES = ('float32', 'bfloat16', 'bfloat16_matmuls')  # models/matmul.py
BRIDGES = ('dense', 'copy', 'zero')  # models/encoder.py
SCORES = ('dot', 'scaled_dot', 'general', 'concat', 'location')  # models/scoring.py
ATTENDING_TIMINGS = ('bahdanau', 'luong')  # models/decoder.py: when the decoder attends
TIMINGS = (*ATTENDING_TIMINGS, 'none', 'fixed')  # none, fixed: no attention weights
WINDOWS = ('global', 'local_m', 'local_p')  # models/attention.py
NORMS = ('pre', 'post')  # models/transformer.py: layer norm before or after each sublayer

_CHOICES = {'model.kind': MODEL_KINDS, 'model.cell': CELLS, 'model.dtype': DTYPES,
            'model.bridge': BRIDGES, 'model.attention.score': SCORES,
            'model.attention.timing': TIMINGS, 'model.attention.window': WINDOWS,
            'model.transformer.norm': NORMS}


@dataclasses.dataclass(frozen=True)
class AttentionConfig:
  score: str
  timing: str
  input_feeding: bool
  window: str
  window_radius: int
  num_heads: int
  max_source_length: int
  concat_bias: bool

  @property
  def attends(self) -> bool:
    """Whether the decoder computes attention weights (timing bahdanau or luong; none and
    fixed read the source without them)."""
    return self.timing in ATTENDING_TIMINGS

  def describe_no_attention(self) -> str:
    """How a decoder without attention reads the source, in a few words (console, explorer)."""
    if self.timing == 'fixed':
      return 'no attention, a fixed context at every step (RNNencdec)'
    return 'no attention'

  def validate(self, prefix: str = 'model.attention') -> None:
    choices = _CHOICES
    for key in ('score', 'timing', 'window'):
      check_choice(f'{prefix}.{key}', getattr(self, key), choices[f'model.attention.{key}'])
    check_positive(f'{prefix}.window_radius', self.window_radius)
    check_positive(f'{prefix}.num_heads', self.num_heads)
    check_positive(f'{prefix}.max_source_length', self.max_source_length, allow_zero=True)
    if self.score == 'location' and self.max_source_length <= 0:
      raise ConfigError(f'{prefix}.score=location needs {prefix}.max_source_length > 0 (one '
                        'score per source position, Luong 2015)')
    if self.concat_bias and self.score != 'concat':
      raise ConfigError(f'{prefix}.concat_bias=True adds a bias to the concat score; with '
                        f'{prefix}.score={self.score!r} set {prefix}.concat_bias=False')
    if self.input_feeding and self.timing != 'luong':
      raise ConfigError(f'{prefix}.input_feeding=True feeds h~_(t-1) into a Luong decoder; with '
                        f'{prefix}.timing={self.timing!r} set {prefix}.input_feeding=False')
    if not self.attends and (self.window != 'global' or self.num_heads > 1):
      raise ConfigError(f'{prefix}.timing={self.timing} has no attention; leave '
                        f'{prefix}.window=global and {prefix}.num_heads=1')
    if self.num_heads > 1 and self.window != 'global':
      raise ConfigError(f'{prefix}.num_heads={self.num_heads} supports {prefix}.window=global '
                        f'only (got {self.window!r})')
    if self.num_heads > 1 and self.score not in ('scaled_dot',):
      raise ConfigError(f'{prefix}.num_heads={self.num_heads} uses multi-head scaled-dot '
                        f'attention; set {prefix}.score=scaled_dot (got {self.score!r})')


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
  num_heads: int
  mlp_dim: int
  norm: str
  max_length: int

  def validate(self, prefix: str = 'model.transformer') -> None:
    check_positive(f'{prefix}.num_heads', self.num_heads)
    check_positive(f'{prefix}.mlp_dim', self.mlp_dim)
    check_positive(f'{prefix}.max_length', self.max_length)
    check_choice(f'{prefix}.norm', self.norm, _CHOICES['model.transformer.norm'])


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  kind: str
  embed_dim: int
  hidden_size: int
  encoder_layers: int
  decoder_layers: int
  dropout: float
  dtype: str
  cell: str
  bidirectional: bool
  bridge: str
  attention: AttentionConfig
  transformer: TransformerConfig

  _nested = {'attention': AttentionConfig, 'transformer': TransformerConfig}

  def validate(self, prefix: str = 'model') -> None:
    choices = _CHOICES
    for key in ('kind', 'cell', 'bridge', 'dtype'):
      check_choice(f'{prefix}.{key}', getattr(self, key), choices[f'model.{key}'])
    for key in ('embed_dim', 'hidden_size', 'encoder_layers', 'decoder_layers'):
      check_positive(f'{prefix}.{key}', getattr(self, key))
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
