"""Greedy and beam search against brute force, a plain-Python beam search and real models.

The toy model is a second-order Markov chain per batch row: the next-token log-probs depend on
the fed token and, through the carry, the one before it, so a beam whose carry row is gathered
from the wrong origin scores the wrong continuations. Its attention is a function of the whole
fed history, so a wrongly gathered attention history shows too.
"""

import functools
import itertools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from support.config_builders import model_config

from attnlab.decoding import beam, greedy, hypotheses
from attnlab.models.seq2seq import Seq2Seq
from attnlab.models.transformer import Transformer
from attnlab.tokens import BOS_ID, EOS_ID, PAD_ID

V, S, T = 5, 3, 4  # tokens PAD, BOS, EOS and two symbols; source length; max_length


def beam_search(step_fn, init_carry, **kwargs):
  """The best finished hypothesis of each row, as evaluation reads beam search's n-best."""
  return beam.beam_search_nbest(step_fn, init_carry, **kwargs).best()


def _table(seed, batch, eos_bias=0.0):
  """Logits[row, prev2, prev1, next], spread wide enough that beams and greedy disagree."""
  logits = 2.0 * np.random.default_rng(seed).normal(size=(batch, V, V, V))
  logits[..., EOS_ID] += eos_bias
  return logits.astype(np.float32)


def _toy_step_fn(table_BxVxVxV):
  def step_fn(tokens_N, carry):
    logits_NxV = table_BxVxVxV[carry['row_N'], carry['prev_N'], tokens_N]
    hist_N = (carry['hist_N'] * 7 + tokens_N + 1) % 101
    angle_NxS = hist_N.astype(jnp.float32)[:, None] * (0.37 * jnp.arange(1, S + 1))[None, :]
    attn_NxS = jax.nn.softmax(jnp.sin(angle_NxS), axis=-1)
    return logits_NxV, attn_NxS, dict(row_N=carry['row_N'], prev_N=tokens_N, hist_N=hist_N)

  return step_fn


def _init_carry(batch):
  return dict(
    row_N=jnp.arange(batch),
    prev_N=jnp.full((batch,), BOS_ID),
    hist_N=jnp.zeros((batch,), jnp.int32),
  )


@functools.partial(jax.jit, static_argnames=('beam_size', 'alpha', 'max_length'))
def _beam(table, *, beam_size, alpha, max_length=T):
  return beam_search(
    _toy_step_fn(table),
    _init_carry(table.shape[0]),
    batch_size=table.shape[0],
    beam_size=beam_size,
    max_length=max_length,
    length_penalty=alpha,
  )


@functools.partial(jax.jit, static_argnames=('max_length',))
def _greedy(table, *, max_length=T):
  return greedy.greedy_search(
    _toy_step_fn(table),
    _init_carry(table.shape[0]),
    batch_size=table.shape[0],
    max_length=max_length,
  )


# ---- NumPy references ------------------------------------------------------------------------


BANNED = (PAD_ID, BOS_ID)  # search never emits these


def _np_log_softmax(x):
  """Log-softmax over the tokens search may emit; PAD and BOS get -inf."""
  x = np.array(x, np.float64)
  x[list(BANNED)] = -np.inf
  return x - x.max() - np.log(np.exp(x - x.max()).sum())


def _np_logp(table_row, tokens):
  """Sum of log-probs of a hypothesis (fed BOS, tokens[:-1])."""
  prev2, prev1, total = BOS_ID, BOS_ID, 0.0
  for tok in tokens:
    total += _np_log_softmax(table_row[prev2, prev1])[tok]
    prev2, prev1 = prev1, tok
  return total


def _np_score(logp, length, alpha):
  return logp / ((5.0 + length) / 6.0) ** alpha


def _np_attention(tokens, length):
  """The toy attention of every step of a hypothesis, zero after its end: T x S."""
  out, hist = np.zeros((T, S)), 0
  for t, fed in enumerate([BOS_ID, *tokens[: length - 1]]):
    hist = (hist * 7 + fed + 1) % 101
    e = np.exp(np.sin(hist * 0.37 * np.arange(1, S + 1)))
    out[t] = e / e.sum()
  return out


def _all_hypotheses(max_length):
  """Every complete output: ends at its first EOS, or runs to max_length."""
  other = [v for v in range(V) if v != EOS_ID and v not in BANNED]
  for length in range(1, max_length + 1):
    for prefix in itertools.product(other, repeat=length - 1):
      yield (*prefix, EOS_ID)
      if length == max_length:
        yield from ((*prefix, v) for v in other)


def _np_beam(table_row, beam_size, alpha, max_length=T):
  """Plain-Python beam search with the module docstring's rules; returns the best finished."""
  return _np_beam_nbest(table_row, beam_size, alpha, max_length)[0]


def _np_beam_nbest(table_row, beam_size, alpha, max_length=T):
  """The same search's finished set: its `beam_size` best (score, logp, tokens), best first."""
  alive, finished = [((), 0.0)], []
  for i in range(max_length):
    cands = []
    for toks, logp in alive:
      prev2, prev1 = ((BOS_ID, BOS_ID) + toks)[-2:]
      step_logp = _np_log_softmax(table_row[prev2, prev1])
      cands += [(logp + step_logp[v], (*toks, v)) for v in range(V)]
    cands = sorted(cands, key=lambda c: -c[0])[: 2 * beam_size]
    marked = [(lp, toks, toks[-1] == EOS_ID or i == max_length - 1) for lp, toks in cands]
    finished += [
      (_np_score(lp, i + 1, alpha), lp, toks)
      for lp, toks, end in marked[:beam_size]
      if end and np.isfinite(lp)
    ]
    alive = [(toks, lp) for lp, toks, end in marked if not end][:beam_size]
    if len(finished) >= beam_size:
      break
  return sorted(finished, key=lambda f: -f[0])[:beam_size]


def _padded(tokens):
  return np.array(list(tokens) + [PAD_ID] * (T - len(tokens)))


# ---- toy model -------------------------------------------------------------------------------


@pytest.mark.parametrize('beam_size,alpha', [(2, 0.0), (3, 0.6), (2, 2.0)])
def test_beam_matches_plain_python_beam_search(beam_size, alpha):
  table = _table(0, batch=4)
  got = _beam(jnp.asarray(table), beam_size=beam_size, alpha=alpha)
  for b in range(4):
    score, logp, toks = _np_beam(table[b], beam_size, alpha)
    np.testing.assert_array_equal(got.tokens_BxT[b], _padded(toks))
    assert int(got.lengths_B[b]) == len(toks)
    np.testing.assert_allclose(got.log_probs_B[b], logp, rtol=1e-5)
    np.testing.assert_allclose(got.scores_B[b], score, rtol=1e-5)
    np.testing.assert_allclose(got.attention_BxTxS[b], _np_attention(toks, len(toks)), atol=1e-5)


@functools.partial(jax.jit, static_argnames=('beam_size', 'alpha', 'max_length'))
def _nbest(table, *, beam_size, alpha, max_length=T):
  return beam.beam_search_nbest(
    _toy_step_fn(table),
    _init_carry(table.shape[0]),
    batch_size=table.shape[0],
    beam_size=beam_size,
    max_length=max_length,
    length_penalty=alpha,
  )


@pytest.mark.parametrize('beam_size,alpha', [(3, 0.0), (4, 0.6)])
def test_nbest_is_the_finished_set_of_plain_python_beam_search(beam_size, alpha):
  table = _table(1, batch=4)
  got = _nbest(jnp.asarray(table), beam_size=beam_size, alpha=alpha)
  best = _beam(jnp.asarray(table), beam_size=beam_size, alpha=alpha)
  for b in range(4):
    want = _np_beam_nbest(table[b], beam_size, alpha)
    assert len(want) == beam_size and bool(np.all(got.valid_BxK[b]))
    lengths = got.lengths_BxK[b]
    hyps = [tuple(got.tokens_BxKxT[b, k, : lengths[k]].tolist()) for k in range(beam_size)]
    assert hyps == [toks for _, _, toks in want]
    assert len(set(hyps)) == beam_size, 'n-best entries must be distinct'
    scores = np.asarray(got.scores_BxK[b])
    np.testing.assert_allclose(scores, [score for score, _, _ in want], rtol=1e-5)
    assert np.all(np.diff(scores) <= 0), 'sorted best first'
    np.testing.assert_allclose(got.log_probs_BxK[b], [lp for _, lp, _ in want], rtol=1e-5)
    for k, toks in enumerate(hyps):
      np.testing.assert_allclose(
        got.attention_BxKxTxS[b, k], _np_attention(toks, len(toks)), atol=1e-5
      )
  # beam_search is the n-best list's first entry.
  np.testing.assert_array_equal(best.tokens_BxT, got.tokens_BxKxT[:, 0])
  np.testing.assert_array_equal(best.scores_B, got.scores_BxK[:, 0])


def test_exhaustive_nbest_is_the_brute_force_top_k():
  table = _table(4, batch=3)
  width = (V - 1) ** (T - 1) * V  # nothing is pruned (as in the test below)
  got = _nbest(jnp.asarray(table), beam_size=width, alpha=0.6)
  k = 6
  for b in range(3):
    scored = sorted(
      ((_np_score(_np_logp(table[b], h), len(h), 0.6), h) for h in _all_hypotheses(T)),
      key=lambda sh: -sh[0],
    )
    top = [tuple(got.tokens_BxKxT[b, i, : got.lengths_BxK[b, i]].tolist()) for i in range(k)]
    assert top == [h for _, h in scored[:k]]
    np.testing.assert_allclose(got.scores_BxK[b, :k], [s for s, _ in scored[:k]], rtol=1e-5)


def test_nbest_of_greedy_is_a_one_entry_list():
  table = jnp.asarray(_table(2, batch=3, eos_bias=1.0))
  greedy = _greedy(table)
  one = hypotheses.NBestResult.of(greedy)
  assert one.tokens_BxKxT.shape == (3, 1, T) and bool(np.all(one.valid_BxK))
  np.testing.assert_array_equal(one.best().tokens_BxT, greedy.tokens_BxT)
  np.testing.assert_array_equal(one.best().attention_BxTxS, greedy.attention_BxTxS)


@pytest.mark.parametrize('alpha', [0.0, 0.6])
def test_exhaustive_beam_finds_brute_force_best(alpha):
  table = _table(4, batch=3)
  # Wide enough that every extension at every step ranks among the top W: nothing is pruned.
  got = _beam(jnp.asarray(table), beam_size=(V - 1) ** (T - 1) * V, alpha=alpha)
  greedy = _greedy(jnp.asarray(table))
  beam_beats_greedy = False
  for b in range(3):
    scored = [(_np_score(_np_logp(table[b], h), len(h), alpha), h) for h in _all_hypotheses(T)]
    best_score, best = max(scored)
    np.testing.assert_array_equal(got.tokens_BxT[b], _padded(best))
    np.testing.assert_allclose(got.scores_B[b], best_score, rtol=1e-5)
    greedy_toks = tuple(np.asarray(greedy.tokens_BxT[b, : greedy.lengths_B[b]]))
    beam_beats_greedy |= greedy_toks != best
  assert beam_beats_greedy, 'the table should contain a greedy trap, or this test proves little'


@pytest.mark.skipif(jax.default_backend() != 'cpu', reason='a property of XLA:CPU')
def test_beam_steps_never_sort_a_whole_vocabulary():
  # beam.top_k: XLA:CPU runs lax.top_k as its TopK kernel only if the sorted output is sliced
  # once; beam search's second slice made the W*V selection a full sort of every row (3x the
  # time of a Bible-sized beam batch).
  # How XLA lowers the small selections (2W of the finished and alive pools) may change
  # between versions; what must not appear is a sort along rows of whole vocabularies: V per
  # beam, W * V per example.
  W = 3
  hlo = _beam.lower(jnp.asarray(_table(0, 4)), beam_size=W, alpha=0.6).compile().as_text()
  sorts = re.findall(r'= \(?\w+\[([\d,]*)\][^\n]* sort\([^\n]*dimensions=\{(\d+)\}', hlo)
  assert len(sorts) == hlo.count(' sort('), 'an HLO sort this test cannot read'
  sorted_lengths = [int(shape.split(',')[int(dim)]) for shape, dim in sorts]
  assert not [n for n in sorted_lengths if n in (V, W * V)], sorted_lengths


@pytest.mark.slow
def test_greedy_equals_beam_size_one_for_any_length_penalty():
  table = jnp.asarray(_table(2, batch=6, eos_bias=1.0))
  greedy = _greedy(table)
  for alpha in (0.0, 0.6, 3.0):
    beam = _beam(table, beam_size=1, alpha=alpha)
    np.testing.assert_array_equal(beam.tokens_BxT, greedy.tokens_BxT)
    np.testing.assert_array_equal(beam.lengths_B, greedy.lengths_B)
    np.testing.assert_array_equal(beam.log_probs_B, greedy.log_probs_B)
    np.testing.assert_array_equal(beam.attention_BxTxS, greedy.attention_BxTxS)
  np.testing.assert_array_equal(greedy.scores_B, greedy.log_probs_B)
  assert len(set(np.asarray(greedy.lengths_B).tolist())) > 1, 'want rows of different lengths'


def test_greedy_matches_numpy_argmax_with_attention():
  table = _table(3, batch=5, eos_bias=1.0)
  got = _greedy(jnp.asarray(table))
  for b in range(5):
    toks = []
    while len(toks) < T and (not toks or toks[-1] != EOS_ID):
      prev2, prev1 = ([BOS_ID, BOS_ID] + toks)[-2:]
      toks.append(int(np.argmax(_np_log_softmax(table[b, prev2, prev1]))))
    np.testing.assert_array_equal(got.tokens_BxT[b], _padded(toks))
    assert int(got.lengths_B[b]) == len(toks)
    np.testing.assert_allclose(got.log_probs_B[b], _np_logp(table[b], toks), rtol=1e-5)
    np.testing.assert_allclose(got.attention_BxTxS[b], _np_attention(toks, len(toks)), atol=1e-5)


def test_most_probable_token_is_the_first_maximum_of_the_log_probabilities():
  # Rows chosen to break the obvious shortcuts: ties (argmax takes the first), the maximum on
  # PAD or BOS (never emitted), a vocabulary of 2,000 as the Bible's, a NaN row.
  rng = np.random.default_rng(0)
  rows = rng.normal(size=(6, 2000)).astype(np.float32)
  rows[0, [7, 3, 1500]] = 9.0  # tied: 3
  rows[1, PAD_ID] = rows[1, BOS_ID] = 50.0  # banned maxima
  rows[2] = 0.0  # all equal: the first token that may be emitted
  rows[3, 1999] = 1e6  # the last token
  rows[4, [12, 40]] = np.nan
  token, log_prob = hypotheses.most_probable_token(jnp.asarray(rows), BOS_ID)
  expected = [3, int(np.argmax(_np_log_softmax(rows[1]))), EOS_ID, 1999]
  expected.append(int(np.argmax(_np_log_softmax(rows[5]))))
  token = np.asarray(token).tolist()
  assert token[:4] + token[5:] == expected
  assert token[4] in range(2000) and token[4] not in BANNED and np.isnan(float(log_prob[4]))
  for n, want in zip((0, 1, 2, 3, 5), expected, strict=True):
    want = _np_log_softmax(rows[n])[want]
    np.testing.assert_allclose(float(log_prob[n]), want, rtol=1e-6, atol=1e-6)


def test_greedy_steps_use_no_value_and_index_reduction():
  # most_probable_token: XLA:CPU runs jnp.argmax as one reduce over (value, index) pairs,
  # unvectorised; a greedy step over a large vocabulary must not have one.
  hlo = _greedy.lower(jnp.asarray(_table(0, 4))).compile().as_text()
  pairs = re.findall(r'= \(f32\[[\d,]*\][^ ]*, s32\[[\d,]*\][^ ]*\) (\w+)\(', hlo)
  assert not [op for op in pairs if op in ('reduce', 'fusion')], pairs


@pytest.mark.parametrize('beam_size', [0, 3])
def test_eos_ends_a_hypothesis_and_padding_follows(beam_size):
  table = _table(4, batch=2)
  table[0, :, :, EOS_ID] = 30.0  # row 0 ends at once
  table[1, :, :, EOS_ID] = -30.0  # row 1 never ends: scored as it is at max_length
  run = (
    (lambda t: _greedy(t, max_length=6))
    if beam_size == 0
    else (lambda t: _beam(t, beam_size=beam_size, alpha=0.6, max_length=6))
  )
  got = run(jnp.asarray(table))
  np.testing.assert_array_equal(got.tokens_BxT[0], [EOS_ID] + [PAD_ID] * 5)
  assert got.lengths_B.tolist() == [1, 6]
  assert EOS_ID not in np.asarray(got.tokens_BxT[1]).tolist()
  np.testing.assert_array_equal(got.attention_BxTxS[0, 1:], 0.0)
  assert np.all(np.asarray(got.attention_BxTxS[1]).sum(-1) > 0.99)
  logp = _np_logp(table[1], np.asarray(got.tokens_BxT[1]))
  np.testing.assert_allclose(got.log_probs_B[1], logp, rtol=1e-5)
  alpha = 0.0 if beam_size == 0 else 0.6
  np.testing.assert_allclose(got.scores_B[1], _np_score(logp, 6, alpha), rtol=1e-5)


def test_jit_with_traced_carry_and_expand_to_beams_layout():
  table = jnp.asarray(_table(5, batch=2))
  run = jax.jit(
    lambda carry: beam_search(
      _toy_step_fn(table), carry, batch_size=2, beam_size=2, max_length=T
    )
  )
  np.testing.assert_array_equal(
    run(_init_carry(2)).tokens_BxT, _beam(table, beam_size=2, alpha=0.6).tokens_BxT
  )
  tiled = hypotheses.expand_to_beams({'x': jnp.array([[1, 2], [3, 4]])}, 3)
  np.testing.assert_array_equal(tiled['x'][:, 0], [1, 1, 1, 3, 3, 3])
  with pytest.raises(ValueError, match='beam_size=0'):
    beam_search(_toy_step_fn(table), _init_carry(2), batch_size=2, beam_size=0, max_length=T)


# ---- real models -----------------------------------------------------------------------------


def _model_search(model, variables, src_BxS, max_length):
  """Greedy and beam-1 results through the model's encode/decode_step callback."""
  memory = jax.jit(functools.partial(model.apply, method=model.encode))(variables, src_BxS)
  carry = model.apply(variables, memory, max_length, method=model.init_decode_carry)

  def run(beam_size):
    mem = hypotheses.expand_to_beams(memory, max(beam_size, 1))
    step_fn = lambda tok, c: model.apply(variables, mem, tok, c, method=model.decode_step)
    kw = dict(batch_size=src_BxS.shape[0], max_length=max_length)
    if beam_size == 0:
      return greedy.greedy_search(step_fn, carry, **kw)
    return beam_search(step_fn, carry, beam_size=beam_size, **kw)

  return jax.jit(run, static_argnums=0)


def _tiny_model(kind):
  """A random tiny model and a seed that makes it end its rows at different steps."""
  if kind == 'transformer':
    transformer = dict(num_heads=2, mlp_dim=32, max_length=8)
    config = model_config(
      kind=kind, hidden_size=16, decoder_layers=2, dropout=0.0, transformer=transformer
    )
    return Transformer(config, 9, 7), 8  # ends after 5, 5 and never
  config = model_config(kind=kind, embed_dim=8, hidden_size=16, dropout=0.0)
  return Seq2Seq(config, 9, 7), 2  # ends after 2, never, never


@pytest.mark.slow
@pytest.mark.parametrize('kind', ['transformer', 'rnn'])
def test_model_greedy_equals_beam1_and_naive_argmax_loop(kind):
  model, seed = _tiny_model(kind)
  src = jnp.array([[5, 6, 7, 8, EOS_ID], [4, 6, EOS_ID, PAD_ID, PAD_ID], [8, 8, 5, EOS_ID, PAD_ID]])
  variables = jax.jit(model.init)(jax.random.key(seed), src, jnp.ones((3, 6), jnp.int32))
  run = _model_search(model, variables, src, max_length=6)
  greedy, beam = run(0), run(1)
  np.testing.assert_array_equal(beam.tokens_BxT, greedy.tokens_BxT)
  np.testing.assert_array_equal(beam.lengths_B, greedy.lengths_B)
  np.testing.assert_allclose(beam.log_probs_B, greedy.log_probs_B, rtol=1e-6)
  np.testing.assert_allclose(beam.attention_BxTxS, greedy.attention_BxTxS, atol=1e-6)

  # Naive decoding: rerun the full forward pass on everything decoded so far, at one static
  # width (causality makes the not-yet-decoded tail irrelevant; pinned in the model tests).
  forward = jax.jit(lambda tgt: model.apply(variables, src, tgt))
  tgt_in = jnp.full((3, 7), BOS_ID, jnp.int32)
  for t in range(6):
    logits_BxV = forward(tgt_in[:, :6])[:, t].at[:, jnp.array(BANNED)].set(-jnp.inf)
    next_B = jnp.argmax(logits_BxV, axis=-1).astype(jnp.int32)
    tgt_in = tgt_in.at[:, t + 1].set(next_B)
  for b in range(3):
    naive = np.asarray(tgt_in[b, 1:]).tolist()
    naive = naive[: naive.index(EOS_ID) + 1] if EOS_ID in naive else naive
    np.testing.assert_array_equal(greedy.tokens_BxT[b], naive + [PAD_ID] * (6 - len(naive)))
  assert len(set(np.asarray(greedy.lengths_B).tolist())) > 1, 'want rows of different lengths'
