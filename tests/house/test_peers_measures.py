"""benchmarks/peers' logs.py, measures.py and report.py: the log parsers read hand-written lines
in each toolkit's documented format; WER, BLEU, the shared threshold (lower and higher is
better), time to quality, the records' schema and the report's ratios on hand-made curves."""

import json

import pytest
from support.peer_tasks import BIBLE, G2P

from benchmarks.peers import logs, measures, report, tasks


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
  assert 'jax 0.10; OpenNMT-py 3.5.1 and Joey NMT 2.3.0 with torch 2.13.0; 2 CPU cores' in text
  alone = {**result['versions'], 'OpenNMT-py': None, 'joeynmt': None, 'torch': None}
  assert 'jax 0.10; 2 CPU cores' in report.markdown(G2P, {**result, 'versions': alone})
  bible = report.markdown(BIBLE, {**result, 'threshold': 22.3})
  assert 'dev BLEU 22.3' in bible and 'greedy verses/s' in bible and 'test BLEU beam 5' in bible


def test_time_to_threshold_is_taken_apart_into_steps_steady_cost_and_the_rest():
  # CPU s at checkpoints 150, 250, 360, 460: intervals of 0.100, 0.110, 0.100 s a step, median
  # 0.100; dev WER 38.4 first reaches 38.6 at step 4,000: 460 = 4,000 x 0.100 + 60.
  curve = _curve((1000, 80, 150, 50.0), (2000, 130, 250, 42.0), (3000, 185, 360, 39.0),
                 (4000, 235, 460, 38.4))
  assert measures.cpu_s_per_step(curve) == pytest.approx(0.100)
  apart = measures.taken_apart(G2P, curve, 38.6)
  assert apart.steps == 4000 and apart.cpu_s == 460
  assert apart.cpu_s_per_1000_steps == pytest.approx(100.0)
  assert apart.other_cpu_s == pytest.approx(60.0)
  assert measures.taken_apart(G2P, curve, 30.0) is None  # never reached
  assert measures.taken_apart(G2P, curve[:1], 60.0) is None  # no interval to take a rate from
  result = {
    'records': [measures.record(G2P, 'x', 'cpu_s_to_threshold', 460.0, 'm')],
    'machine': 'm', 'command': 'python -m benchmarks.peers', 'wall_s': 600,
    'versions': {'jax': '0.10', 'OpenNMT-py': None, 'joeynmt': None, 'torch': None},
    'cpu_count': 2, 'load_at_start': 0.1, 'cpu_budget_s': 1800, 'every': 1000,
    'threshold': 38.6, 'threshold_from': 'the loosest best',
    'curves': {'x': [vars(p) for p in curve], 'never': [vars(p) for p in curve[:2]]},
  }
  text = report.markdown(G2P, result)
  assert '| x | 4,000 | 100.0 | 60 | 460 |' in text
  assert '| never |' not in text.split('taken apart')[1]


def test_report_times_every_system_to_the_best_peer_score():
  # The shared threshold is Joey NMT's 0.72 BLEU; the stricter point is OpenNMT-py's best, 8.82
  # BLEU at 1,400 CPU s. attnlab first reaches it at its step-1,000 checkpoint (15.5 >= 8.82),
  # 700 CPU s: 0.50 of OpenNMT-py's; Joey NMT never does.
  curves = {
    'attnlab': _curve((500, 300, 490, 2.0), (1000, 450, 700, 15.5), (1500, 600, 1000, 19.0)),
    'opennmt-py': _curve((500, 250, 480, 1.5), (1000, 500, 960, 4.3), (1500, 720, 1400, 8.82)),
    'joeynmt': _curve((500, 570, 1120, 0.72)),
  }
  result = {
    'records': [], 'machine': 'm', 'command': 'python -m benchmarks.peers --task=bible',
    'wall_s': 600, 'versions': {'jax': '0.10', 'OpenNMT-py': '3.5.1', 'joeynmt': '2.3.0',
                                'torch': '2.13.0'},
    'cpu_count': 2, 'load_at_start': 0.1, 'cpu_budget_s': 1800, 'every': 500,
    'threshold': 0.7, 'threshold_from': 'the loosest best',
    'curves': {s: [vars(p) for p in c] for s, c in curves.items()},
  }
  text = report.markdown(BIBLE, result)
  assert "CPU time to opennmt-py's best dev score in the budget, BLEU 8.82" in text
  assert '| attnlab | 1,000 | 700 | 0.50 |' in text
  assert '| opennmt-py | 1,500 | 1,400 | 1.00 |' in text
  assert '| joeynmt | never | - | - |' in text
  # G2P: lower is better, so the best peer is the one with the lowest WER.
  g2p = {**result, 'threshold': 40.0, 'curves': {
    'attnlab': [vars(p) for p in _curve((1000, 50, 100, 35.0), (2000, 100, 200, 30.0))],
    'opennmt-py': [vars(p) for p in _curve((1000, 60, 120, 38.0), (2000, 120, 400, 31.0))],
    'joeynmt': [vars(p) for p in _curve((1000, 60, 120, 39.0))],
  }}
  g2p_text = report.markdown(G2P, g2p)
  assert "opennmt-py's best dev score in the budget, WER 31%" in g2p_text
  assert '| attnlab | 2,000 | 200 | 0.50 |' in g2p_text
  # Without a peer's curve there is nothing to time against.
  alone = {**result, 'curves': {'attnlab': result['curves']['attnlab']}}
  assert 'best dev score in the budget' not in report.markdown(BIBLE, alone)
