"""`build_model`: the one place a config becomes a model."""

from attnlab.config_fields import check_choice
from attnlab.model_config import ModelConfig

MODEL_KINDS = ('rnn', 'transformer')  # model.kind: models/seq2seq.py, models/transformer.py


def build_model(config: ModelConfig, source_vocab_size: int, target_vocab_size: int):
  """Returns the Flax module for `config.kind`; `config` was validated by attnlab.config.

  Both families expose the same interface: `__call__(src, tgt_in, train=)` for teacher
  forcing, and `encode` / `init_decode_carry` / `decode_step` for search.
  """
  check_choice('model.kind', config.kind, MODEL_KINDS)
  if config.kind == 'rnn':
    from attnlab.models.seq2seq import Seq2Seq

    return Seq2Seq(config, source_vocab_size, target_vocab_size)
  from attnlab.models.transformer import Transformer

  return Transformer(config, source_vocab_size, target_vocab_size)
