"""`attnlab.load_run`: a tiny trained run answers new inputs from Python.

The session's tiny runs (conftest.py: reverse:smoke, 4 steps, an RNN and a Transformer). The
checks: n-best lists are distinct, sorted and headed by the 1-best, per-head weights average to
what search used, compilation is per padded shape, a save in progress is left alone, and the
decode speed benchmark times the decoder and the whole command.
"""

import json
import shutil

import jax
import numpy as np
import pytest
from support.smoke_runs import copy_run, predictions

import attnlab
from attnlab.data import load_task
from attnlab.decoding import runs
from attnlab.errors import UserError
from attnlab.rundir import layout
from configs import reverse


@pytest.fixture(scope='module')
def rnn_run(tiny_reverse_run):
  return tiny_reverse_run  # conftest.py: reverse:smoke, 4 steps, sources of 3-6 symbols


@pytest.fixture(scope='module')
def transformer_run(tiny_transformer_run):
  return tiny_transformer_run  # conftest.py: the same with a 2-layer, 2-head Transformer


def test_nbest_lists_are_distinct_sorted_and_start_with_the_1best(rnn_run):
  run = attnlab.load_run(rnn_run)
  inputs = [r['source'] for r in predictions(rnn_run)[:6]]
  best = run.decode(inputs, search='beam', beam_size=4)
  lists = run.decode(inputs, nbest=4, search='beam', beam_size=4)
  for one, many in zip(best, lists, strict=True):
    assert len(many.hypotheses) == 4
    assert len({tuple(h.ids) for h in many.hypotheses}) == 4, 'distinct hypotheses'
    scores = [h.score for h in many.hypotheses]
    assert scores == sorted(scores, reverse=True)
    assert many.output == one.output and many.hypotheses[0].ids == one.hypotheses[0].ids
    assert many.hypotheses[0].score == pytest.approx(one.hypotheses[0].score, abs=1e-6)
  with pytest.raises(UserError, match='--nbest=5 needs --beam_size >= 5'):
    run.decode(inputs, nbest=5, search='beam', beam_size=4)
  with pytest.raises(UserError, match='needs --search=beam'):
    run.decode(inputs, nbest=2, search='greedy')
  with pytest.raises(UserError, match=r'^--nbest=0 must be at least 1 \(hypotheses per input\)$'):
    run.decode(inputs, nbest=0)
  with pytest.raises(UserError, match='^--length_penalty=nan must be a finite number'):
    run.decode(inputs, search='beam', length_penalty=float('nan'))


@pytest.mark.slow
def test_api_returns_attention_and_per_head_weights_that_average_to_it(transformer_run):
  run = attnlab.load_run(transformer_run, checkpoint='latest')
  (result,) = run.decode(['abcde'], heads=True)
  hyp = result.hypotheses[0]
  assert result.source_tokens == ['a', 'b', 'c', 'd', 'e', '<eos>']
  assert hyp.attention.shape == (len(hyp.tokens), 6)
  np.testing.assert_allclose(hyp.attention.sum(-1), 1.0, atol=1e-5)
  assert sorted(hyp.heads) == ['layer 0', 'layer 1']
  assert hyp.heads['layer 1'].shape == (2, len(hyp.tokens), 6)
  # Search's weights are the last layer's mean over heads (models/transformer.py).
  np.testing.assert_allclose(hyp.heads['layer 1'].mean(axis=0), hyp.attention, atol=1e-5)


@pytest.mark.slow
def test_per_head_weights_of_a_multi_head_rnn_average_to_the_searched_attention():
  import jax

  from attnlab.config import run as config_lib
  from attnlab.data import load_task
  from attnlab.models.factory import build_model

  config = reverse.get_config('smoke')
  with config.unlocked():
    config.model.attention.num_heads = 4
    config.model.attention.score = 'scaled_dot'
  cfg = config_lib.parse(config)
  task = load_task(cfg)
  source_vocab, target_vocab = task.source_vocab, task.target_vocab
  model = build_model(cfg.model, source_vocab.size, target_vocab.size)
  params = runs.abstract_params(model, cfg)  # shapes; random values below (no training)
  leaves, tree = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(1), len(leaves))
  params = tree.unflatten(
      [jax.random.normal(k, p.shape, p.dtype) for k, p in zip(keys, leaves, strict=True)])
  run = runs.TrainedRun(workdir='', cfg=cfg, config_dict={}, model=model, params=params, step=0,
                        note='', source_vocab=source_vocab, target_vocab=target_vocab)
  results = run.decode(['abcdefg', 'ba'], heads=True, nbest=2, search='beam', beam_size=2)
  for result in results:
    for hyp in result.hypotheses:
      (weights_NxTxS,) = hyp.heads.values()
      assert weights_NxTxS.shape == (4, len(hyp.tokens), len(result.source_tokens))
      np.testing.assert_allclose(weights_NxTxS.mean(axis=0), hyp.attention, atol=1e-5)
      assert np.abs(weights_NxTxS - hyp.attention).max() > 1e-3, 'heads differ from the mean'


@pytest.mark.slow
def test_compiles_once_per_padded_shape(rnn_run):
  run = runs.load_run(rnn_run, checkpoint='latest')
  decoder = run.decoder(batch_size=16)
  letters = 'abcdefghijklmnopqrst'
  lines = [letters[:n] for n in (3, 5, 12) for _ in range(40)]  # 4, 6, 13 tokens with EOS
  results = decoder.decode(lines)
  assert [r.input for r in results] == lines
  # Padded to 8 tokens: 80 lines, 5 batches of 16 rows; to 16: 40 lines, 3 batches of 16.
  assert decoder.compilations['search'] == 2
  decoder.decode(lines[::-1] + lines[:7] + ['abc'])
  assert decoder.compilations['search'] == 2  # remainders reuse the 16-row shapes
  fresh = run.decoder(batch_size=16, length_penalty=0.5)  # another decoder: nothing compiled
  assert fresh.decode(['abc'])[0].output == decoder.decode(['abc'])[0].output
  # One row a device: the devices share every batch (decoding/spread.py).
  assert fresh.compilations['search'] == 1 and fresh.compiled_rows[8] == {jax.local_device_count()}


def test_reading_a_run_leaves_a_save_in_progress_alone(rnn_run, tmp_path):
  run = copy_run(rnn_run, tmp_path)
  # What orbax writes while a training still running in this workdir saves step 6.
  saving = [run / 'checkpoints' / '6.orbax-checkpoint-tmp-1', run / 'checkpoints' / 'best' /
            '6.orbax-checkpoint-tmp-2']
  for folder in saving:
    folder.mkdir()
    (folder / 'part').write_text('half a checkpoint')
  assert runs.load_run(str(run)).step == 4
  assert [(f / 'part').read_text() for f in saving] == ['half a checkpoint'] * 2


@pytest.mark.slow
def test_decode_speed_benchmark_times_the_decoder_and_the_command(rnn_run, tmp_path):
  from benchmarks import decode_speed

  result = decode_speed.main([f'--workdir={rnn_run}', f'--out={tmp_path}', '--machine=m'])
  words = len(load_task(runs.load_run(rnn_run).cfg).split('test'))
  assert set(result['rows']) == {'greedy', 'beam5'}
  for row in result['rows'].values():
    assert row['words'] == words and row['words_per_s'] > 0 and row['command_s'] > 0
    assert row['compilations'] >= 1 and row['mean_output_tokens'] >= 1
  assert '| greedy |' in (tmp_path / 'decode_m.md').read_text()
  assert json.loads((tmp_path / 'decode_m.json').read_text())['rows'] == result['rows']



def test_decode_speed_decodes_a_best_only_run_and_never_trains_into_a_users_folder(
    rnn_run, tmp_path, capsys, monkeypatch):
  from benchmarks import decode_speed

  trained = []
  monkeypatch.setattr(decode_speed, 'train_run', lambda *a: trained.append(a))
  mine = tmp_path / 'mine'
  mine.mkdir()
  (mine / 'notes.txt').write_text('my own file')
  with pytest.raises(SystemExit) as exit_info:
    decode_speed.main([f'--workdir={mine}', f'--out={tmp_path}'])
  assert exit_info.value.code == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith(f'error: --workdir={mine} holds no checkpoint') and '\n' not in err
  assert [p.name for p in mine.iterdir()] == ['notes.txt'] and not trained

  # A shipped run keeps only its best checkpoint (results/g2p): decoded as it is, not trained.
  shipped = tmp_path / 'shipped'
  shutil.copytree(rnn_run, shipped)
  for step in layout.saved_steps(str(shipped)):
    shutil.rmtree(shipped / 'checkpoints' / str(step))
  assert not layout.saved_steps(str(shipped)) and layout.saved_steps(str(shipped), best=True)
  loaded = []

  def load_run(workdir, checkpoint):
    loaded.append(workdir)
    raise RuntimeError('loaded')  # far enough: the decoding itself is the test above

  monkeypatch.setattr(decode_speed.runs, 'load_run', load_run)
  with pytest.raises(RuntimeError, match='loaded'):
    decode_speed.main([f'--workdir={shipped}', f'--out={tmp_path}'])
  assert loaded == [str(shipped)] and not trained
