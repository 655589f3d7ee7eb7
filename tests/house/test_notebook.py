"""docs/tour.ipynb runs from start to end and prints what it was saved with (`make notebook`
executes it again and saves its outputs)."""

import copy
import os

import nbclient
import nbformat
import pytest
from support import REPO

NOTEBOOK = os.path.join(REPO, 'docs', 'tour.ipynb')


def _shown(cell) -> tuple[str, list[str]]:
  """A code cell's printed text, and the kinds of its rich outputs (images, tables)."""
  text, kinds = [], []
  for output in cell.get('outputs', []):
    if output['output_type'] == 'stream':
      text.append(output['text'])
    elif output['output_type'] in ('execute_result', 'display_data'):
      text.append(output['data'].get('text/plain', '') if 'image/png' not in output['data'] else '')
      kinds.extend(sorted(kind for kind in output['data'] if kind != 'text/plain'))
    elif output['output_type'] == 'error':
      text.append(f"{output['ename']}: {output['evalue']}")
  return ''.join(text), kinds


@pytest.mark.slow
def test_the_notebook_runs_and_shows_what_it_was_saved_with():
  saved = nbformat.read(NOTEBOOK, as_version=4)
  cells = [cell for cell in saved.cells if cell.cell_type == 'code']
  assert cells and all(cell.get('outputs') for cell in cells), 'saved without outputs'
  assert 'image/png' in sum((_shown(cell)[1] for cell in cells), [])  # the attention picture
  fresh = copy.deepcopy(saved)
  client = nbclient.NotebookClient(fresh, timeout=600, kernel_name='python3',
                                   resources={'metadata': {'path': os.path.dirname(NOTEBOOK)}})
  client.execute()
  ran = [cell for cell in fresh.cells if cell.cell_type == 'code']
  for before, after in zip(cells, ran, strict=True):
    assert _shown(after) == _shown(before), before.source.splitlines()[0]
