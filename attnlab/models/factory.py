"""`build_model`: the one place a config becomes a model."""

from attnlab.config.fields import check_choice
from attnlab.config.model import MODEL_KINDS, ModelConfig
from attnlab.models.seq2seq import Seq2Seq
from attnlab.models.transformer import Transformer


def build_model(config: ModelConfig, source_vocab_size: int, target_vocab_size: int):
  """Returns the Flax module for `config.kind`; `config` was validated by attnlab.config.run.

  Both families expose the same interface: `__call__(src, tgt_in, train=)` for teacher
  forcing, and `encode` / `init_decode_carry` / `decode_step` for search.
  """
  check_choice('model.kind', config.kind, MODEL_KINDS)
  if config.kind == 'rnn':
    return Seq2Seq(config, source_vocab_size, target_vocab_size)
  return Transformer(config, source_vocab_size, target_vocab_size)
