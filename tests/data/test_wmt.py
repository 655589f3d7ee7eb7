"""WMT'14 configs: train two steps end to end on TFDS mock data (no download, no TensorFlow)."""

import json
import os

import pytest
import sacrebleu
import tensorflow_datasets as tfds

from attnlab.config import run as config_lib
from attnlab.data import load_task
from attnlab.data.sentencepiece_vocab import SentencePieceVocab, load_vocab
from attnlab.data.tasks import DataError
from attnlab.train import loop as train
from configs import wmt14_de_en, wmt14_en_fr


def smoke(module, tmp_path):
  c = module.get_config('smoke')
  with c.unlocked():
    c.task.data_dir = str(tmp_path / 'tfds')
    c.eval.max_examples = 16
    c.eval.num_heatmaps = 0  # an untrained model may emit PAD, which heatmaps.py rejects
  return c


@pytest.mark.slow
def test_de_en_trains_two_steps_on_mock_data(tmp_path):
  workdir = str(tmp_path / 'run')
  with tfds.testing.mock_data(num_examples=64):
    train.train_and_evaluate(smoke(wmt14_de_en, tmp_path), workdir)
  with open(os.path.join(workdir, 'final_metrics.json')) as f:
    final = json.load(f)
  assert final['step'] == 2
  assert {'bleu', 'chrf', 'bleu_by_length'} <= set(final['test'])
  # Recomputed by sacrebleu from the run's detokenized outputs and raw references.
  with open(os.path.join(workdir, 'predictions_test.jsonl'), encoding='utf-8') as f:
    predictions = [json.loads(line) for line in f]
  assert len(predictions) == final['test']['num_examples'] == 16
  hyps, refs = [p['hypothesis'] for p in predictions], [p['reference'] for p in predictions]
  assert final['test']['bleu'] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score,
                                                abs=1e-9)
  assert final['test']['chrf'] == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score,
                                                abs=1e-9)
  assert sum(b['count'] for b in final['test']['bleu_by_length']) == len(predictions)
  # The SentencePiece models travel with the run directory.
  for side in ('source', 'target'):
    assert isinstance(load_vocab(os.path.join(workdir, f'{side}_vocab.json')), SentencePieceVocab)
  assert os.listdir(tmp_path / 'tfds' / 'attnlab_sentencepiece')


def test_en_fr_reads_the_fr_en_builder_in_the_right_direction(tmp_path):
  read = []

  def fake_source(builder, split, **kwargs):
    read.append((builder.name, builder.builder_config.name, split))
    return [{'en': f'english {split} {i}', 'fr': f'français {split} {i}'} for i in range(8)]

  with tfds.testing.mock_data(as_data_source_fn=fake_source):
    task = load_task(config_lib.parse(smoke(wmt14_en_fr, tmp_path)))
    assert task.split('eval')[3] == {
      'source': 'english validation 3',
      'target': 'français validation 3',
      'index': 3,
    }
  assert task.name == 'wmt14_translate/en-fr'
  assert read == [('wmt14_translate', 'fr-en', 'train'), ('wmt14_translate', 'fr-en', 'validation')]
  assert 'ç' in task.target_vocab.decode(task.target_vocab.encode('français'))
  # Byte fallback: characters unseen in training round-trip instead of becoming '⁇'.
  for vocab in (task.source_vocab, task.target_vocab):
    assert vocab.decode(vocab.encode('%(count)d → 5€')) == '%(count)d → 5€'


def test_language_pairs_are_checked(tmp_path):
  c = smoke(wmt14_de_en, tmp_path)
  with c.unlocked():
    c.task.source_language = 'xx'
  with pytest.raises(DataError, match='task.source_language=.*choose from .*de'):
    load_task(c)
  with c.unlocked():
    c.task.source_language, c.task.target_language = 'de', 'fr'
  with pytest.raises(DataError, match='no pair de->fr; choose a direction of .*de-en'):
    load_task(c)


@pytest.mark.parametrize('module', [wmt14_de_en, wmt14_en_fr])
def test_configs_parse(module):
  cfg = config_lib.parse(module.get_config())
  assert (cfg.model.hidden_size, cfg.model.encoder_layers, cfg.eval.search) == (1000, 4, 'beam')
  assert config_lib.parse(module.get_config('local_p')).model.attention.window == 'local_p'
  with pytest.raises(ValueError, match='choose from smoke, local_p'):
    module.get_config('nope')
