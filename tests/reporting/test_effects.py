"""Report: the effects of settings: the pooled table (sweep_report.marginal_table) and the
one-setting-at-a-time table (reporting/effects.py) of a score x timing grid."""

from attnlab.reporting import comparisons, effects, stats, sweep_results
from attnlab.reporting import sweep_report as report
from attnlab.sweeps.trials import Trial

SCORE, TIMING = 'model.attention.score', 'model.attention.timing'

# (score, timing) -> per seed: (test WER, per-example correctness of its 4 test examples). The
# correctness is all-or-nothing per variant, so every paired difference is the same on every
# example and the bootstrap interval is exact whatever the resampling. general x luong is not
# run; 'none' (no attention, no score) differs from every variant in two settings.
GRID = {
  ('dot', 'bahdanau'): {0: (0.10, 1), 1: (0.12, 1)},
  ('general', 'bahdanau'): {0: (0.11, 1), 1: (0.13, 1)},
  ('concat', 'bahdanau'): {0: (0.50, 0), 1: (0.52, 0)},
  ('dot', 'luong'): {0: (0.20, 0), 1: (0.30, 0)},
  ('general', 'luong'): {},
  (None, 'none'): {0: (0.90, 0)},
}


def _variant(score, timing, seeds):
  overrides = {SCORE: score, TIMING: timing} if score else {TIMING: timing}
  label = f'{score},{timing}'
  results = [
    sweep_results.TrialResult(
      Trial(f'{label},seed={seed}', 'configs/g2p.py', {**overrides, 'seed': seed}, {}),
      '', 'finished', {}, {'test': {'wer': wer}}, [], dict.fromkeys(range(4), bool(correct)),
    )
    for seed, (wer, correct) in seeds.items()
  ] or [
    sweep_results.TrialResult(
      Trial(f'{label},seed=0', 'configs/g2p.py', {**overrides, 'seed': 0}, {}),
      '', 'new', {}, None, [], None,
    )
  ]
  return sweep_results.Variant('configs/g2p.py', label, overrides, results)


def _grid():
  return [_variant(score, timing, seeds) for (score, timing), seeds in GRID.items()]


def test_pairs_differ_in_one_setting_alone():
  found = [(p.key, p.held, p.first.label, p.second.label) for p in effects.pairs(_grid())]
  bahdanau, luong = ((TIMING, 'bahdanau'),), ((TIMING, 'luong'),)
  assert found == [
    (SCORE, bahdanau, 'dot,bahdanau', 'general,bahdanau'),
    (SCORE, bahdanau, 'dot,bahdanau', 'concat,bahdanau'),
    (SCORE, bahdanau, 'general,bahdanau', 'concat,bahdanau'),
    (SCORE, luong, 'dot,luong', 'general,luong'),
    (TIMING, ((SCORE, 'dot'),), 'dot,bahdanau', 'dot,luong'),
    (TIMING, ((SCORE, 'general'),), 'general,bahdanau', 'general,luong'),
  ]  # concat has one timing; 'none' changes the score and the timing together


def test_the_table_tests_each_finished_pair_second_minus_first():
  variants = _grid()
  best = stats.rank(variants, 'wer')
  assert best.label == 'dot,bahdanau'
  # The family: every pair of the 4 variants with two seeds (general x luong is not run, none
  # has one seed), 6 pairs, whichever came out best.
  adjusted = comparisons.family({'configs/g2p.py': variants}, 'wer')['configs/g2p.py']
  assert len(adjusted) == 6
  lines = effects.pairs_table(variants, 'wer', best, adjusted)
  # Across seeds, WER of the second minus the first. Two seeds of equal spread (std 0.014) on
  # both sides: se = sqrt(0.0002 / 2 + 0.0002 / 2) = 0.01414, df = 2, where
  # p = 1 - t / sqrt(t^2 + 2) and t_0.975 = 4.3027: dot -> general t = 0.707, p = 0.553,
  # 0.010 ± 0.061; dot -> concat t = 28.28, p = 0.00125; general -> concat t = 27.58,
  # p = 0.00131. Against dot x luong (std 0.071): se = sqrt(0.0001 + 0.0025) = 0.0510,
  # df = 1.08, dot x bahdanau t = 2.746, p = 0.207; general t = 2.550, p = 0.223; concat
  # t = -5.099, p = 0.110 (scipy.stats.ttest_ind, equal_var=False). Holm over the 6, ascending:
  # 0.00125 x 6 = 0.0075, 0.00131 x 5 = 0.0066 -> 0.0075, 0.110 x 4 = 0.440, 0.207 x 3 = 0.622,
  # 0.223 x 2 = 0.446 -> 0.622, 0.553 x 1 -> 0.622.
  # Over test examples, exact-match accuracy of the second minus the first: all right against
  # all wrong is -1 on every example, so the interval is [-1, -1] and no resample reaches 0.
  assert lines[5:] == [
    '| score | timing=bahdanau | dot → general | 0.110 ± 0.014 → 0.120 ± 0.014 | – → – | '
    '+0.010 [-0.051, +0.071] | 0.553 | 0.622 | not shown | +0.000 [+0.000, +0.000] | 1.000 |',
    '| score | timing=bahdanau | dot → concat | 0.110 ± 0.014 → 0.510 ± 0.014 | – → – | '
    '+0.400 [+0.339, +0.461] | 0.001 | 0.007 | beyond seeds | -1.000 [-1.000, -1.000] | '
    '< 0.001 |',
    '| score | timing=bahdanau | general → concat | 0.120 ± 0.014 → 0.510 ± 0.014 | – → – | '
    '+0.390 [+0.329, +0.451] | 0.001 | 0.007 | beyond seeds | -1.000 [-1.000, -1.000] | '
    '< 0.001 |',
    '| timing | score=dot | bahdanau → luong | 0.110 ± 0.014 → 0.250 ± 0.071 | – → – | '
    '+0.140 [-0.405, +0.685] | 0.207 | 0.622 | not shown | -1.000 [-1.000, -1.000] | < 0.001 |',
    '',
    '2 more pair(s) wait for a variant with no finished trial.',
  ]
  assert lines[4] == '|' + '---|' * 11 and 'test wer' in lines[1]
  # The family's pairs that neither the main table (against dot x bahdanau) nor the one-setting
  # table prints: general and concat (x bahdanau) against dot x luong, each ± t_0.975(1.08)
  # x 0.0510 = 0.545.
  assert comparisons.rest_table(variants, 'wer', best, adjusted)[3:] == [
    '| first → second | wer | Δ [95% CI] | p | Holm p | finding |',
    '|---|---|---|---|---|---|',
    '| general,bahdanau → dot,luong | 0.120 ± 0.014 → 0.250 ± 0.071 | +0.130 [-0.415, +0.675] '
    '| 0.223 | 0.622 | not shown |',
    '| concat,bahdanau → dot,luong | 0.510 ± 0.014 → 0.250 ± 0.071 | -0.260 [-0.805, +0.285] '
    '| 0.110 | 0.440 | not shown |',
  ]
  # With concat x bahdanau the reference, the main table holds concat -> dot x luong, so only
  # general -> dot x luong is left; the family and its Holm p stay as they are.
  assert [line.split(' | ')[0] for line in
          comparisons.rest_table(variants, 'wer', variants[2], adjusted)[5:]] == [
    '| general,bahdanau → dot,luong']


def test_no_table_when_the_main_table_already_holds_every_pair():
  variants = _grid()
  best = variants[0]
  # Two variants: their one pair is a comparison with the best.
  assert effects.pairs_table(variants[:2], 'wer', best, {}) == []
  # A pair beside the best exists, but no pair has both variants finished yet.
  general, unrun, dot = variants[1], variants[4], variants[3]  # x bahdanau, x luong, x luong
  found = [(p.first.label, p.second.label) for p in effects.pairs([general, unrun, dot])]
  assert found == [('general,luong', 'dot,luong'), ('general,bahdanau', 'general,luong')]
  assert effects.pairs_table([general, unrun, dot], 'wer', dot, {}) == []


def test_pooled_table_averages_each_setting_over_the_others():
  # score x timing, two seeds: WER = timing's base + score's offset + seed noise, by hand.
  base = {'bahdanau': 0.28, 'luong': 0.29}
  offset = {'dot': 0.0, 'concat': 0.002}
  variants = [
    _variant(score, timing,
             {seed: (base[timing] + offset[score] + 0.002 * seed, 1) for seed in (0, 1)})
    for score in offset for timing in base
  ]
  lines = report.marginal_table(variants, 'wer')
  # score=dot pools 0.280, 0.282, 0.290, 0.292: mean 0.286, sample std sqrt(104e-6 / 3) =
  # 0.0059; timing=bahdanau pools 0.280, 0.282, 0.282, 0.284: 0.282, sqrt(8e-6 / 3) = 0.0016.
  assert lines[-4:] == [
    '| score=dot | 4 | 0.286 ± 0.006 |',
    '| score=concat | 4 | 0.288 ± 0.006 |',
    '| timing=bahdanau | 4 | 0.282 ± 0.002 |',
    '| timing=luong | 4 | 0.292 ± 0.002 |',
  ]
  assert lines[3] == '| setting | trials | wer |'
  # One swept setting: the pooled table would repeat the main table.
  assert report.marginal_table([v for v in variants if 'dot' in v.label], 'wer') == []
  # A list of decoders (the bottleneck's): the score changes only together with the timing,
  # so pooling by score would mix timings; timing alone is left, and that is the main table.
  decoders = [v for v in variants if v.label in ('dot,bahdanau', 'concat,luong')]
  assert report.marginal_table(decoders, 'wer') == []
  # Drop one corner of the 2 x 2: each setting is still varied alone somewhere, and pooled.
  three = [v for v in variants if v.label != 'concat,luong']
  assert [line.split(' | ')[0] for line in report.marginal_table(three, 'wer')[-4:]] == [
    '| score=dot', '| score=concat', '| timing=bahdanau', '| timing=luong']
