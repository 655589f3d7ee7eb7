"""A model's search over a batch of sources: encode once, then greedy or beam search over its
decode step (decoding/hypotheses.py has the contract between them)."""

from __future__ import annotations

from attnlab.decoding.beam import beam_search_nbest
from attnlab.decoding.greedy import greedy_search
from attnlab.decoding.hypotheses import NBestResult, SearchResult, expand_to_beams


def search_batch(model, params, src_BxS, *, method: str, beam_size: int, max_length: int,
                 length_penalty: float) -> NBestResult:
  """Encodes once, then searches over `model.decode_step`; jit with the sizes static.

  Returns every hypothesis the search finished (beam: beam_size per row, best first; greedy:
  one), so evaluation and `attnlab.decode` run the same search.
  """
  variables = {'params': params}
  memory = model.apply(variables, src_BxS, method='encode')
  carry = model.apply(variables, memory, max_length, method='init_decode_carry')
  batch_size = src_BxS.shape[0]
  if method == 'beam':
    memory = expand_to_beams(memory, beam_size)
  step_fn = lambda tokens, c: model.apply(variables, memory, tokens, c, method='decode_step')
  if method == 'beam':
    return beam_search_nbest(step_fn, carry, batch_size=batch_size, beam_size=beam_size,
                             max_length=max_length, length_penalty=length_penalty)
  return NBestResult.of(
    greedy_search(step_fn, carry, batch_size=batch_size, max_length=max_length))


def decode_batch(model, params, src_BxS, *, method: str, beam_size: int, max_length: int,
                 length_penalty: float) -> SearchResult:
  """The best hypothesis of every row (`search_batch`'s first entry)."""
  return search_batch(model, params, src_BxS, method=method, beam_size=beam_size,
                      max_length=max_length, length_penalty=length_penalty).best()
