"""benchmarks/peers/recipes.py: the YAML configs parse back to the matched network as each
toolkit reads its keys; attnlab's overrides build a valid config of the same sizes."""

import os

import pytest
import yaml
from support.config_builders import parse_command_line
from support.peer_tasks import BIBLE, G2P, PLAN

from attnlab.config import run as run_config
from attnlab.runtime import compilation_cache
from benchmarks.peers import recipes, systems


def _yaml_round_trip(config: dict) -> dict:
  return yaml.safe_load(yaml.safe_dump(config))


def test_opennmt_yaml_is_the_matched_network():
  c = _yaml_round_trip(recipes.opennmt_config(G2P, '/d', '/r', PLAN))
  # brnn splits enc_hid_size between the directions: 128 units each.
  assert c['encoder_type'] == 'brnn' and c['enc_hid_size'] == 256 and c['enc_layers'] == 1
  assert c['decoder_type'] == 'rnn' and c['rnn_type'] == 'LSTM' and c['dec_hid_size'] == 256
  assert c['word_vec_size'] == 128 and c['global_attention'] == 'general' and c['input_feed'] == 1
  assert c['batch_size'] == 64 and c['batch_type'] == 'sents'
  assert c['optim'] == 'adam' and (c['adam_beta1'], c['adam_beta2']) == (0.9, 0.98)
  assert c['max_grad_norm'] == 1.0 and c['dropout'] == [0.2] and c['label_smoothing'] == 0.1
  assert c['data']['corpus_1'] == {'path_src': '/d/train.src', 'path_tgt': '/d/train.trg'}
  assert c['data']['valid'] == {'path_src': '/d/dev.src', 'path_tgt': '/d/dev.trg'}
  assert (c['train_steps'], c['save_checkpoint_steps'], c['valid_steps']) == (300, 100, 100)
  assert c['report_every'] == 20 and c['keep_checkpoint'] == -1 and c['seed'] == 3
  assert c['src_seq_length'] == c['tgt_seq_length'] == 32
  bible = _yaml_round_trip(recipes.opennmt_config(BIBLE, '/d', '/r', PLAN))
  assert bible['dropout'] == [0.3] and bible['label_smoothing'] == 0.0  # configs/bible.py's
  assert bible['src_seq_length'] == bible['tgt_seq_length'] == 96
  assert bible['bucket_size'] == 16_384 and 'bucket_size' not in c  # G2P: OpenNMT-py's default


def test_joey_yaml_is_the_matched_network():
  c = _yaml_round_trip(recipes.joey_config(G2P, '/d', '/r/model', PLAN))
  enc, dec = c['model']['encoder'], c['model']['decoder']
  # Joey NMT's hidden_size is per direction for a bidirectional encoder.
  assert enc['type'] == 'recurrent' and enc['rnn_type'] == 'lstm' and enc['bidirectional']
  assert enc['hidden_size'] == 128 and enc['num_layers'] == 1
  assert dec['type'] == 'recurrent' and dec['hidden_size'] == 256 and dec['num_layers'] == 1
  assert dec['attention'] == 'luong' and dec['input_feeding'] and dec['init_hidden'] == 'bridge'
  assert enc['embeddings'] == dec['embeddings'] == {'embedding_dim': 128}
  t = c['training']
  assert t['batch_size'] == 64 and t['batch_type'] == 'sentence' and t['optimizer'] == 'adam'
  assert t['adam_betas'] == [0.9, 0.98] and t['clip_grad_norm'] == 1.0
  assert t['learning_rate'] == 1e-3 and t['scheduling'] == 'plateau'
  assert (t['updates'], t['validation_freq'], t['logging_freq']) == (300, 100, 20)
  assert t['keep_best_ckpts'] == -1 and t['validation_freq'] % t['logging_freq'] == 0
  # Joey NMT reads PREFIX.LANG: the exported dev.src / dev.trg.
  assert (c['data']['dev'], c['data']['src']['lang'], c['data']['trg']['lang']) == (
    '/d/dev',
    'src',
    'trg',
  )
  assert c['data']['src']['level'] == c['data']['trg']['level'] == 'word'
  assert c['testing']['beam_size'] == 1 and 'load_model' not in c['testing']
  beam = _yaml_round_trip(
    recipes.joey_config(G2P, '/d', '/r', PLAN, beam_size=5, checkpoint='/r/7.ckpt')
  )
  assert beam['testing']['beam_size'] == 5 and beam['testing']['load_model'] == '/r/7.ckpt'
  bible = _yaml_round_trip(recipes.joey_config(BIBLE, '/d', '/r/model', PLAN))
  assert bible['model']['encoder']['dropout'] == bible['model']['decoder']['dropout'] == 0.3
  assert bible['training']['label_smoothing'] == 0.0 and bible['name'] == 'bible'
  assert bible['data']['src']['max_length'] == 96 and bible['testing']['max_output_length'] == 192


@pytest.mark.parametrize('batching', ['examples', 'tokens'])
def test_attnlab_flags_build_the_matched_network(batching):
  config = parse_command_line(recipes.attnlab_flags(G2P, PLAN, batching))
  cfg = run_config.parse(config)  # every override is a valid key and value
  m = cfg.model
  assert (m.encoder_layers, m.decoder_layers, m.bidirectional) == (1, 1, True)
  assert m.hidden_size == 256 and m.embed_dim == 128 and m.dtype == 'float32'  # 128 a direction
  assert (m.attention.score, m.attention.timing, m.attention.input_feeding) == (
    'general',
    'luong',
    True,
  )
  assert (cfg.optim.name, cfg.optim.b1, cfg.optim.b2, cfg.optim.clip_norm) == (
    'adam',
    0.9,
    0.98,
    1.0,
  )
  assert (cfg.train.num_steps, cfg.train.checkpoint_every, cfg.train.eval_every) == (300, 100, 100)
  assert cfg.seed == 3 and cfg.data.batching == batching
  assert (m.dropout, cfg.train.label_smoothing, cfg.task.name) == (0.2, 0.1, 'cmudict_g2p')
  if batching == 'examples':
    assert cfg.data.global_batch_size == 64
  else:
    assert cfg.data.tokens_per_batch == 640
  mixed = run_config.parse(parse_command_line(
    recipes.attnlab_flags(G2P, PLAN, batching, 'bfloat16_matmuls')))
  assert mixed.model.dtype == 'bfloat16_matmuls' and mixed.model.hidden_size == 256
  bible = run_config.parse(parse_command_line(recipes.attnlab_flags(BIBLE, PLAN, batching)))
  sizes = (bible.model.hidden_size, bible.model.embed_dim, bible.model.encoder_layers)
  assert sizes == (256, 128, 1)
  assert (bible.model.dropout, bible.train.label_smoothing) == (0.3, 0.0)
  assert bible.task.name == 'bible' and bible.data.max_source_length == 96
  if batching == 'tokens':
    assert bible.data.tokens_per_batch == 2624


def test_every_attnlab_row_trains_its_batching_and_dtype(tmp_path):
  rows = {}
  for name in systems.SYSTEM_NAMES:
    system = systems.build(name, G2P, str(tmp_path / 'venv'), str(tmp_path), str(tmp_path), PLAN)
    assert system.name == name and system.run == str(tmp_path / name)
    if name in systems.ATTNLAB_ROWS:
      cfg = run_config.parse(parse_command_line(system.train_command()[3:]))
      rows[name] = (cfg.data.batching, cfg.model.dtype)
      # Compiles as a first run does: a cache inside the run folder that training starts without.
      cache = system.env[compilation_cache.ENV]
      assert os.path.dirname(cache) == system.run and cache != compilation_cache.default_dir()
  assert rows == {'attnlab': ('examples', 'float32'), 'attnlab-tokens': ('tokens', 'float32'),
                  'attnlab-tokens-bf16': ('tokens', 'bfloat16_matmuls')}
  with pytest.raises(ValueError, match='unknown system'):
    systems.build('attnlab-fp8', G2P, '', '', str(tmp_path), PLAN)
