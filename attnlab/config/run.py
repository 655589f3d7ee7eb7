"""Typed, validated views of the ml-collections config.

Each config group maps one-to-one onto a frozen dataclass (the `model` group's are in
attnlab/config/model.py, the checks they share in attnlab/config/fields.py). The dataclasses
have no defaults: every default lives in configs/base.py, so a key missing from a config is an
error naming it. `parse(config)` checks every group before anything is compiled: an unknown key
or a value outside its choices raises `ConfigError` naming the dotted key and the valid choices.
"""

from __future__ import annotations

import dataclasses
import math

import ml_collections

from attnlab.config.fields import ConfigError, check_choice, check_positive, from_group
from attnlab.config.model import ModelConfig
from attnlab.data import tasks, vocab
from attnlab.data.batching import BATCHINGS
from attnlab.metrics import DIRECTIONS

# The split model selection reads (eval.splits must hold it for train.select_metric): never
# the test split, which stays unseen until the end.
SELECT_SPLIT = 'eval'
SELECT_METRICS = ('auto', *sorted(DIRECTIONS))  # train.select_metric
PARALLEL_MODES = ('shard_map', 'pmap')  # parallel.mode, the first the default: runtime/parallel.py
SEARCH_METHODS = ('greedy', 'beam')  # eval.search, attnlab.decode --search: decoding/search.py


@dataclasses.dataclass(frozen=True)
class TaskConfig:
  name: str
  vocab_size: int
  train_lengths: tuple
  eval_lengths: tuple
  num_train_examples: int
  num_eval_examples: int
  data_dir: str
  keep_stress: bool
  train_files: tuple
  eval_files: tuple
  test_files: tuple
  tokenizer: str
  text_vocab_size: int
  max_chars: int
  source_language: str
  target_language: str
  source_module: str
  target_module: str
  sword_path: str

  def validate(self, prefix: str = 'task') -> None:
    check_choice(f'{prefix}.name', self.name, tasks.BUILDERS)
    for key in ('train_lengths', 'eval_lengths'):
      lo_hi = getattr(self, key)
      if len(lo_hi) != 2 or not 0 < lo_hi[0] <= lo_hi[1]:
        raise ConfigError(f'{prefix}.{key}={lo_hi!r} must be (min, max) with 0 < min <= max')
    check_positive(f'{prefix}.num_train_examples', self.num_train_examples)
    check_positive(f'{prefix}.num_eval_examples', self.num_eval_examples)
    for key in ('train_files', 'eval_files', 'test_files'):
      paths = getattr(self, key)
      if len(paths) > 2 or not all(isinstance(p, str) and p for p in paths):
        raise ConfigError(f'{prefix}.{key}={paths!r} must be () or (path.tsv,) or '
                          '(source_path, target_path)')
    check_choice(f'{prefix}.tokenizer', self.tokenizer, vocab.TOKENIZERS)
    check_positive(f'{prefix}.text_vocab_size', self.text_vocab_size)
    check_positive(f'{prefix}.max_chars', self.max_chars)
    if self.source_language == self.target_language:
      raise ConfigError(f'{prefix}.source_language and {prefix}.target_language are both '
                        f'{self.source_language!r}; choose two different languages')
    if self.source_module.lower() == self.target_module.lower():
      raise ConfigError(f'{prefix}.source_module and {prefix}.target_module are both '
                        f'{self.source_module!r}; choose two different SWORD modules')


@dataclasses.dataclass(frozen=True)
class DataConfig:
  global_batch_size: int
  max_source_length: int
  max_target_length: int
  bucket_size: int
  shuffle_buffer_epochs: bool
  prefetch: int
  batching: str
  tokens_per_batch: int
  num_buckets: int

  def validate(self, prefix: str = 'data') -> None:
    for key in ('global_batch_size', 'max_source_length', 'max_target_length', 'bucket_size',
                'tokens_per_batch', 'num_buckets'):
      check_positive(f'{prefix}.{key}', getattr(self, key))
    check_positive(f'{prefix}.prefetch', self.prefetch, allow_zero=True)
    check_choice(f'{prefix}.batching', self.batching, BATCHINGS)
    longest = max(self.max_source_length, self.max_target_length)
    if self.batching == 'tokens' and self.tokens_per_batch < longest:
      raise ConfigError(f'{prefix}.tokens_per_batch={self.tokens_per_batch} cannot hold one pair '
                        f'of the max length {longest} ({prefix}.max_source_length / '
                        f'max_target_length); raise it, e.g. to global_batch_size x the mean '
                        'pair length')


OPTIMIZERS = ('adam', 'adamw')
SCHEDULES = ('constant', 'cosine', 'linear', 'rsqrt', 'plateau')
# What a plateau cut below optim.plateau_min_scale does: end the run, or hold the rate there.
AT_FLOOR = ('stop', 'hold')


@dataclasses.dataclass(frozen=True)
class OptimConfig:
  name: str
  learning_rate: float
  warmup_steps: int
  schedule: str
  end_lr_fraction: float
  plateau_factor: float
  plateau_patience: int
  plateau_min_scale: float
  plateau_at_floor: str
  weight_decay: float
  b1: float
  b2: float
  eps: float
  clip_norm: float

  def validate(self, prefix: str = 'optim') -> None:
    check_choice(f'{prefix}.name', self.name, OPTIMIZERS)
    check_choice(f'{prefix}.schedule', self.schedule, SCHEDULES)
    check_positive(f'{prefix}.warmup_steps', self.warmup_steps, allow_zero=True)
    check_positive(f'{prefix}.plateau_patience', self.plateau_patience)
    check_choice(f'{prefix}.plateau_at_floor', self.plateau_at_floor, AT_FLOOR)
    if not (isinstance(self.plateau_factor, int | float) and 0 < self.plateau_factor < 1):
      raise ConfigError(f'{prefix}.plateau_factor={self.plateau_factor!r} must be in (0, 1): '
                        'the learning rate is multiplied by it on a plateau')
    if not (isinstance(self.plateau_min_scale, int | float) and 0 <= self.plateau_min_scale < 1):
      raise ConfigError(f'{prefix}.plateau_min_scale={self.plateau_min_scale!r} must be in '
                        '[0, 1): the lowest learning rate as a fraction of the peak (0 = none)')
    if not (isinstance(self.learning_rate, int | float) and 0 < self.learning_rate < math.inf):
      raise ConfigError(f'{prefix}.learning_rate={self.learning_rate!r} must be a finite number '
                        '> 0')
    if self.weight_decay and self.name != 'adamw':
      raise ConfigError(f'{prefix}.weight_decay={self.weight_decay} needs {prefix}.name=adamw')


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  num_steps: int
  label_smoothing: float
  log_every: int
  eval_every: int
  checkpoint_every: int
  keep_checkpoints: int
  select_metric: str
  patience: int
  min_improvement: float
  divergence_factor: float

  def validate(self, prefix: str = 'train') -> None:
    for key in ('num_steps', 'log_every', 'eval_every', 'checkpoint_every', 'keep_checkpoints'):
      check_positive(f'{prefix}.{key}', getattr(self, key))
    if not 0.0 <= self.label_smoothing < 1.0:
      raise ConfigError(f'{prefix}.label_smoothing={self.label_smoothing!r} must be in [0, 1)')
    check_choice(f'{prefix}.select_metric', self.select_metric, SELECT_METRICS)
    check_positive(f'{prefix}.patience', self.patience, allow_zero=True)
    if not (isinstance(self.min_improvement, int | float) and 0 <= self.min_improvement < math.inf):
      raise ConfigError(f'{prefix}.min_improvement={self.min_improvement!r} must be a finite '
                        'number >= 0 (points of the select metric; 0 = any improvement)')
    factor = self.divergence_factor
    if not (isinstance(factor, int | float) and (factor == 0 or 1 < factor < math.inf)):
      raise ConfigError(f'{prefix}.divergence_factor={factor!r} must be 0 (off) or a finite '
                        'number > 1')


@dataclasses.dataclass(frozen=True)
class EvalConfig:
  search: str
  beam_size: int
  length_penalty: float
  max_decode_length: int
  max_examples: int
  num_heatmaps: int
  num_samples: int
  splits: tuple

  def validate(self, prefix: str = 'eval') -> None:
    check_choice(f'{prefix}.search', self.search, SEARCH_METHODS)
    check_positive(f'{prefix}.beam_size', self.beam_size)
    if not (isinstance(self.length_penalty, int | float) and math.isfinite(self.length_penalty)):
      raise ConfigError(f'{prefix}.length_penalty={self.length_penalty!r} must be a finite '
                        'number (GNMT alpha, e.g. 0.6; 0 = none)')
    for key in ('max_decode_length', 'max_examples', 'num_heatmaps', 'num_samples'):
      check_positive(f'{prefix}.{key}', getattr(self, key), allow_zero=True)
    for split in self.splits:
      check_choice(f'{prefix}.splits', split, ('eval', 'test'))


@dataclasses.dataclass(frozen=True)
class ParallelConfig:
  mode: str
  num_devices: int

  def validate(self, prefix: str = 'parallel') -> None:
    check_choice(f'{prefix}.mode', self.mode, PARALLEL_MODES)
    check_positive(f'{prefix}.num_devices', self.num_devices, allow_zero=True)


@dataclasses.dataclass(frozen=True)
class RunConfig:
  """The whole validated config; `parse` builds it from the ConfigDict."""

  seed: int
  task: TaskConfig
  data: DataConfig
  model: ModelConfig
  optim: OptimConfig
  train: TrainConfig
  eval: EvalConfig
  parallel: ParallelConfig

  _nested = {'task': TaskConfig, 'data': DataConfig, 'model': ModelConfig,
             'optim': OptimConfig, 'train': TrainConfig, 'eval': EvalConfig,
             'parallel': ParallelConfig}

  def validate(self, prefix: str = '') -> None:
    del prefix  # cross-group checks name their keys in full
    if self.optim.schedule == 'plateau':
      if 'eval' not in self.eval.splits:
        raise ConfigError('optim.schedule=plateau cuts the learning rate when the eval split '
                          f'stops improving; eval.splits={list(self.eval.splits)} has no eval')
      if 0 < self.train.patience <= self.optim.plateau_patience:
        raise ConfigError(
            f'train.patience={self.train.patience} would stop the run before '
            f'optim.plateau_patience={self.optim.plateau_patience} evaluations cut the learning '
            f'rate; set train.patience > {self.optim.plateau_patience} (or 0 = never stop)')
      if self.optim.plateau_at_floor == 'hold' and self.optim.plateau_min_scale and (
          not self.train.patience):
        raise ConfigError(
            'optim.plateau_at_floor=hold leaves the end of the run to train.patience, which is '
            '0 (never stop): set train.patience > 0, or optim.plateau_at_floor=stop')
    if self.model.attention.score == 'location':
      need = self.data.max_source_length
      if self.model.attention.max_source_length < need:
        raise ConfigError(
            f'model.attention.max_source_length={self.model.attention.max_source_length} is '
            f'shorter than data.max_source_length={need}; the location score needs one slot '
            'per source position')


def parse(config: ml_collections.ConfigDict) -> RunConfig:
  """Validates the whole config; raises ConfigError naming the first bad key."""
  return from_group(RunConfig, config, '')
