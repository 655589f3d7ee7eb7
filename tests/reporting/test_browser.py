"""A real browser opens report.html from disk: headless Chromium driven by selenium.

It sorts a table by clicking headers, hovers a heatmap cell and reads the tooltip, reads the
colours the cells are shown in, checks that the page loaded nothing and logged no error, and
saves a screenshot: into docs/report_html.png (docs/running.md's picture) when
ATTNLAB_UPDATE_SCREENSHOTS=1, else into the test's tmp_path.
Skipped, saying which, when chromium, chromedriver (Debian: chromium, chromium-driver) or
selenium is missing, and failed under CI (CI=true); .ci/run installs the Debian packages.
"""

import os
from pathlib import Path

import numpy as np
import pytest

# First: without chromium, chromedriver or selenium it skips this module (under CI, fails it).
from support.headless_chromium import cell_colours, chromium, fit_window, save_screenshot

# isort: split
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait
from support.fake_sweep import FINAL_STEP, make_sweep, trial_name

from attnlab.reporting import html_heatmaps
from attnlab.reporting import sweep_report as report

# Reverse task: output t copies source S-2-t, then <eos> looks at <eos>. Luong sharper.
EXAMPLES = (list('7391482'), list('50628'))
SPREAD = {'luong': 0.45, 'bahdanau': 0.8}


def reverse_attention(symbols, spread):
  """(weights_TxS, source, output): a Gaussian bump on the anti-diagonal, rows summing to 1."""
  source = symbols + ['<eos>']
  output = symbols[::-1] + ['<eos>']
  S = len(source)
  aligned = [S - 2 - t for t in range(S - 1)] + [S - 1]
  i = np.arange(S)
  weights = np.exp(-((i[None, :] - np.array(aligned)[:, None]) ** 2) / (2 * spread**2))
  return (weights / weights.sum(axis=1, keepdims=True)).astype(np.float32), source, output


@pytest.fixture
def sweep(tmp_path):
  root = make_sweep(str(tmp_path / 'sweep'))
  saved = {}
  for timing, spread in SPREAD.items():
    for seed in (0, 1):
      arrays = {}
      for index, symbols in enumerate(EXAMPLES):
        weights, source, output = reverse_attention(symbols, spread * (1 + 0.2 * seed))
        saved[timing, seed, index] = weights, source, output
        arrays.update(
          {
            f'weights_{index}': weights,
            f'source_{index}': np.array(source),
            f'output_{index}': np.array(output),
          }
        )
      folder = os.path.join(root, trial_name(timing, seed), 'attention')
      np.savez_compressed(os.path.join(folder, f'test_step{FINAL_STEP:07d}.npz'), **arrays)
  report.write_report(root)
  return Path(root) / 'report.html', saved


@pytest.fixture
def browser():
  with chromium() as driver:  # support/headless_chromium.py, shared with explore/test_browser.py
    yield driver


def _first_column(table):
  return [
    row.find_element(By.CSS_SELECTOR, 'td').text
    for row in table.find_elements(By.CSS_SELECTOR, 'tbody tr')
  ]


def _click(table, header):
  (th,) = [th for th in table.find_elements(By.CSS_SELECTOR, 'th') if th.text == header]
  th.click()
  return th.get_attribute('aria-sort')


@pytest.mark.slow
def test_report_in_a_browser(sweep, browser, tmp_path):
  path, saved = sweep
  browser.get(path.as_uri())
  assert browser.title == 'toy'
  fit_window(browser)  # the whole page in the viewport: the screenshot shows all of it

  table = browser.find_element(By.CSS_SELECTOR, 'table.sortable')
  assert _first_column(table) == ['timing=luong', 'timing=bahdanau', 'timing=none']
  # params 1,200 / 1,100 / 800: as text '800' would sort last.
  assert _click(table, 'params') == 'ascending'
  assert _first_column(table) == ['timing=none', 'timing=bahdanau', 'timing=luong']
  assert _click(table, 'params') == 'descending'
  assert _first_column(table) == ['timing=luong', 'timing=bahdanau', 'timing=none']
  # attention_entropy 0.6 / 1.1 / '–': the empty cell stays last both ways.
  assert _click(table, 'attention_entropy') == 'ascending'
  assert _first_column(table) == ['timing=luong', 'timing=bahdanau', 'timing=none']
  assert _click(table, 'attention_entropy') == 'descending'
  assert _first_column(table) == ['timing=bahdanau', 'timing=luong', 'timing=none']
  assert _click(table, 'wall/trial') == 'ascending'  # 0m30s, 1m10s, 1m45s
  assert _first_column(table) == ['timing=none', 'timing=luong', 'timing=bahdanau']

  # The second panel is bahdanau's example 0; hover output step t=2 at source position s=3.
  heatmap = browser.find_elements(By.CSS_SELECTOR, 'table.heatmap')[1]
  t, s = 2, 3
  cell = heatmap.find_elements(By.CSS_SELECTOR, 'tbody tr')[t].find_elements(By.CSS_SELECTOR, 'td')[
    s
  ]
  ActionChains(browser).move_to_element(cell).perform()
  tip = browser.find_element(By.ID, 'tip')
  WebDriverWait(browser, 5).until(lambda _: tip.is_displayed())
  weights, source, output = saved['bahdanau', 0, 0]
  assert tip.text.splitlines() == [
    f'source {source[s]}',
    f'target {output[t]}',
    f'weight {weights[t, s]:.4f}',
  ]
  lit = [th.text for th in heatmap.find_elements(By.CSS_SELECTOR, 'th.lit')]
  assert sorted(lit) == sorted([source[s], output[t]])
  # Every cell is shown in its weight's colour (the PNG heatmaps' colormap).
  assert cell_colours(heatmap) == html_heatmaps.colors(weights).tolist()

  # Self-contained: nothing was fetched, the page's script ran under its policy, no errors.
  assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0
  assert browser.execute_script('return document.scripts.length') == 1
  errors = [e for e in browser.get_log('browser') if e['level'] == 'SEVERE']
  assert not errors, errors

  save_screenshot(browser, 'report_html.png', tmp_path)  # docs/ with ATTNLAB_UPDATE_SCREENSHOTS=1
