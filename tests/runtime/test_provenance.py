"""Provenance: every process run of a training records the commit, libraries and devices, the
reports show it, and translation metrics carry sacrebleu's signature."""

import importlib.metadata
import json
import os
import subprocess
import types

import jax

from attnlab import bleu_scores
from attnlab.reporting import compute
from attnlab.rundir import layout
from attnlab.runtime import provenance


def test_git_state_names_the_commit_and_changes_to_tracked_code(tmp_path):
  def git(*args):
    return subprocess.run(['git', '-C', str(tmp_path), *args], check=True, capture_output=True,
                          text=True).stdout.strip()

  git('init', '-q')
  (tmp_path / 'a.txt').write_text('one\n')
  git('add', 'a.txt')
  git('-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-qm', 'first')
  head = git('rev-parse', 'HEAD')
  assert provenance.git_state(str(tmp_path)) == {'commit': head, 'dirty': False}
  (tmp_path / 'new.txt').write_text('untracked files do not count\n')
  assert provenance.git_state(str(tmp_path))['dirty'] is False
  (tmp_path / 'results').mkdir()
  (tmp_path / 'results' / 'sweep.json').write_text('{}\n')
  git('add', 'results/sweep.json')
  git('-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-qm', 'an archive')
  head = git('rev-parse', 'HEAD')
  (tmp_path / 'results' / 'sweep.json').write_text('{"trials": []}\n')
  assert provenance.git_state(str(tmp_path)) == {'commit': head, 'dirty': False}  # runs' output
  (tmp_path / 'a.txt').write_text('two\n')
  assert provenance.git_state(str(tmp_path)) == {'commit': head, 'dirty': True}
  assert provenance.git_state(str(tmp_path / 'missing')) == {}


def test_a_run_records_its_provenance_per_process_run(tiny_reverse_run):
  path = os.path.join(tiny_reverse_run, layout.PROVENANCE)
  with open(path, encoding='utf-8') as f:
    entries = [json.loads(line) for line in f]
  assert len(entries) == 1 and entries[0]['first_step'] == 0
  entry = entries[0]
  assert entry['libraries']['jax'] == importlib.metadata.version('jax')
  assert entry['libraries']['flax'] == importlib.metadata.version('flax')
  # the devices the run used: tiny_reverse_run sets parallel.num_devices=1
  assert entry['devices'] == {'platform': 'cpu', 'kind': jax.devices()[0].device_kind,
                              'count': 1, 'processes': 1}
  assert len(entry['attnlab']['commit']) == 40  # the tests run in a checkout
  line = provenance.one_line(entry)
  assert line.startswith(f"attnlab {entry['attnlab']['commit'][:8]}")
  assert f"jax {entry['libraries']['jax']}" in line
  assert line.endswith(f'1 x {jax.devices()[0].device_kind}')


def test_one_line_says_what_it_does_not_know():
  entry = {'attnlab': {}, 'python': '3.11.7', 'libraries': {'jax': '0.10.2'},
           'devices': {'platform': 'gpu', 'kind': 'NVIDIA H100', 'count': 8, 'processes': 2}}
  assert provenance.one_line(entry) == (
      'attnlab (not a git checkout) · Python 3.11.7 · jax 0.10.2 · 8 x NVIDIA H100')
  entry['attnlab'] = {'commit': 'a' * 40, 'dirty': True}
  assert provenance.one_line(entry).startswith('attnlab aaaaaaaa (with local changes) · ')


def test_the_sweep_report_lists_each_provenance_with_its_trials():
  def trial(name, commit):
    entry = {'attnlab': {'commit': commit, 'dirty': False}, 'python': '3.11.7',
             'libraries': {}, 'devices': {}}
    return types.SimpleNamespace(trial=types.SimpleNamespace(name=name), provenance=[entry])

  variants = [types.SimpleNamespace(finished=[trial('a', 'b' * 40), trial('b', 'b' * 40)]),
              types.SimpleNamespace(finished=[trial('c', 'c' * 40)])]
  lines = compute.provenance_lines(variants)
  assert lines[3:] == ['- attnlab bbbbbbbb · Python 3.11.7: 2 trial(s) (a, b)',
                       '- attnlab cccccccc · Python 3.11.7: 1 trial(s) (c)']
  none = [types.SimpleNamespace(finished=[types.SimpleNamespace(provenance=[])])]
  assert compute.provenance_lines(none) == []  # archives from before: reports unchanged


def test_translation_metrics_carry_sacrebleus_signature():
  out = bleu_scores.bleu_chrf(['a b c d e'], ['a b c d f'], signature=True)
  version = importlib.metadata.version('sacrebleu')
  assert out['sacrebleu'] == (
      f'BLEU nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:{version}; '
      f'chrF nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:{version}')
  assert set(bleu_scores.bleu_chrf(['a'], ['a'])) == {'bleu', 'chrf'}
