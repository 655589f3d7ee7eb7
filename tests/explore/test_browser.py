"""The explorer in a real browser: headless Chromium (selenium, tests/support/headless_chromium.py).

`test_typed_input_shows_the_decode_output_and_its_attention` opens the page of trained runs side
by side, types an input, waits for the heatmaps, checks that each run's displayed output is
what `python -m attnlab.decode` prints for that input and that its cells show their weights'
colours, hovers an anti-diagonal cell and reads the tooltip, and saves a screenshot:
docs/explore.png (the README's picture) when ATTNLAB_UPDATE_SCREENSHOTS=1, else the test's
tmp_path. The runs are the session's tiny
reverse run twice, or the run directories in ATTNLAB_EXPLORE_RUNS (os.pathsep-separated;
the README's picture: a Bahdanau and a Luong run of configs/reverse.py, as its docstring).
`test_head_selector_nbest_rows_and_errors` drives a 4-head model: eval examples with markup
stay text, an over-long one shows the server's message, the layer/head selector and a click
on an n-best row show the weights the decode API returns.
"""

import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

# First: without chromium, chromedriver or selenium it skips this module (under CI, fails it).
from support import REPO
from support.headless_chromium import cell_colours, chromium, fit_window, save_screenshot

# isort: split
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait
from support.random_runs import random_run

from attnlab.explore import api
from attnlab.explore import server as explore
from attnlab.reporting import html_heatmaps
from configs import reverse

TYPED = 'attentionisgreat'  # 16 symbols of reverse's a-t
WAIT_S = 120  # the first decode of a run compiles its search


@pytest.fixture
def serving():
  """serving(explorer) -> the page's URL; the server stops after the test."""
  servers = []

  def start(explorer):
    server = explore.serve(explorer, '127.0.0.1', 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    servers.append(server)
    return server.url

  yield start
  for server in servers:
    server.shutdown()
    server.server_close()


@pytest.fixture
def browser():
  with chromium() as driver:
    yield driver


def wait_for(browser, state):
  WebDriverWait(browser, WAIT_S).until(
    lambda b: b.execute_script('return document.body.dataset.state') in (state, 'error'))
  error = browser.find_element(By.ID, 'error')
  assert state == 'error' or not error.is_displayed(), error.text


def decode_cli(workdir, text):
  """What `python -m attnlab.decode --workdir=RUN` prints for one input line."""
  done = subprocess.run([sys.executable, '-m', 'attnlab.decode', f'--workdir={workdir}'],
                        cwd=REPO, input=text + '\n', capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr
  return done.stdout.removesuffix('\n')


def ask(browser, text, nbest=1):
  browser.execute_script("document.body.dataset.state = 'asked'")  # not a stale done / error
  field = browser.find_element(By.ID, 'input')
  field.clear()
  field.send_keys(text)
  count = browser.find_element(By.ID, 'nbest')
  count.clear()
  count.send_keys(str(nbest))
  browser.find_element(By.CSS_SELECTOR, 'form.ask button').click()


def heatmap_weights(pane):
  return [[np.float32(td.get_attribute('data-w')) for td in row.find_elements(By.TAG_NAME, 'td')]
          for row in pane.find_elements(By.CSS_SELECTOR, 'table.heatmap tbody tr')]


def hover(browser, pane, t, s):
  """Hovers cell (output t, source s) of the pane's heatmap; the tooltip's lines."""
  row = pane.find_elements(By.CSS_SELECTOR, 'table.heatmap tbody tr')[t]
  ActionChains(browser).move_to_element(row.find_elements(By.TAG_NAME, 'td')[s]).perform()
  tip = browser.find_element(By.ID, 'tip')
  WebDriverWait(browser, 5).until(lambda _: tip.is_displayed())
  return tip.text.splitlines()


@pytest.mark.slow
def test_typed_input_shows_the_decode_output_and_its_attention(tiny_reverse_run, serving,
                                                               browser, tmp_path):
  workdirs = os.environ.get('ATTNLAB_EXPLORE_RUNS', '').split(os.pathsep)
  workdirs = [w for w in workdirs if w] or [tiny_reverse_run, tiny_reverse_run]
  explorer = explore.load_runs(workdirs)
  browser.get(serving(explorer))
  wait_for(browser, 'ready')
  assert browser.title == 'attnlab explorer'
  ask(browser, TYPED)
  wait_for(browser, 'done')
  panes = browser.find_elements(By.CSS_SELECTOR, 'section.run')
  assert [p.find_element(By.TAG_NAME, 'h2').text for p in panes] == explorer.labels
  expected = [run.decode([TYPED])[0] for run in explorer.runs]
  for pane, workdir, result in zip(panes, workdirs, expected, strict=True):
    shown = pane.find_element(By.CSS_SELECTOR, 'p.best code').get_attribute('textContent')
    assert shown == decode_cli(workdir, TYPED) == result.output
    rows = pane.find_elements(By.CSS_SELECTOR, 'table.nbest tbody tr')
    assert [r.find_elements(By.TAG_NAME, 'td')[1].text for r in rows] == [result.output]
    assert heatmap_weights(pane) == result.attention.tolist()
    heatmap = pane.find_element(By.CSS_SELECTOR, 'table.heatmap')
    assert cell_colours(heatmap) == html_heatmaps.colors(result.attention).tolist()
    assert not pane.find_element(By.CSS_SELECTOR, '.selectors').is_displayed()  # one head

  fit_window(browser)  # the whole page in the screenshot
  # Output step t copies source position S-2-t of the reverse task (S counts <eos>).
  pane, result = panes[-1], expected[-1]
  t = min(3, len(result.hypotheses[0].tokens) - 1)
  s = len(TYPED) - 1 - t
  assert hover(browser, pane, t, s) == [
    f'source {result.source_tokens[s]}',
    f'target {result.hypotheses[0].tokens[t]}',
    f'weight {result.attention[t, s]:.4f}',
  ]
  lit = [th.text for th in pane.find_elements(By.CSS_SELECTOR, 'th.lit')]
  assert sorted(lit) == sorted([result.source_tokens[s], result.hypotheses[0].tokens[t]])
  errors = [e for e in browser.get_log('browser') if e['level'] == 'SEVERE']
  assert not errors, errors
  save_screenshot(browser, 'explore.png', tmp_path)  # docs/ with ATTNLAB_UPDATE_SCREENSHOTS=1


@pytest.mark.slow
def test_head_selector_nbest_rows_and_errors(serving, browser, tmp_path):
  config = reverse.get_config('smoke')
  with config.unlocked():
    config.model.attention.num_heads = 4
    config.model.attention.score = 'scaled_dot'
  run = random_run(config, tmp_path)
  markup, script = '<img src=x onerror="window.pwned=1">', '<script>window.pwned=1</script>'
  example = {'index': 0, 'source': markup, 'reference': script, 'hypothesis': '',
             'correct': False}  # a source over the limit of 24 tokens
  (tmp_path / 'predictions_eval.jsonl').write_text(json.dumps(example) + '\n', encoding='utf-8')
  browser.get(serving(api.Explorer([run], ['four heads'])))
  wait_for(browser, 'ready')

  examples = Select(browser.find_element(By.ID, 'examples'))
  shown = examples.options[1].get_attribute('textContent')
  assert shown == f'#0  {markup}  \u2192  {script}'
  examples.select_by_index(1)  # decodes it: refused, with the server's message
  wait_for(browser, 'error')
  assert browser.find_element(By.ID, 'error').text.startswith(
    f'four heads: the input is not decoded: {len(markup) + 1} tokens (EOS included) exceed '
    'the limit of 24')
  assert browser.execute_script('return [window.pwned, document.images.length, '
                                'document.scripts.length]') == [None, 0, 1]

  ask(browser, 'abcdefg', nbest=2)
  wait_for(browser, 'done')
  (result,) = run.decode(['abcdefg'], nbest=2, heads=True, search='beam', beam_size=5)
  pane = browser.find_element(By.CSS_SELECTOR, 'section.run')
  layer = Select(pane.find_element(By.CSS_SELECTOR, 'select.layer'))
  head = Select(pane.find_element(By.CSS_SELECTOR, 'select.head'))
  assert pane.find_element(By.CSS_SELECTOR, '.selectors').is_displayed()
  assert [o.text for o in layer.options] == ['cross attention']
  assert [o.text for o in head.options] == ['head 0', 'head 1', 'head 2', 'head 3', 'mean']
  assert head.first_selected_option.text == 'mean'
  heads_NxTxS = result.hypotheses[0].heads['cross attention']
  np.testing.assert_allclose(heatmap_weights(pane), heads_NxTxS.mean(axis=0), atol=1e-6)
  head.select_by_visible_text('head 2')
  assert pane.find_element(By.TAG_NAME, 'figcaption').text == 'cross attention, head 2'
  assert heatmap_weights(pane) == heads_NxTxS[2].tolist()
  assert hover(browser, pane, 1, 3)[-1] == f'weight {heads_NxTxS[2][1, 3]:.4f}'

  rows = pane.find_elements(By.CSS_SELECTOR, 'table.nbest tbody tr')
  assert [r.find_elements(By.TAG_NAME, 'td')[1].text for r in rows] == [
    h.text for h in result.hypotheses]
  rows[1].click()  # the second hypothesis' attention, same head
  assert 'chosen' in rows[1].get_attribute('class')
  assert heatmap_weights(pane) == result.hypotheses[1].heads['cross attention'][2].tolist()
  browser.save_screenshot(str(tmp_path / 'heads.png'))  # to look at when this test fails
