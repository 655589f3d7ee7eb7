"""metrics and bleu_scores: hand-computed sums, error rates with several references, BLEU,
buckets, attention."""

import math

import jax
import numpy as np
import pytest
import sacrebleu

from attnlab import bleu_scores, metrics
from attnlab.train import start as train_start


def test_summarize_hand_values():
  sums = {
    'loss_sum': np.array([3.0, 1.0]),  # two devices' partial sums are added
    'token_correct': np.array([6, 2]),
    'token_count': np.array([7, 3]),
    'seq_correct': 1,
    'seq_count': 4,
    'learning_rate': np.float32(0.25),
  }
  out = metrics.summarize(sums)
  assert out == pytest.approx(
    {
      'loss': 0.4,
      'perplexity': math.exp(0.4),
      'token_accuracy': 0.8,
      'sequence_accuracy': 0.25,
      'learning_rate': 0.25,
    }
  )


def test_summarize_train_keys():
  # What a train window of 2 steps yields: objective with label smoothing, grad norm per step.
  sums = {
    'loss_sum': 6.0,
    'objective_sum': 8.0,
    'token_correct': 5,
    'token_count': 10,
    'grad_norm_sum': 3.0,
    'steps': 2,
  }
  assert metrics.summarize(sums) == pytest.approx(
    {
      'loss': 0.6,
      'perplexity': math.exp(0.6),
      'objective': 0.8,
      'token_accuracy': 0.5,
      'grad_norm': 1.5,
    }
  )


def test_summarize_subset_and_errors():
  assert metrics.summarize({'loss_sum': 2.0, 'token_count': 4}) == pytest.approx(
    {'loss': 0.5, 'perplexity': math.exp(0.5)}
  )
  assert metrics.summarize({'loss_sum': 1e6, 'token_count': 1})['perplexity'] == math.inf
  with pytest.raises(ValueError, match="'seq_correct' needs 'seq_count'"):
    metrics.summarize({'seq_correct': 1})
  with pytest.raises(ValueError, match='token_count=0.0 must be > 0'):
    metrics.summarize({'loss_sum': 0.0, 'token_count': 0})
  with pytest.raises(ValueError, match="'grad_norm' holds 2 values"):
    metrics.summarize({'grad_norm': np.ones(2)})


@pytest.mark.parametrize(
  ('a', 'b', 'want'),
  [
    ('kitten', 'sitting', 3),
    ('', 'abc', 3),
    ('abc', '', 3),
    ('abc', 'abc', 0),
    ('flaw', 'lawn', 2),
    ([1, 2, 3, 4], np.array([2, 3, 4, 5]), 2),
    (['HH', 'AH0', 'L'], ['HH', 'EH1', 'L', 'OW0'], 2),
  ],
)
def test_edit_distance(a, b, want):
  assert metrics.edit_distance(a, b) == want
  assert metrics.edit_distance(b, a) == want


def test_error_rates_with_several_references():
  hyps = [
    ['R', 'IY', 'D'],  # equals the second reference: correct, distance 0 to a 3-token ref
    ['K', 'AE', 'T', 'S'],  # 1 insertion from 'K AE T' (len 3), 2 from 'K AA T' ... closest
    ['D', 'AO'],  # refs: 'D AO G' (d=1, len 3) and 'D AA G Z' (d=3): closest is the first
    ['A', 'B'],  # tie: 'A C' (d=1, len 2) and 'A B C' (d=1, len 3): the first listed wins
  ]
  refs = [
    [['R', 'EH', 'D'], ['R', 'IY', 'D']],
    [['K', 'AA', 'T'], ['K', 'AE', 'T']],
    [['D', 'AO', 'G'], ['D', 'AA', 'G', 'Z']],
    [['A', 'C'], ['A', 'B', 'C']],
  ]
  out = metrics.error_rates(hyps, refs)
  assert out['count'] == 4
  assert out['wer'] == pytest.approx(3 / 4)
  assert out['per'] == pytest.approx((0 + 1 + 1 + 1) / (3 + 3 + 3 + 2))


def test_error_rates_errors():
  with pytest.raises(ValueError, match='2 hypotheses but 1 references'):
    metrics.error_rates([[1], [2]], [[[1]]])
  with pytest.raises(ValueError, match=r'refs_lists\[0\] must be a non-empty list'):
    metrics.error_rates([[1]], [[]])


def test_sequence_accuracy():
  hyps = [[1, 2, 3], np.array([4, 5]), [6], []]
  refs = [np.array([1, 2, 3]), [4, 5, 6], [6], []]
  assert metrics.sequence_accuracy(hyps, refs) == pytest.approx(3 / 4)


def test_bleu_hand_values():
  # p1..p4 = 4/5, 3/4, 2/3, 1/2, equal lengths (BP = 1): BLEU = 100 * 0.2 ** (1/4).
  out = bleu_scores.bleu_chrf(['a b c d e'], ['a b c d f'])
  assert out['bleu'] == pytest.approx(100 * 0.2**0.25, rel=1e-6)
  # All n-grams match, hypothesis half as long: BLEU = 100 * BP = 100 * exp(1 - 8/4).
  out = bleu_scores.bleu_chrf(['a b c d'], ['a b c d e f g h'])
  assert out['bleu'] == pytest.approx(100 * math.exp(-1.0), rel=1e-6)
  out = bleu_scores.bleu_chrf(['abc def ghi jkl'], ['abc def ghi jkl'])
  assert out == pytest.approx({'bleu': 100.0, 'chrf': 100.0})
  assert bleu_scores.bleu_chrf(['abc'], ['xyz'])['chrf'] == pytest.approx(0.0)


def test_bleu_several_and_varying_references():
  hyps = ['a b c d e', 'f g h i j']
  # The matching reference of the first source is its second one; the second source has one.
  out = bleu_scores.bleu_chrf(hyps, [['v w x y z', 'a b c d e'], ['f g h i j']])
  assert out == pytest.approx({'bleu': 100.0, 'chrf': 100.0})
  single = bleu_scores.bleu_chrf(hyps, [['v w x y z'], ['f g h i j']])
  assert single['bleu'] < 100.0


def test_bleu_statistics_sum_to_the_corpus_bleu_of_any_resample():
  # Hand-checked rows, then sacrebleu's own corpus BLEU of subsets and of a resample with
  # repeats (references of varying number per source) as the independent reference.
  rows = bleu_scores.bleu_statistics(['a b c d e', 'a b'], [['a b c d f'], ['x a b', 'a b']])
  # sentence 1: lengths 5/5, matches 4,3,2,1 of 5,4,3,2; sentence 2: the closest reference is
  # 'a b' (length 2), matches 2,1,0,0 of 2,1,0,0.
  assert rows.tolist() == [[5, 5, 4, 3, 2, 1, 5, 4, 3, 2], [2, 2, 2, 1, 0, 0, 2, 1, 0, 0]]
  rng = np.random.default_rng(0)
  words = 'the a cat dog sat ran on under mat rug'.split()
  sentence = lambda: ' '.join(rng.choice(words, rng.integers(1, 12)))
  hyps = [sentence() for _ in range(60)]
  refs = [[sentence() for _ in range(rng.integers(1, 3))] for _ in range(60)]
  stats = bleu_scores.bleu_statistics(hyps, refs)
  for picked in (np.arange(60), np.arange(0, 60, 7), rng.integers(0, 60, 60)):
    ours = bleu_scores.bleu_from_statistics(stats[picked].sum(0))
    theirs = bleu_scores.bleu_chrf([hyps[i] for i in picked], [refs[i] for i in picked])['bleu']
    assert ours == pytest.approx(theirs, abs=1e-9)


def test_bleu_statistics_give_sacrebleus_brevity_penalty_to_short_and_long_systems():
  # One system shorter than its references (BP = exp(1 - r/c) < 1), one longer (BP = 1): the
  # summed statistics must score each as sacrebleu's corpus BLEU does, which computes its
  # brevity penalty independently of this module.
  rng = np.random.default_rng(4)
  words = 'the a cat dog sat ran on under mat rug'.split()
  refs = [list(rng.choice(words, rng.integers(3, 12))) for _ in range(80)]
  keep = lambda ref: [w for w in ref if rng.random() < 0.7] or ref[:1]
  grow = lambda ref: [v for w in ref for v in ([w, 'cat'] if rng.random() < 0.3 else [w])]
  references = [' '.join(r) for r in refs]
  for change, shorter in ((keep, True), (grow, False)):
    hyps = [' '.join(change(r)) for r in refs]
    theirs = sacrebleu.corpus_bleu(hyps, [references])
    assert (theirs.sys_len < theirs.ref_len) == shorter
    assert theirs.bp < 0.95 if shorter else theirs.bp == 1.0
    sums = bleu_scores.bleu_statistics(hyps, references).sum(0)
    assert sums[:2].tolist() == [theirs.sys_len, theirs.ref_len]
    assert bleu_scores.bleu_from_statistics(sums) == pytest.approx(theirs.score, abs=1e-9)
    # The long system has no penalty: its score is the geometric mean of the precisions.
    if not shorter:
      precisions = [m / n for m, n in zip(sums[2:6], sums[6:], strict=True)]
      expected = 100 * math.exp(sum(math.log(p) for p in precisions) / 4)
      assert bleu_scores.bleu_from_statistics(sums) == pytest.approx(expected, rel=1e-9)


def test_by_length_bucket():
  lengths = [1, 3, 5, 6, 9, 10, 14, 30]
  values = [1, 0, 1, 1, 1, 0, 0, 1]
  out = metrics.by_length_bucket(lengths, values, [1, 6, 11, 21, math.inf])
  assert out == [
    {'bucket': '1-5', 'count': 3, 'mean': pytest.approx(2 / 3)},
    {'bucket': '6-10', 'count': 3, 'mean': pytest.approx(2 / 3)},
    {'bucket': '11-20', 'count': 1, 'mean': 0.0},
    {'bucket': '21+', 'count': 1, 'mean': 1.0},
  ]
  assert metrics.by_length_bucket([2], [1.0], [0, 2, 4])[0] == {
    'bucket': '0-1',
    'count': 0,
    'mean': None,
  }
  with pytest.raises(ValueError, match=r'length 30 is outside the buckets \[1, 21\)'):
    metrics.by_length_bucket(lengths, values, [1, 11, 21])
  with pytest.raises(ValueError, match='strictly increasing'):
    metrics.by_length_bucket(lengths, values, [1, 1, 40])


def test_attention_entropy_hand_values():
  # Row 0 uniform over 4 -> log 4; row 1 one-hot -> 0; row 2 (1/2, 1/4, 1/4, 0) -> 1.5 log 2;
  # row 3 and column 4 are padding and must be ignored.
  w = np.array(
    [
      [0.25, 0.25, 0.25, 0.25, 0.0],
      [0.0, 1.0, 0.0, 0.0, 0.0],
      [0.5, 0.25, 0.25, 0.0, 0.0],
      [0.0, 0.0, 0.0, 0.0, 1.0],
    ]
  )
  want = (math.log(4) + 0 + 1.5 * math.log(2)) / 3
  assert metrics.attention_entropy(w, src_len=4, tgt_len=3) == pytest.approx(want)
  # Without lengths the whole (already sliced) block counts.
  assert metrics.attention_entropy(w[:3, :4]) == pytest.approx(want)
  # Rows are renormalised: halving a row does not change its entropy.
  assert metrics.attention_entropy(w * 0.5, 4, 3) == pytest.approx(want)
  with pytest.raises(ValueError, match='no target step has weight on the first 3'):
    metrics.attention_entropy(np.zeros((2, 3)), 3, 2)
  with pytest.raises(ValueError, match='src_len=6, tgt_len=3 must be in 1..5 and 1..4'):
    metrics.attention_entropy(w, 6, 3)


def test_attention_entropy_skips_steps_that_attend_nowhere():
  # local_m past the source: steps 2 and 3 have all-zero weights and are left out of the mean.
  w = np.array([[0.5, 0.5, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
  assert metrics.attention_entropy(w) == pytest.approx(math.log(2) / 2)


def test_alignment_error_rate_counts_a_step_attending_nowhere_as_a_miss():
  # Step 1's all-zero row has argmax 0 = its gold position, but it attends nowhere: a miss.
  w = np.array([[0.0, 1.0], [0.0, 0.0]])
  assert metrics.alignment_error_rate(w, [1, 0]) == pytest.approx(0.5)


@pytest.mark.slow
def test_local_m_decoding_past_the_source_goes_through_evaluation(tmp_path):
  """The real evaluation path (attnlab.evaluate): a local_m model that never emits EOS decodes
  12 steps from sources of 3-4 tokens (+EOS), so its late steps see no key in the window."""
  from attnlab.tokens import EOS_ID
  from configs import reverse

  config = reverse.get_config('smoke')
  with config.unlocked():
    config.parallel.num_devices = 1
    config.task.eval_lengths = (3, 4)
    config.task.num_eval_examples = 6
    config.model.attention.window = 'local_m'
    config.model.attention.window_radius = 1
    config.eval.max_decode_length = 12
    config.eval.num_heatmaps = 6
  run, state, _, _ = train_start.setup(config, str(tmp_path))
  run.ckpt.close()
  params = jax.tree.map(np.array, state.params)  # host copies we may write to
  params['decoder']['w_o']['bias'][EOS_ID] = -1e4  # never stop before max_decode_length
  result = run.evaluator.evaluate(run.parallel.replicate(params), 'eval', step=0)

  saved = np.load(tmp_path / 'attention' / 'eval_step0000000.npz')
  entropies, empty_steps = [], 0
  for name in saved.files:
    if not name.startswith('weights_'):
      continue
    w_TxS = saved[name].astype(np.float64)
    assert w_TxS.shape[0] == 12 and w_TxS.shape[1] <= 5
    rows = [row / row.sum() for row in w_TxS if row.sum() > 0]
    empty_steps += len(w_TxS) - len(rows)
    entropies.append(np.mean([-sum(p * math.log(p) for p in row if p > 0) for row in rows]))
  assert len(entropies) == 6 and empty_steps >= 6 * (12 - 6)  # steps t >= S_b + 1 see no key
  assert result['attention_entropy'] == pytest.approx(np.mean(entropies), rel=1e-5)


def test_alignment_error_rate():
  w = np.array(
    [
      [0.1, 0.7, 0.2, 0.0],
      [0.6, 0.3, 0.1, 0.0],
      [0.2, 0.2, 0.6, 0.0],
      [0.3, 0.3, 0.4, 0.0],  # EOS step: gold -1, not scored
      [0.0, 0.0, 0.0, 1.0],  # padding row
    ]
  )
  gold = [1, 2, 2, -1, 0]
  # argmax per scored step: 1, 0, 2 vs gold 1, 2, 2 -> one error in three.
  assert metrics.alignment_error_rate(w, gold, src_len=3, tgt_len=4) == pytest.approx(1 / 3)
  assert metrics.alignment_error_rate(w[:4, :3], gold[:4]) == pytest.approx(1 / 3)
  # Reversal alignment hit exactly.
  s = 5
  rev = np.eye(s)[::-1]
  assert metrics.alignment_error_rate(rev, list(range(s - 1, -1, -1)), s, s) == 0.0
  with pytest.raises(ValueError, match='no target step has a gold link'):
    metrics.alignment_error_rate(w, [-1] * 5, 3, 4)
  with pytest.raises(ValueError, match='gold position 3 is not a source position'):
    metrics.alignment_error_rate(w, [3, 0, 0, 0], 3, 4)
