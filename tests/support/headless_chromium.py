"""Headless Chromium driven by selenium, for the tests that open a page in a real browser
(tests/reporting/test_browser.py: report.html from disk; tests/explore/test_browser.py: the
explorer).

Importing this module skips the importing test module, saying which, when chromium,
chromedriver (Debian: chromium, chromium-driver) or selenium is missing, and fails it under CI
(support.parts.require); .ci/run installs the Debian packages. `save_screenshot` writes into docs/
(the docs' pictures) when ATTNLAB_UPDATE_SCREENSHOTS=1, else into the test's tmp_path;
`cell_colours` reads the colours a heatmap's cells are shown in.
"""

import contextlib
import importlib.util
import os
import re
import shutil
import tempfile
from pathlib import Path

from support import REPO
from support.parts import require

CHROMIUM = shutil.which('chromium') or shutil.which('chromium-browser')
CHROMEDRIVER = shutil.which('chromedriver')
DOCS = REPO / 'docs'
WIDTH = 1440
FLAGS = (
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
  '--disable-dev-shm-usage',  # containers often give /dev/shm 64 MB
)

require('chromium', CHROMIUM is not None, 'apt-get install chromium')
require('chromedriver', CHROMEDRIVER is not None, 'apt-get install chromium-driver')
require('selenium', importlib.util.find_spec('selenium') is not None, "pip install -e '.[test]'")
from selenium import webdriver  # noqa: E402


@contextlib.contextmanager
def chromium(width: int = WIDTH, height: int = 900):
  """A headless Chromium with its own throw-away profile; the browser's console is logged."""
  options = webdriver.ChromeOptions()
  options.binary_location = CHROMIUM
  profile = tempfile.mkdtemp(prefix='attnlab-chromium-')
  for flag in FLAGS + (f'--user-data-dir={profile}', f'--window-size={width},{height}'):
    options.add_argument(flag)
  options.set_capability('goog:loggingPrefs', {'browser': 'ALL'})
  driver = webdriver.Chrome(service=webdriver.ChromeService(CHROMEDRIVER), options=options)
  try:
    yield driver
  finally:
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


def fit_window(driver, width: int = WIDTH) -> None:
  """The whole page in the viewport, unscrolled, so a screenshot shows all of it."""
  height, chrome = driver.execute_script(
    'return [document.documentElement.scrollHeight, window.outerHeight - window.innerHeight]'
  )
  driver.set_window_size(width, height + chrome)


def cell_colours(table) -> list[list[str]]:
  """The background colour that the browser shows for each cell of a heatmap table, as
  '#rrggbb', one list per output row."""
  rows = table.parent.execute_script(
    'return Array.from(arguments[0].tBodies[0].rows, function (row) {'
    '  return Array.from(row.cells).slice(1).map(function (td) {'
    '    return getComputedStyle(td).backgroundColor; }); });',
    table,
  )
  return [
    ['#{:02x}{:02x}{:02x}'.format(*map(int, re.findall(r'\d+', c)[:3])) for c in row]
    for row in rows
  ]


def save_screenshot(driver, name: str, tmp_path: Path) -> Path:
  """docs/NAME when ATTNLAB_UPDATE_SCREENSHOTS=1, else tmp_path/NAME; checked to be a PNG."""
  update = os.environ.get('ATTNLAB_UPDATE_SCREENSHOTS') == '1'
  target = (DOCS if update else tmp_path) / name
  target.parent.mkdir(parents=True, exist_ok=True)
  assert driver.save_screenshot(str(target))
  assert target.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
  return target
