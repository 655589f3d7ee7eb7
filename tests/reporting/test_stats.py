"""Report statistics: paired bootstraps (exact match and corpus BLEU), tests across seeds
(Welch's t, Holm's correction, the findings they decide), ranking by the selection metric, and
BLEU by source length for translation sweeps."""

import json
import math

import numpy as np
import pytest
import sacrebleu
from scipy import stats as scipy_stats

from attnlab import bleu_scores
from attnlab.reporting import length_tables, seed_tests, sweep_results
from attnlab.reporting import stats as report_stats
from attnlab.reporting import sweep_report as report


def test_paired_bootstrap_matches_the_normal_approximation():
  rng = np.random.default_rng(1)
  a = (rng.random(4000) < 0.70).astype(float)
  b = (rng.random(4000) < 0.75).astype(float)
  out = report_stats.paired_bootstrap(a, b, samples=2000, seed=3)
  diff = b - a
  se = diff.std(ddof=1) / np.sqrt(diff.size)  # standard error of a mean difference
  assert out['delta'] == pytest.approx(diff.mean(), abs=1e-12)
  assert out['ci_low'] == pytest.approx(diff.mean() - 1.96 * se, abs=0.15 * se)
  assert out['ci_high'] == pytest.approx(diff.mean() + 1.96 * se, abs=0.15 * se)
  assert out['p_value'] < 0.01 and out['n'] == 4000
  same = report_stats.paired_bootstrap(a, a)
  assert (same['delta'], same['ci_low'], same['ci_high'], same['p_value']) == (0, 0, 0, 1)
  with pytest.raises(ValueError, match='equal non-empty'):
    report_stats.paired_bootstrap(a, b[:10])


def _variant(label, predictions_by_seed, metric_by_seed=None, *, metric='wer', outputs=None):
  results = []
  for seed, predictions in predictions_by_seed.items():
    trial = sweep_results.Trial(f'{label},seed={seed}', 'c.py', {'x': label, 'seed': seed}, {})
    final = {'test': {metric: (metric_by_seed or {}).get(seed, 0.5)}}
    final['selection'] = {'metric': metric}
    texts = (outputs or {}).get(seed)
    results.append(
      sweep_results.TrialResult(trial, '', 'finished', {}, final, [], predictions, texts)
    )
  return sweep_results.Variant('c.py', label, {'x': label}, results)


def test_the_bleu_bootstrap_resamples_sentences_of_both_systems_together():
  rng = np.random.default_rng(2)
  words = 'in the beginning god created heaven and earth was without form void'.split()
  refs = [' '.join(rng.choice(words, rng.integers(4, 14))) for _ in range(300)]
  # b is the reference itself on every third sentence and noise elsewhere, a noise everywhere.
  # The noise also drops words from a (shorter than its references: brevity penalty < 1) and
  # inserts words into b (longer: no penalty), so sums with the hypothesis and reference
  # lengths mixed up give other scores than sacrebleu's.
  def noise(r, length_change):
    out = []
    for w in r.split():
      if length_change < 0 and rng.random() < 0.25:
        continue
      out.append(w if rng.random() < 0.5 else 'x')
      if length_change > 0 and rng.random() < 0.25:
        out.append('y')
    return ' '.join(out)

  a = [noise(r, -1) for r in refs]
  b = [r if i % 3 == 0 else noise(r, +1) for i, r in enumerate(refs)]
  sa, sb = bleu_scores.bleu_statistics(a, refs), bleu_scores.bleu_statistics(b, refs)
  sacre = lambda hyps: sacrebleu.corpus_bleu(hyps, [refs])
  assert sacre(a).sys_len < sacre(a).ref_len and sacre(a).bp < 0.9
  assert sacre(b).sys_len > sacre(b).ref_len and sacre(b).bp == 1.0
  out = report_stats.paired_bootstrap_bleu(sa, sb, samples=500)
  expected = bleu_scores.bleu_chrf(b, refs)['bleu'] - bleu_scores.bleu_chrf(a, refs)['bleu']
  assert out['delta'] == pytest.approx(expected, abs=1e-9) and expected > 5
  assert out['ci_low'] < out['delta'] < out['ci_high'] and out['ci_low'] > 0
  assert out['p_value'] < 0.01 and out['n'] == 300
  same = report_stats.paired_bootstrap_bleu(sa, sa, samples=50)
  assert (same['delta'], same['ci_low'], same['ci_high'], same['p_value']) == (0, 0, 0, 1)
  with pytest.raises(ValueError, match='equal N x 10'):
    report_stats.paired_bootstrap_bleu(sa, sb[:10])


def test_translation_variants_are_ranked_and_tested_by_bleu():
  good = {0: ('a b c d e', ['a b c d e']), 1: ('f g h i', ['f g h i'])}
  poor = {0: ('a b c x e', ['a b c d e']), 1: ('f x h i', ['f g h i'])}
  best = _variant(
    'good', {0: {}, 1: {}}, {0: 40.0, 1: 42.0}, metric='bleu', outputs={0: good, 1: good}
  )
  other = _variant(
    'poor', {0: {}, 1: {}}, {0: 20.0, 1: 21.0}, metric='bleu', outputs={0: poor, 1: poor}
  )
  assert report_stats.primary_metric([best, other], 'auto') == 'bleu'
  assert report_stats.rank([other, best], 'bleu') is best  # higher BLEU is better
  [(label, test)] = report_stats.significance([best, other], best, 'bleu').items()
  pooled = lambda out: bleu_scores.bleu_chrf(
    [h for _, (h, _) in sorted(out.items())] * 2, [r for _, (_, r) in sorted(out.items())] * 2
  )['bleu']
  assert label == 'poor' and test['n'] == 4  # two sentences of each of the two seeds
  assert test['delta'] == pytest.approx(pooled(poor) - pooled(good), abs=1e-9)


def test_bootstrap_p_values_print_no_finer_than_their_resamples_resolve():
  # Every paired difference is +1: no resample reaches 0, so p = 0, which with B resamples
  # means p < 2 / B (twice the share of one resample), not 1 / B.
  a, b = np.zeros(50), np.ones(50)
  test = report_stats.paired_bootstrap(a, b, samples=2000)
  assert (test['p_value'], test['samples']) == (0.0, 2000)
  assert report_stats.bootstrap_cells(test) == ['+1.000 [+1.000, +1.000]', '< 0.001']
  few = report_stats.paired_bootstrap(a, b, samples=500)
  assert report_stats.bootstrap_cells(few)[1] == '< 0.004'
  # Otherwise p is a multiple of 2 / B, printed as it is.
  rng = np.random.default_rng(0)
  noisy = report_stats.paired_bootstrap(rng.random(40) < 0.5, rng.random(40) < 0.6, samples=500)
  assert 0 < noisy['p_value'] < 1 and (noisy['p_value'] * 500 / 2) % 1 == pytest.approx(0)
  assert report_stats.bootstrap_cells(noisy)[1] == f'{noisy["p_value"]:.3f}'


def test_welch_test_against_the_formulas_by_hand():
  # Equal n and variances: df = 2 (n - 1) = 2, where Student's t has a closed form:
  # P(|T| > t) = 1 - t / sqrt(t^2 + 2) and t_0.975 = 0.95 sqrt(2 / (4 x 0.975 x 0.025)).
  # a = (30, 31), b = (32, 33): s^2 = 0.5 each, se = sqrt(0.25 + 0.25), t = 2 / se = 2.828.
  test = seed_tests.welch_test([30.0, 31.0], [32.0, 33.0])
  se, t = np.sqrt(0.5), 2 / np.sqrt(0.5)
  half = 0.95 * np.sqrt(2 / (4 * 0.975 * 0.025)) * se  # 4.3027 x 0.7071
  assert test['delta'] == 2.0 and test['df'] == pytest.approx(2.0) and test['n'] == (2, 2)
  assert test['p_value'] == pytest.approx(1 - t / np.sqrt(t**2 + 2))  # 0.10557
  assert (test['ci_low'], test['ci_high']) == (pytest.approx(2 - half), pytest.approx(2 + half))
  # Unequal n and variances: a = (30, 31), b = (32, 34, 33): s_a^2 / 2 = 1/4, s_b^2 / 3 = 1/3,
  # se^2 = 7/12, df = (7/12)^2 / ((1/4)^2 / 1 + (1/3)^2 / 2) = (49/144) / (17/144) = 49/17.
  test = seed_tests.welch_test([30.0, 31.0], [32.0, 34.0, 33.0])
  assert test['delta'] == pytest.approx(2.5) and test['df'] == pytest.approx(49 / 17)
  t = 2.5 / np.sqrt(7 / 12)
  assert test['p_value'] == pytest.approx(2 * scipy_stats.t.sf(t, 49 / 17))
  # One seed on a side: no test. No variation on either side: the limit, p = 1 or 0.
  assert seed_tests.welch_test([30.0], [32.0, 33.0]) is None
  same = seed_tests.welch_test([0.5, 0.5], [0.5, 0.5])
  assert (same['p_value'], same['ci_low'], same['ci_high'], same['df']) == (1.0, 0.0, 0.0, None)
  apart = seed_tests.welch_test([1.0, 1.0], [0.0, 0.0])
  assert (apart['delta'], apart['p_value'], apart['ci_low']) == (-1.0, 0.0, -1.0)


@pytest.mark.parametrize(
  'a, b',
  [
    ([30.1, 30.6, 29.8], [31.2, 32.9]),
    ([0.281, 0.279, 0.290, 0.284, 0.277], [0.301, 0.295, 0.312]),
    ([7.0, 7.2], [9.4, 9.9, 8.9, 9.5]),
  ],
)
def test_welch_test_matches_scipy(a, b):
  test = seed_tests.welch_test(a, b)
  scipy = scipy_stats.ttest_ind(b, a, equal_var=False)
  low, high = scipy.confidence_interval(0.95)
  assert test['p_value'] == pytest.approx(scipy.pvalue, rel=1e-9)
  assert test['df'] == pytest.approx(scipy.df, rel=1e-9)
  assert (test['ci_low'], test['ci_high']) == (pytest.approx(low), pytest.approx(high))
  assert test['delta'] == pytest.approx(np.mean(b) - np.mean(a))


def test_holm_by_hand():
  # Sorted: 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 -> 0.06 (an
  # adjusted p never falls below the one before it); back in the given order.
  assert seed_tests.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
  assert seed_tests.holm([0.5, 0.6]) == [1.0, 1.0]  # 0.5 x 2 capped at 1, then held
  assert seed_tests.holm([0.2]) == [0.2] and seed_tests.holm([]) == []


def test_the_finding_follows_the_corrected_p():
  assert seed_tests.finding(0.05) == 'beyond seeds'
  assert seed_tests.finding(0.0500001) == 'not shown'
  assert seed_tests.finding(0.01, still_improving=True) == 'beyond seeds (still improving)'
  assert seed_tests.finding(None) == '–'


def _table(lines, first_head):
  """The rows of the Markdown table whose header starts with `first_head`, as {head: cell}."""
  start = next(i for i, line in enumerate(lines) if line.startswith(f'| {first_head} |'))
  head = [c.strip() for c in lines[start].strip('|').split('|')]
  rows = []
  for line in lines[start + 2 :]:
    if not line.startswith('|'):
      break
    rows.append(dict(zip(head, [c.strip() for c in line.strip('|').split('|')], strict=True)))
  return rows


def test_no_finding_beyond_seeds_without_a_holm_p_at_most_alpha():
  """Three variants of one setting, three seeds each, WER by hand: a is best, b lies between.
  The report tests a-b and a-c (main table) and b-c (the pairs table): three tests, whose
  Holm p are checked against scipy's Welch p-values corrected here by the formula. a-b and
  b-c have raw p < 0.05 but not after the correction, so they must read 'not shown'."""
  wer = {'a': [0.100, 0.110, 0.120], 'b': [0.125, 0.130, 0.145], 'c': [0.150, 0.160, 0.170]}
  variants = [_variant(x, dict.fromkeys(range(3), {}), dict(enumerate(v))) for x, v in wer.items()]
  manifest = {'name': 'n', 'experiment': 'e.py'}
  lines = report.markdown(manifest, {'c.py': variants}, 'auto', {}).splitlines()
  raw = {
    pair: scipy_stats.ttest_ind(wer[pair[1]], wer[pair[0]], equal_var=False).pvalue
    for pair in (('a', 'b'), ('a', 'c'), ('b', 'c'))
  }
  order = sorted(raw, key=raw.get)  # Holm: the j-th smallest (from 0) times 3 - j, cumulative
  adjusted = np.maximum.accumulate([(3 - j) * raw[k] for j, k in enumerate(order)])
  holm = dict(zip(order, adjusted, strict=True))
  assert raw['a', 'b'] < 0.05 and raw['b', 'c'] < 0.05 < holm['a', 'b'] == holm['b', 'c']
  assert holm['a', 'c'] < 0.05
  main = {row['variant'].removesuffix(' †'): row for row in _table(lines, 'variant')}
  pairs = {tuple(row['first → second'].split(' → ')): row for row in _table(lines, 'setting')}
  printed = {('a', 'b'): main['b'], ('a', 'c'): main['c'], ('b', 'c'): pairs['b', 'c']}
  assert list(pairs) == [('a', 'b'), ('a', 'c'), ('b', 'c')]
  assert any('(3 test(s))' in line for line in lines)
  for pair, row in printed.items():
    assert row['p'] == f'{raw[pair]:.3f}' and row['Holm p'] == f'{holm[pair]:.3f}'
  for row in [*main.values(), *pairs.values()]:
    if row['Holm p'] in ('', '–'):
      assert row['finding'] in ('', '–')  # the best itself
    else:
      assert (row['finding'] == 'beyond seeds') == (float(row['Holm p']) <= 0.05), row
  assert [printed[p]['finding'] for p in raw] == ['not shown', 'beyond seeds', 'not shown']
  # A pair printed in both tables is one test with one corrected p.
  assert pairs['a', 'b']['Holm p'] == main['b']['Holm p']


def test_pairs_only_shared_seeds_and_examples():
  best = _variant('a', {0: {0: True, 1: False, 2: True}, 1: {0: True}})
  other = _variant('b', {0: {1: True, 2: False, 3: True}, 2: {0: False}})
  assert report_stats.paired_correctness(best, other) == ([False, True], [True, False])


def test_ranking_follows_the_metric_direction():
  low = _variant('low', {0: {}}, {0: 0.1})
  high = _variant('high', {0: {}}, {0: 0.3})
  assert report_stats.primary_metric([low, high], 'auto') == 'wer'
  assert report_stats.rank([high, low], 'wer') is low  # lower WER is better




def _finished(seed, test):
  """A finished trial of config c.py with these test metrics and no predictions."""
  trial = sweep_results.Trial(f'seed={seed}', 'c.py', {'seed': seed}, {})
  return sweep_results.TrialResult(trial, '', 'finished', {}, {'test': test}, [], None)


def test_translation_sweeps_plot_and_tabulate_bleu_by_source_length_in_words(tmp_path, monkeypatch):
  from attnlab.reporting import plots as report_plots

  def trial(seed, short_bleu):
    test = {
      'bleu_by_length': [
        {'bucket': '0-9', 'count': 3, 'bleu': short_bleu},
        {'bucket': '10-19', 'count': 2, 'bleu': 30.0},
        {'bucket': '20-29', 'count': 0, 'bleu': None},
      ],
      'by_length': [{'bucket': '0-4', 'count': 5, 'mean': 0.0}],  # exact match: not plotted
    }
    return _finished(seed, test)

  variant = sweep_results.Variant('c.py', 'luong', {}, [trial(0, 20.0), trial(1, 22.0)])
  figures = []
  monkeypatch.setattr(report_plots, 'save_figure', lambda fig, path: figures.append(fig))
  assert report_plots.plot_by_length(str(tmp_path / 'p.png'), [variant])
  [ax] = figures[0].axes
  assert (ax.get_xlabel(), ax.get_ylabel()) == ('source length (words)', 'test BLEU')
  assert [t.get_text() for t in ax.get_xticklabels()] == ['0-9', '10-19']
  [line] = ax.get_lines()[:1]
  assert line.get_ydata().tolist() == [21.0, 30.0]  # the seeds' mean per bucket
  assert report.by_length_table([variant]) == [
    '',
    'Test BLEU by source length in words (Bahdanau et al. 2015, Fig. 2):',
    '',
    '| variant | 0-9 | 10-19 |',
    '|---|---|---|',
    '| luong | 21.0 ± 1.4 | 30.0 ± 0.0 |',
  ]


def test_synthetic_sweeps_tabulate_sequence_accuracy_by_source_length_in_tokens():
  def trial(seed, long_accuracy):
    test = {'by_length': [
      {'bucket': '0-4', 'count': 0, 'mean': None},  # empty: left out
      {'bucket': '5-9', 'count': 40, 'mean': 1.0},
      {'bucket': '40-44', 'count': 8, 'mean': long_accuracy},
    ]}
    return _finished(seed, test)

  none = sweep_results.Variant('c.py', 'none', {}, [trial(0, 0.25), trial(1, 0.5)])
  luong = sweep_results.Variant('c.py', 'luong', {}, [trial(0, 1.0)])
  # mean of 0.25 and 0.5; sample std sqrt(((0.125)^2 * 2) / 1) = 0.177
  assert report.by_length_table([none, luong]) == [
    '',
    'Test sequence accuracy by source length in tokens (Bahdanau et al. 2015, Fig. 2):',
    '',
    '| variant | 5-9 | 40-44 |',
    '|---|---|---|',
    '| none | 1.000 ± 0.000 | 0.375 ± 0.177 |',
    '| luong | 1.000 | 1.000 |',
  ]


def test_bleu_by_length_of_older_trials_is_scored_again_with_its_brevity_penalty(tmp_path):
  """A trial evaluated before buckets held chrF and the brevity penalty gets them from its test
  predictions (sources bucketed by words, as the evaluation did); the report then shows both
  beside BLEU. Hand-counted: the 2-word source's output has 2 tokens against a reference of 4
  (BP = exp(1 - 4/2)); the 12-word source's output is longer than its reference (BP = 1)."""
  rows = [
    {'index': 0, 'correct': False, 'source': 'uno dos', 'reference': 'the cat sat on',
     'hypothesis': 'the cat'},
    {'index': 1, 'correct': False, 'source': ' '.join(['palabra'] * 12),
     'reference': 'one two three four', 'hypothesis': 'one two three four five'},
  ]
  old = [{'bucket': '0-9', 'count': 1, 'bleu': 1.0}, {'bucket': '10-19', 'count': 1, 'bleu': 2.0}]
  trial = sweep_results.Trial('seed=0', 'c.py', {'seed': 0}, {})
  directory = tmp_path / trial.name
  directory.mkdir()
  (directory / 'final_metrics.json').write_text(json.dumps({'test': {'bleu_by_length': old}}))
  with open(directory / sweep_results.PREDICTIONS, 'w') as f:
    f.writelines(json.dumps(r) + '\n' for r in rows)
  result = sweep_results.read_trial(str(tmp_path), trial)
  short, long_ = result.test['bleu_by_length'][:2]
  assert short['brevity_penalty'] == pytest.approx(math.exp(1 - 4 / 2))
  assert short['length_ratio'] == pytest.approx(0.5)
  assert short['bleu'] == pytest.approx(sacrebleu.corpus_bleu(['the cat'], [['the cat sat on']])
                                        .score)
  assert (long_['brevity_penalty'], long_['length_ratio']) == (1.0, pytest.approx(5 / 4))
  chrf = [sacrebleu.corpus_chrf([r['hypothesis']], [[r['reference']]]).score for r in rows]
  table = report.by_length_table([sweep_results.Variant('c.py', 'v', {}, [result])])
  head = ['| variant | 0-9 | 10-19 |', '|---|---|---|']
  penalty, chrf_title = (title for _, title, _ in length_tables.BLEU_PARTS)
  assert table[6:] == ['', penalty, '', *head, '| v | 0.368 | 1.000 |',
                       '', chrf_title, '', *head, f'| v | {chrf[0]:.1f} | {chrf[1]:.1f} |']
  # Buckets that already hold every score are read as they are, not scored again.
  now = [{**b, 'bleu': 99.0} for b in result.test['bleu_by_length']]
  (directory / 'final_metrics.json').write_text(json.dumps({'test': {'bleu_by_length': now}}))
  assert sweep_results.read_trial(str(tmp_path), trial).test['bleu_by_length'] == now
