"""benchmarks/peers (`python -m benchmarks.peers`) without the peers: everything it writes for
OpenNMT-py and Joey NMT, and reads back from them, checked against hand-written values.

* The exported G2P files line up with attnlab's task records (its own split of hand-made
  dictionary entries), one letter a token; the Bible's are SentencePiece pieces that a peer's
  output detokenizes back to the text.
* The YAML configs parse back to the matched network as each toolkit reads its keys; attnlab's
  overrides build a valid config of the same sizes.
* The log parsers read hand-written lines in each toolkit's documented format.
* WER, BLEU, the shared threshold (lower and higher is better), time to quality and the
  records' schema on hand-made curves.
* The supervisor stops a command tree at its CPU budget and stamps its checkpoints.
"""

import dataclasses
import json
import os
import subprocess
import sys

import pytest
import yaml
from support.config_builders import parse_command_line

from attnlab.config import run as run_config
from attnlab.data import cmudict_g2p
from attnlab.data.sentencepiece_vocab import train_sentencepiece
from attnlab.data.tasks import Task
from attnlab.data.vocab import Vocab
from benchmarks.peers import __main__ as peers_main
from benchmarks.peers import (
  environment,
  export,
  logs,
  measures,
  recipes,
  report,
  supervise,
  tasks,
)

G2P, BIBLE = tasks.TASKS['g2p'], tasks.TASKS['bible']

PLAN = recipes.Plan(max_steps=300, every=100, log_every=20, seed=3)
WORDS = [
  'tomato',
  "o'brien",
  'read',
  'cat',
  'dog',
  'bird',
  'fish',
  'lamp',
  'desk',
  'chair',
  'table',
  'sofa',
  'rug',
  'door',
  'wall',
  'roof',
  'tree',
  'leaf',
  'root',
  'stem',
  'seed',
  'rain',
  'snow',
  'wind',
  'cloud',
  'storm',
  'sun',
  'moon',
  'star',
  'sky',
  'hill',
  'lake',
  'river',
  'sea',
  'sand',
  'rock',
  'stone',
  'clay',
  'iron',
  'gold',
]


def _with_data(task: tasks.PeerTask, data: Task) -> tasks.PeerTask:
  """`task` reading `data` instead of its recipe's records."""
  copy = dataclasses.replace(task)
  copy.__dict__['data'] = data  # the cached_property's slot
  return copy


def _task() -> tasks.PeerTask:
  """A G2P task made by attnlab's own split of hand-made entries (no TFDS)."""
  entries = {w: [[c.upper() + '1' for c in w if c != "'"]] for w in WORDS}
  entries['tomato'] = [['T', 'AH0', 'M', 'EY1', 'T', 'OW2'], ['T', 'AH0', 'M', 'AA1', 'T', 'OW2']]
  entries['read'] = [['R', 'IY1', 'D'], ['R', 'EH1', 'D']]
  records, _ = cmudict_g2p.split_records(entries)
  splits = {'train': 'train', 'eval': 'validation', 'test': 'test'}
  vocab = Vocab.from_symbols(list("abcdefghijklmnopqrstuvwxyz'"), 'char')
  return _with_data(G2P, Task(
    'cmudict_g2p',
    vocab,
    vocab,
    {ours: (lambda r=records[theirs]: r) for ours, theirs in splits.items()},
  ))


SPANISH = ['En el principio creó Dios los cielos y la tierra.', 'Y la tierra estaba desordenada.',
           'Y dijo Dios: Sea la luz; y fue la luz.', 'Y vio Dios que la luz era buena.']
ENGLISH = ['In the beginning, God created the heavens and the earth.',
           'The earth was formless and empty.',
           'God said, "Let there be light," and there was light.',
           'God saw the light, and saw that it was good.']


def _bible() -> tasks.PeerTask:
  """A translation task of four hand-written verses, with SentencePiece vocabularies."""
  records = [{'source': s, 'target': t, 'index': i}
             for i, (s, t) in enumerate(zip(SPANISH, ENGLISH, strict=True))]
  splits = {'train': records[:2], 'eval': records[2:3], 'test': records[3:]}
  return _with_data(BIBLE, Task(
    'bible',
    train_sentencepiece(SPANISH * 20, 300),
    train_sentencepiece(ENGLISH * 20, 300),
    {name: (lambda r=rows: r) for name, rows in splits.items()},
  ))


def test_exported_files_are_the_task_records_line_by_line(tmp_path):
  task = _task()
  counts = export.export(task, str(tmp_path))
  assert counts == {
    'train': len(task.data.split('train')),
    'dev': len(task.data.split('eval')),
    'test': len(task.data.split('test')),
  }
  # Train has a line per pronunciation (tomato and read have two), dev and test one per word.
  two = sum(cmudict_g2p.split_of(w) == 'train' for w in ('tomato', 'read'))
  assert min(counts.values()) > 0 and sum(counts.values()) == len(WORDS) + two
  for split, name in export.SPLIT_FILES.items():
    records = task.data.split(split)
    src = export.read_lines(tmp_path / f'{name}.src')
    trg = export.read_lines(tmp_path / f'{name}.trg')
    words = export.read_lines(tmp_path / f'{name}.input')
    refs = [line.split('\t') for line in export.read_lines(tmp_path / f'{name}.refs')]
    assert len(src) == len(trg) == len(words) == len(refs) == len(records)
    for i, record in enumerate(records):
      assert src[i].split(' ') == list(record['source'])  # one letter a token
      assert ''.join(src[i].split()) == words[i] == record['source']
      assert trg[i] == record['target'] and refs[i] == record['references']
  lines = {}
  for name in export.SPLIT_FILES.values():
    for word, src, refs in zip(
      export.read_lines(tmp_path / f'{name}.input'),
      export.read_lines(tmp_path / f'{name}.src'),
      export.read_lines(tmp_path / f'{name}.refs'),
      strict=True,
    ):
      lines.setdefault(word, (src, refs.split('\t')))
  assert lines["o'brien"][0] == "o ' b r i e n"  # the apostrophe is a token of its own
  assert lines['tomato'] == ('t o m a t o', ['T AH M EY T OW', 'T AH M AA T OW'])  # no stress


def test_the_timed_decode_reads_the_test_split_repeated_and_the_start_up_one_source(tmp_path):
  task = dataclasses.replace(_task(), decode_repeats=3)
  task.__dict__['data'] = _task().data
  counts = peers_main._export(task, str(tmp_path), None)
  for kind in (export.SOURCE, export.INPUT, export.REFERENCES):
    test = export.read_lines(export.path(str(tmp_path), 'test', kind))
    assert len(test) == counts['test']
    assert export.read_lines(export.path(str(tmp_path), peers_main.ONE, kind)) == test[:1]
    assert export.read_lines(export.path(str(tmp_path), peers_main.TIMED, kind)) == test * 3


def test_export_limits_each_split(tmp_path):
  task = _task()
  counts = export.export(task, str(tmp_path), {'train': 5, 'eval': 1})
  assert counts == {'train': 5, 'dev': 1, 'test': len(task.data.split('test'))}
  assert len(export.read_lines(tmp_path / 'train.refs')) == 5


def test_bible_files_are_pieces_that_detokenize_to_the_verses(tmp_path):
  task = _bible()
  assert export.export(task, str(tmp_path)) == {'train': 2, 'dev': 1, 'test': 1}
  src = export.read_lines(tmp_path / 'train.src')
  trg = export.read_lines(tmp_path / 'train.trg')
  assert export.read_lines(tmp_path / 'train.input') == SPANISH[:2]
  assert export.read_lines(tmp_path / 'test.refs') == ENGLISH[3:]
  # A piece a token, as attnlab's vocabularies cut the verse; '▁' marks a word's start.
  assert src[0].split(' ') == task.data.source_vocab.pieces(SPANISH[0])
  assert src[0].startswith('▁') and ' ' not in ''.join(src[0].split(' '))
  # A peer that writes the target pieces back is scored on the text they spell.
  assert task.text(trg, pieces=True) == ENGLISH[:2]
  assert task.text(ENGLISH[:2], pieces=False) == ENGLISH[:2]  # attnlab writes text
  assert task.score(ENGLISH[:2], ENGLISH[:2]) == pytest.approx(100.0)
  assert task.score(['The earth was empty.'], ENGLISH[1:2]) < 50


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
  bible = run_config.parse(parse_command_line(recipes.attnlab_flags(BIBLE, PLAN, batching)))
  sizes = (bible.model.hidden_size, bible.model.embed_dim, bible.model.encoder_layers)
  assert sizes == (256, 128, 1)
  assert (bible.model.dropout, bible.train.label_smoothing) == (0.3, 0.0)
  assert bible.task.name == 'bible' and bible.data.max_source_length == 96
  if batching == 'tokens':
    assert bible.data.tokens_per_batch == 2624


def test_log_parsers_read_each_toolkits_lines():
  onmt = [
    '[2024-03-20 10:00:01,000 INFO] Starting training on CPU, could be very slow',
    '[2024-03-20 10:00:09,000 INFO] Step 20/  300; acc: 11.2; ppl: 40.1; xent: 3.7; '
    'lr: 0.00100; sents:    1280; bsz:   10/   9/64; 610/ 540 tok/s;      9 sec;',
    '[2024-03-20 10:00:14,000 INFO] Step 40/  300; acc: 30.5; ppl: 12.3; xent: 2.5; '
    'lr: 0.00100; sents:    1280; bsz:   10/   9/64; 6100/5400 tok/s;     14 sec;',
    '[2024-03-20 10:00:15,000 INFO] Validation perplexity: 10.2',
    '[2024-03-20 10:00:20,000 INFO] Step 60/  300; acc: 41.0; ppl:  8.0; xent: 2.1; '
    'lr: 0.00100; sents:    1280; bsz:   10/   9/64; 6500/5800 tok/s;     20 sec;',
  ]
  assert logs.opennmt_windows(onmt) == [(20, 540.0), (40, 5400.0), (60, 5800.0)]
  joey = [
    '2024-03-20 10:00:01,000 - INFO - joeynmt.training - EPOCH 1',
    '2024-03-20 10:00:09,000 - INFO - joeynmt.training - Epoch   1, Step:       20, Batch '
    'Loss:    35.123456, Batch Acc: 0.110000, Tokens per Sec:      480, Lr: 0.001000',
    '2024-03-20 10:00:14,000 - INFO - joeynmt.training - Epoch   1, Step:       40, Batch '
    'Loss:    20.000000, Batch Acc: 0.300000, Tokens per Sec:     5200, Lr: 0.001000',
    '2024-03-20 10:00:15,000 - INFO - joeynmt.prediction - Evaluation result (greedy): '
    'sequence_accuracy:   0.00, loss:  17.86, ppl:  10.11, acc:   0.24, 0.0000[sec]',
  ]
  assert logs.joey_windows(joey) == [(20, 480.0), (40, 5200.0)]
  attnlab = [
    json.dumps({'step': 20, 'split': 'train', 'loss': 3.0, 'tokens_per_sec': 300.0}),
    json.dumps({'step': 20, 'split': 'eval', 'wer': 0.9}),
    '',
    json.dumps({'step': 40, 'split': 'train', 'loss': 2.0, 'tokens_per_sec': 7000.0}),
  ]
  assert logs.attnlab_windows(attnlab) == [(20, 300.0), (40, 7000.0)]


def test_steady_rate_is_the_median_after_the_first_window():
  assert logs.steady_rate([(1, 10.0), (2, 500.0), (3, 700.0), (4, 100.0)]) == 500.0
  assert logs.steady_rate([(1, 10.0), (2, 500.0), (3, 700.0)]) == 600.0
  assert logs.steady_rate([(1, 10.0)]) is None


def test_wer_counts_a_word_right_when_it_matches_any_pronunciation():
  refs = ['T AH M EY T OW\tT AH M AA T OW', 'K AE T', 'D AO G']
  assert G2P.score(['T AH M AA T OW', 'K AE T', 'D AA G'], refs) == pytest.approx(100 / 3)
  assert G2P.score(['', 'K AE T', 'D AO G'], refs) == pytest.approx(100 / 3)
  assert G2P.text(['K AE T'], pieces=True) == ['K AE T']  # phonemes are tokens as they are
  with pytest.raises(ValueError, match='2 output lines for 3 references'):
    G2P.score(['K AE T', 'D AO G'], refs)


def _curve(*points):
  return [measures.Point(step, wall, cpu, score) for step, wall, cpu, score in points]


def test_threshold_time_to_quality_and_records():
  fast = _curve((100, 50, 90, 40.0), (200, 100, 180, 24.9), (300, 150, 270, 20.0))
  slow = _curve((100, 80, 150, 45.0), (200, 160, 300, 30.04), (300, 240, 450, 31.0))
  threshold = measures.shared_threshold(G2P, {'fast': fast, 'slow': slow})
  assert threshold == 30.1  # slow's best WER 30.04, rounded up: both reach it
  assert measures.first_reaching(G2P, fast, threshold).step == 200
  assert measures.first_reaching(G2P, slow, threshold).step == 200
  assert measures.shared_threshold(G2P, {'fast': fast, 'none': []}) is None
  assert measures.inputs_per_s(1000, 12.0, 2.0) == 100.0
  assert measures.inputs_per_s(1000, 2.0, 2.0) is None
  # Higher is better for BLEU: the loosest best is the lowest, rounded down.
  up = _curve((100, 50, 90, 10.0), (200, 100, 180, 22.36), (300, 150, 270, 21.0))
  late = _curve((100, 80, 150, 5.0), (200, 160, 300, 18.0), (300, 240, 450, 25.0))
  assert measures.shared_threshold(BIBLE, {'up': up, 'late': late}) == 22.3
  assert measures.first_reaching(BIBLE, up, 22.3).step == 200
  assert measures.first_reaching(BIBLE, late, 22.3).step == 300
  assert measures.best(BIBLE, up).step == 200 and measures.best(G2P, up).step == 100

  decodes = {
    'greedy': {'inputs_per_s': 100.0, 'command_s': 12.0, 'test_score': 25.0},
    'beam5': {'inputs_per_s': None, 'command_s': 20.0, 'test_score': 24.0},
  }
  records = measures.system_records(
    G2P, 'fast', 'm1', points=fast, threshold=threshold, speed=5000.0, decodes=decodes
  )
  units = measures.measures(G2P)
  assert all(tuple(r) == measures.RECORD_KEYS for r in records)
  assert all(r['unit'] == units[r['measure']] and r['machine'] == 'm1' and r['task'] == 'g2p'
             for r in records)
  got = {r['measure']: r['value'] for r in records}
  assert got == {
    'train_target_tokens_per_s': 5000.0,
    'wall_s_to_threshold': 100,
    'cpu_s_to_threshold': 180,
    'best_dev_wer_in_budget': 20.0,
    'steps_in_budget': 300,
    'decode_inputs_per_s_greedy': 100.0,
    'decode_command_s_greedy': 12.0,
    'test_wer_greedy': 25.0,
    'decode_command_s_beam5': 20.0,
    'test_wer_beam5': 24.0,
  }
  assert units['decode_inputs_per_s_greedy'] == 'words/s' and units['test_wer_beam5'] == '%'
  bible_units = measures.measures(BIBLE)
  assert bible_units['test_bleu_greedy'] == 'BLEU'
  assert bible_units['decode_inputs_per_s_beam5'] == 'verses/s'
  json.dumps(records)  # the results file holds them as they are
  with pytest.raises(ValueError, match='unknown measure'):
    measures.record(G2P, 'fast', 'speed', 1.0, 'm1')
  for task in tasks.TASKS.values():  # every column of the report is a measure of its task
    assert {m for m, _, _ in report.columns(task)} <= set(measures.measures(task))


def test_report_ratios_are_attnlab_over_the_faster_peer():
  rec = lambda system, measure, value: measures.record(G2P, system, measure, value, 'm')
  records = [
    rec('attnlab', 'train_target_tokens_per_s', 9000.0),
    rec('opennmt-py', 'train_target_tokens_per_s', 6000.0),
    rec('joeynmt', 'train_target_tokens_per_s', 4000.0),
    rec('attnlab', 'cpu_s_to_threshold', 300.0),
    rec('opennmt-py', 'cpu_s_to_threshold', 600.0),
    rec('joeynmt', 'cpu_s_to_threshold', 450.0),
  ]
  table = report.values(records)
  assert report.ratio(table, 'attnlab', 'train_target_tokens_per_s', False) == 1.5
  assert report.ratio(table, 'attnlab', 'cpu_s_to_threshold', True) == 1.5  # 450 s over 300 s
  assert report.ratio(table, 'attnlab', 'decode_inputs_per_s_greedy', False) is None
  result = {
    'records': records,
    'machine': 'm',
    'command': 'python -m benchmarks.peers',
    'wall_s': 600,
    'versions': {'jax': '0.10', 'OpenNMT-py': '3.5.1', 'joeynmt': '2.3.0', 'torch': '2.13.0'},
    'cpu_count': 2,
    'load_at_start': 0.1,
    'cpu_budget_s': 1800,
    'every': 1000,
    'threshold': 30.1,
    'threshold_from': 'the loosest best',
  }
  text = report.markdown(G2P, result)
  assert '| attnlab | 9,000 | - | - | - | 300 |' in text
  assert '| joeynmt | 4,000 |' in text and 'training tok/s 1.50' in text
  assert 'CPU time to threshold 1.50' in text and 'dev WER 30.1%' in text
  assert 'greedy words/s' in text and 'CMUdict G2P' in text
  bible = report.markdown(BIBLE, {**result, 'threshold': 22.3})
  assert 'dev BLEU 22.3' in bible and 'greedy verses/s' in bible and 'test BLEU beam 5' in bible


def test_supervisor_stops_the_tree_at_its_cpu_budget_and_stamps_checkpoints(tmp_path):
  # A shell whose child writes checkpoint 1 and then spins: only the tree's CPU time stops it.
  spin = (
    "import pathlib, time; pathlib.Path('ckpt_1').touch(); t = time.process_time()\n"
    'while time.process_time() - t < 60: pass'
  )
  cmd = ['sh', '-c', f'{sys.executable} -c "{spin}"; echo never']
  done = supervise.run(
    cmd,
    log_path=str(tmp_path / 'log'),
    cpu_budget_s=1.0,
    cwd=str(tmp_path),
    checkpoint_steps=lambda: [int(n[5:]) for n in os.listdir(tmp_path) if n.startswith('ckpt_')],
  )
  assert done.over_budget and done.returncode != 0
  assert 1.0 <= done.cpu_s < 30 and done.wall_s < 30
  assert list(done.checkpoints) == [1] and done.checkpoints[1].cpu_s <= done.cpu_s
  assert 'never' not in (tmp_path / 'log').read_text()


def test_a_command_that_ends_within_its_budget_is_not_stopped(tmp_path):
  done = supervise.run(
    [sys.executable, '-c', 'pass'],
    log_path=str(tmp_path / 'log'),
    cpu_budget_s=60,
    checkpoint_steps=list,
  )
  assert (done.returncode, done.over_budget, done.checkpoints) == (0, False, {})


@pytest.mark.parametrize(
  'flag, message',
  [
    ('--systems=attnlab,marian', "unknown systems ['marian']"),
    ('--cpu_budget_min=0', '--cpu_budget_min must be positive, got 0'),
    ('--task=wmt', "unknown --task 'wmt'; choose from g2p, bible"),
  ],
)
def test_bad_flags_are_one_error_line(capsys, flag, message):
  with pytest.raises(SystemExit) as stopped:
    peers_main.main([flag])
  assert stopped.value.code == 2
  assert message in capsys.readouterr().err


def test_pins_name_one_version_of_each_part():
  assert environment.pinned_versions() == {
    'torch': '2.13.0',
    'OpenNMT-py': '3.5.1',
    'joeynmt': '2.3.0',
  }
  names = [
    p.split('==')[0] for p in (environment.TORCH, *environment.TOOLKITS, *environment.IMPORTED)
  ]
  assert len(names) == len(set(names)) and all('==' in p for p in environment.IMPORTED)
  assert not environment.installed('/nonexistent/peers-venv')
  # The launcher that adapts Joey NMT to torch 2.13 runs in the peers' venv: no attnlab there.
  source = open(environment.JOEY_MAIN).read()
  assert 'attnlab' not in source.split('"""')[-1] and 'run_module' in source
  subprocess.run([sys.executable, '-m', 'py_compile', environment.JOEY_MAIN], check=True)
