"""Fixtures of the sweep tests: a stand-in for the training command."""

import sys

import pytest

# The sweep runner tests run their trials through this interpreter.
FAKE_MAIN = """\
#!{python}
# Stands in for `python -m attnlab.main`: saves and logs step 2, then finishes (after
# FAKE_SECONDS), fails or hangs.
import json, os, sys, time
args = dict(a.split('=', 1) for a in sys.argv[3:])
workdir = args['--workdir']
seed = args['--config.seed']
if seed == '13':
  print('I1129 noise before the error')
  print('Traceback (most recent call last):')
  print('ValueError: seed 13 is unlucky')
  sys.exit(1)
# The checkpoint first: a test that interrupts once step 2 is logged finds it to resume from.
os.makedirs(os.path.join(workdir, 'checkpoints', '2'), exist_ok=True)
with open(os.path.join(workdir, 'metrics.jsonl'), 'a') as f:
  f.write(json.dumps({{'step': 2, 'split': 'train'}}) + '\\n')
if os.environ.get('FAKE_HANG') == '1':
  time.sleep(120)
time.sleep(float(os.environ.get('FAKE_SECONDS', '0')))  # a trial that takes a while
final = {{'step': 4, 'test': {{'sequence_accuracy': 0.5}}}}
if seed == '1':  # a run that selected on WER and stopped early
  final = {{'step': 3, 'trained_steps': 4, 'selection': {{'metric': 'wer', 'stopped_early': True}},
           'test': {{'wer': 0.25, 'sequence_accuracy': 0.75}}}}
with open(os.path.join(workdir, 'final_metrics.json'), 'w') as f:
  json.dump(final, f)
"""


@pytest.fixture
def fake_python(tmp_path):
  path = tmp_path / 'fake_python'
  path.write_text(FAKE_MAIN.format(python=sys.executable))
  path.chmod(0o755)
  return str(path)
