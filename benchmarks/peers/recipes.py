"""The matched network and each system's own recipe around it, as its own configuration.

Matched in every system (attnlab's recipe of the task, configs/g2p.py or configs/bible.py, at
one encoder layer in float32): a bidirectional LSTM encoder of 128 units per direction, a
learnt bridge from its final state to the decoder's first, an LSTM decoder of 256 units with
Luong's general score and input feeding, embeddings of 128, the recipe's dropout and label
smoothing (tasks.py), Adam with betas (0.9, 0.98) and gradients clipped to a global norm of 1,
batches of 64 sources. The learning-rate schedule is each system's own recommendation
(SCHEDULES). The bridges are each toolkit's own: attnlab
tanh(W h) for the decoder's state and cell, Joey NMT tanh(W h + b) for both, OpenNMT-py
relu(W h + b) on each direction's final state and cell.

OpenNMT-py and Joey NMT read YAML files written here (`opennmt_config`, `joey_config`); attnlab
reads its recipe with command-line overrides (`attnlab_flags`). Nothing here is copied from
the toolkits' example configurations: every key is set from the matched values above.
"""

from __future__ import annotations

import dataclasses

from benchmarks.peers import export

EMBED_DIM = 128
ENCODER_UNITS_PER_DIRECTION = 128
DECODER_UNITS = 256
# attnlab gives each encoder direction half the decoder's units (docs/design.md, Encoder).
assert DECODER_UNITS == 2 * ENCODER_UNITS_PER_DIRECTION
BATCH_SOURCES = 64
ADAM_BETAS = (0.9, 0.98)
CLIP_NORM = 1.0
PEER_LEARNING_RATE = 1e-3  # Adam's rate as both toolkits' documentation recommends it
# Joey NMT's plateau schedule, at the defaults of its TrainConfig (its scheduler builder has
# others of its own, 0.1 and 10, used only where the config names none).
JOEY_PLATEAU = {'scheduling': 'plateau', 'patience': 5, 'decrease_factor': 0.5}

SCHEDULES = {
  'attnlab': "the recipe's: Adam at its peak (3e-3 G2P, 2e-3 Bible) after its warm-up, cosine "
             'decay to the step cap',
  'opennmt-py': 'Adam 1e-3, constant (its default decay starts at step 50,000)',
  'joeynmt': 'Adam 1e-3, halved after 5 validations without a lower dev perplexity',
}


@dataclasses.dataclass(frozen=True)
class Plan:
  """How long and how often: the same for every system of one run of the command."""

  max_steps: int  # optimiser steps at most (the CPU budget usually ends a run first)
  every: int  # steps between checkpoints (and each system's own validation)
  log_every: int  # steps between training-speed lines
  seed: int = 0
  eval_sources: int = 0  # dev sources each in-loop validation decodes (0: all)


def opennmt_config(task, data: str, run: str, plan: Plan) -> dict:
  """onmt_build_vocab's and onmt_train's YAML for the matched network."""
  return {
    'save_data': f'{run}/data',
    'src_vocab': f'{run}/vocab.src',
    'tgt_vocab': f'{run}/vocab.tgt',
    'overwrite': True,
    'data': {
      'corpus_1': {
        'path_src': export.path(data, 'train', export.SOURCE),
        'path_tgt': export.path(data, 'train', export.TARGET),
      },
      'valid': {
        'path_src': export.path(data, 'dev', export.SOURCE),
        'path_tgt': export.path(data, 'dev', export.TARGET),
      },
    },
    'src_seq_length': task.max_length,
    'tgt_seq_length': task.max_length,
    'save_model': f'{run}/model',
    'save_checkpoint_steps': plan.every,
    'keep_checkpoint': -1,
    'valid_steps': plan.every,
    'train_steps': plan.max_steps,
    'report_every': plan.log_every,
    'seed': plan.seed,
    'encoder_type': 'brnn',  # enc_hid_size is split between the two directions
    'decoder_type': 'rnn',
    'rnn_type': 'LSTM',
    'enc_layers': 1,
    'dec_layers': 1,
    'enc_hid_size': 2 * ENCODER_UNITS_PER_DIRECTION,
    'dec_hid_size': DECODER_UNITS,
    'word_vec_size': EMBED_DIM,
    'global_attention': 'general',
    'input_feed': 1,
    'bridge': True,
    'dropout': [task.dropout],
    'label_smoothing': task.label_smoothing,
    'batch_type': 'sents',
    'batch_size': BATCH_SOURCES,
    'valid_batch_size': BATCH_SOURCES,
    **({'bucket_size': task.opennmt_bucket_size} if task.opennmt_bucket_size else {}),
    'optim': 'adam',
    'adam_beta1': ADAM_BETAS[0],
    'adam_beta2': ADAM_BETAS[1],
    'max_grad_norm': CLIP_NORM,
    'learning_rate': PEER_LEARNING_RATE,
  }


def joey_config(
  task, data: str, run: str, plan: Plan, *, beam_size: int = 1, checkpoint: str | None = None
) -> dict:
  """`python -m joeynmt train|translate`'s YAML; `beam_size` and `checkpoint` set what
  translate uses (training validates greedily whatever they are)."""
  testing = {
    'beam_size': beam_size,
    'batch_size': BATCH_SOURCES,
    'batch_type': 'sentence',
    'max_output_length': task.max_output,
    'eval_metrics': ['sequence_accuracy'],
  }
  if checkpoint:
    testing['load_model'] = checkpoint
  side = {'level': 'word', 'lowercase': False, 'max_length': task.max_length, 'voc_min_freq': 1}
  embeddings = {'embedding_dim': EMBED_DIM}
  return {
    'name': task.name,
    'model_dir': run,
    'use_cuda': False,
    'random_seed': plan.seed,
    'data': {
      'train': f'{data}/train',
      'dev': f'{data}/dev',
      'test': f'{data}/test',
      'dataset_type': 'plain',
      'src': dict(side, lang=export.SOURCE),
      'trg': dict(side, lang=export.TARGET),
    },
    'testing': testing,
    'training': {
      'optimizer': 'adam',
      'adam_betas': list(ADAM_BETAS),
      'learning_rate': PEER_LEARNING_RATE,
      **JOEY_PLATEAU,
      'clip_grad_norm': CLIP_NORM,
      'label_smoothing': task.label_smoothing,
      'batch_type': 'sentence',
      'batch_size': BATCH_SOURCES,
      'epochs': 1000,  # the step cap or the budget ends the run
      'updates': plan.max_steps,
      'validation_freq': plan.every,
      'logging_freq': plan.log_every,
      'keep_best_ckpts': -1,  # a checkpoint at every validation, all kept
      'print_valid_sents': [],
      'overwrite': True,
      'shuffle': True,
    },
    'model': {
      'encoder': {
        'type': 'recurrent',
        'rnn_type': 'lstm',
        'bidirectional': True,
        'num_layers': 1,
        'hidden_size': ENCODER_UNITS_PER_DIRECTION,
        'dropout': task.dropout,
        'embeddings': embeddings,
      },
      'decoder': {
        'type': 'recurrent',
        'rnn_type': 'lstm',
        'num_layers': 1,
        'hidden_size': DECODER_UNITS,
        'attention': 'luong',
        'input_feeding': True,
        'init_hidden': 'bridge',
        'dropout': task.dropout,
        'hidden_dropout': task.dropout,
        'embeddings': embeddings,
      },
    },
  }


def attnlab_flags(task, plan: Plan, batching: str, dtype: str = 'float32') -> list[str]:
  """`python -m attnlab.main`'s flags: the task's recipe at the matched network; `batching`
  is 'examples' (64 sources a step) or 'tokens' (the task's tokens_per_batch); `dtype` is
  model.dtype (float32 as the peers compute; bfloat16_matmuls as torch.autocast would)."""
  if batching == 'examples':
    data = ['--config.data.batching=examples', f'--config.data.global_batch_size={BATCH_SOURCES}']
  elif batching == 'tokens':
    data = ['--config.data.batching=tokens',
            f'--config.data.tokens_per_batch={task.tokens_per_batch}']
  else:
    raise ValueError(f'unknown batching {batching!r}; choose from examples, tokens')
  return [
    f'--config={task.config}',
    *data,
    '--config.model.encoder_layers=1',
    f'--config.model.dtype={dtype}',
    f'--config.model.embed_dim={EMBED_DIM}',
    f'--config.model.hidden_size={DECODER_UNITS}',  # its encoder: H/2 units per direction
    f'--config.model.dropout={task.dropout}',
    f'--config.train.label_smoothing={task.label_smoothing}',
    f'--config.optim.b1={ADAM_BETAS[0]}',
    f'--config.optim.b2={ADAM_BETAS[1]}',
    f'--config.optim.clip_norm={CLIP_NORM}',
    f'--config.seed={plan.seed}',
    f'--config.train.num_steps={plan.max_steps}',
    f'--config.train.eval_every={plan.every}',
    f'--config.train.checkpoint_every={plan.every}',
    '--config.train.keep_checkpoints=100000',  # every checkpoint stays for the dev decodes
    f'--config.train.log_every={plan.log_every}',
    '--config.eval.search=greedy',  # validates as Joey NMT does; dev scores come from decodes
    f'--config.eval.max_examples={plan.eval_sources}',
    '--config.eval.num_heatmaps=0',
    '--config.eval.num_samples=0',
  ]
