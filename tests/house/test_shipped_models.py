"""The trained models shipped in results/ (attnlab.run_report --model): each opens as a run
directory, decodes its archived test inputs as its test predictions say, and those
predictions give the test metric its report publishes."""

import json
import os

import pytest
import sacrebleu
from support import REPO

import attnlab
from attnlab.explore import api as explore_api
from attnlab.rundir import layout

RESULTS = os.path.join(REPO, 'results')
SHIPPED = ('bible', 'dates', 'g2p')
SAMPLE = 16  # test inputs decoded again per model


def _folder(name: str) -> str:
  return os.path.join(RESULTS, name)


def _predictions(name: str) -> list[dict]:
  with layout.open_text(os.path.join(_folder(name), layout.TEST_PREDICTIONS)) as f:
    return [json.loads(line) for line in f]


def _final(name: str) -> dict:
  with open(os.path.join(_folder(name), layout.FINAL_METRICS_FILE)) as f:
    return json.load(f)


def test_every_results_folder_with_a_model_is_checked_here():
  found = sorted(
    name for name in os.listdir(RESULTS)
    if os.path.isdir(layout.best_checkpoint_dir(_folder(name)))
  )
  assert found == sorted(SHIPPED)


@pytest.mark.parametrize('name', SHIPPED)
def test_its_predictions_give_its_published_test_metric(name):
  test, predictions = _final(name)['test'], _predictions(name)
  assert len(predictions) == test['num_examples']
  correct = [p['correct'] for p in predictions]
  accuracy = sum(correct) / len(correct)
  assert accuracy == pytest.approx(test['sequence_accuracy'], abs=1e-12)
  if 'wer' in test:  # G2P: a word is wrong unless its whole pronunciation is one of CMUdict's
    assert 1 - accuracy == pytest.approx(test['wer'], abs=1e-12)
  if 'bleu' in test:  # sacrebleu's defaults: 13a tokenizer, exponential smoothing
    hypotheses = [p['hypothesis'] for p in predictions]
    references = [[p['reference'] for p in predictions]]
    bleu = sacrebleu.corpus_bleu(hypotheses, references).score
    assert bleu == pytest.approx(test['bleu'], abs=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize('name', SHIPPED)
def test_it_decodes_its_test_inputs_as_its_predictions_say(name):
  run = attnlab.load_run(_folder(name))
  assert (run.step, run.note) == (_final(name)['step'], '')
  sample = _predictions(name)[:SAMPLE]
  outputs = [d.output for d in run.decode([p['source'] for p in sample])]
  same = sum(o == p['hypothesis'] for o, p in zip(outputs, sample, strict=True))
  # Another CPU kind may round a float differently and turn a near-tie of the beam the other way.
  assert same >= SAMPLE - 1, list(zip(outputs, (p['hypothesis'] for p in sample), strict=True))


@pytest.mark.parametrize('name', SHIPPED)
def test_the_explorer_offers_its_archived_test_examples(name):
  examples, note = explore_api.read_examples(_folder(name))
  first = _predictions(name)[: explore_api.MAX_EXAMPLES]
  assert [e['source'] for e in examples] == [p['source'] for p in first]
  assert note.endswith(f'these are test examples ({_folder(name)}/predictions_test.jsonl)')
