"""writers (metrics.jsonl, TensorBoard event files, progress line) and heatmaps (PNG files)."""

import datetime
import io
import json
import math
import struct
import warnings

import matplotlib.image
import numpy as np
import pytest
from matplotlib import font_manager, ft2font
from matplotlib.backends.backend_agg import FigureCanvasAgg
from support.parts import require
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.compat.proto import event_pb2

from attnlab.data import dates
from attnlab.decoding import heatmaps
from attnlab.rundir import writers

PNG_MAGIC = b'\x89PNG\r\n\x1a\n'


def _crc32c(data: bytes) -> int:
  """Bitwise CRC-32C (Castagnoli), to check the TFRecord framing independently of TensorBoard."""
  crc = 0xFFFFFFFF
  for byte in data:
    crc ^= byte
    for _ in range(8):
      crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
  return crc ^ 0xFFFFFFFF


def _masked(data: bytes) -> int:
  crc = _crc32c(data)
  return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def _read_events(path):
  """Parses a TFRecord file of Event protos, checking both CRCs of every record."""
  data = path.read_bytes()
  events, pos = [], 0
  while pos < len(data):
    header = data[pos : pos + 8]
    (length,) = struct.unpack('<Q', header)
    (header_crc,) = struct.unpack('<I', data[pos + 8 : pos + 12])
    assert header_crc == _masked(header)
    body = data[pos + 12 : pos + 12 + length]
    (body_crc,) = struct.unpack('<I', data[pos + 12 + length : pos + 16 + length])
    assert body_crc == _masked(body)
    events.append(event_pb2.Event.FromString(body))
    pos += 16 + length
  return events


def _scalars(tb_dir):
  files = sorted(tb_dir.glob('events.out.tfevents.*'))
  assert len(files) == 1
  out = {}
  for event in _read_events(files[0]):
    for value in event.summary.value:
      out[(event.step, value.tag)] = value.simple_value
  # TensorBoard itself must read the same scalars.
  accumulator = event_accumulator.EventAccumulator(str(tb_dir))
  accumulator.Reload()
  seen = {
    (e.step, tag): e.value
    for tag in accumulator.Tags()['scalars']
    for e in accumulator.Scalars(tag)
  }
  assert seen == out
  return out


def test_metric_writer_jsonl_and_tensorboard(tmp_path):
  with writers.MetricWriter(tmp_path / 'run', enabled=True) as w:
    w.write(10, 'train', {'loss': np.float32(1.5), 'learning_rate': 0.001})
    w.write(20, 'train', {'loss': 1.25, 'token_accuracy': np.array(0.5)})
    buckets = [{'bucket': '1-5', 'count': 3, 'mean': 0.5}]
    w.write(20, 'eval', {'sequence_accuracy': 0.75, 'by_length': buckets, 'search': 'greedy'})
  lines = (tmp_path / 'run' / 'metrics.jsonl').read_text().splitlines()
  assert [json.loads(line) for line in lines] == [
    {'step': 10, 'split': 'train', 'loss': 1.5, 'learning_rate': 0.001},
    {'step': 20, 'split': 'train', 'loss': 1.25, 'token_accuracy': 0.5},
    {
      'step': 20,
      'split': 'eval',
      'sequence_accuracy': 0.75,
      'by_length': buckets,
      'search': 'greedy',
    },
  ]
  train = _scalars(tmp_path / 'run' / 'tensorboard' / 'train')
  assert train == pytest.approx(
    {
      (10, 'loss'): 1.5,
      (10, 'learning_rate'): 0.001,
      (20, 'loss'): 1.25,
      (20, 'token_accuracy'): 0.5,
    }
  )
  # Only numbers reach TensorBoard; lists and strings stay in metrics.jsonl.
  assert _scalars(tmp_path / 'run' / 'tensorboard' / 'eval') == {(20, 'sequence_accuracy'): 0.75}


def test_metric_writer_appends_on_resume(tmp_path):
  for step in (1, 2):
    with writers.MetricWriter(tmp_path, enabled=True) as w:
      w.write(step, 'train', {'loss': float(step)})
  lines = (tmp_path / 'metrics.jsonl').read_text().splitlines()
  assert [json.loads(line)['step'] for line in lines] == [1, 2]


def test_disabled_writer_creates_nothing(tmp_path):
  with writers.MetricWriter(tmp_path / 'other', enabled=False) as w:
    w.write(1, 'train', {'loss': 1.0})
  assert not (tmp_path / 'other').exists()


def test_reserved_names(tmp_path):
  with writers.MetricWriter(tmp_path, enabled=True) as w:
    with pytest.raises(ValueError, match="metric name 'step' is reserved"):
      w.write(1, 'train', {'step': 3})


def test_progress_line(capsys):
  times = iter([100.0, 110.0, 115.0])
  line = writers.ProgressLine(1000, start_step=200, clock=lambda: next(times))
  # 100 steps in 10 s -> 10 steps/s; 700 steps left -> 70 s.
  out = line.update(300, {'loss': np.float32(2.34567), 'perplexity': 10.4})
  assert out == 'step 300/1000 (30.0%) | 10.00 steps/s | ETA 1m10s | loss 2.346'
  assert capsys.readouterr().out == out + '\n'
  # 700 steps in 5 s -> 140 steps/s; done.
  assert line.update(1000) == 'step 1000/1000 (100.0%) | 140.00 steps/s | ETA 0m00s'


def test_eta_leaves_evaluation_out_of_the_rate_and_adds_the_evaluations_due():
  times = iter([0.0, 10.0, 10.0, 30.0, 40.0])
  line = writers.ProgressLine(1000, eval_every=500, clock=lambda: next(times), enabled=False)
  # 100 steps in 10 s; no evaluation measured yet: 900 steps at 10 steps/s.
  assert line.update(100) == 'step 100/1000 (10.0%) | 10.00 steps/s | ETA 1m30s'
  with line.evaluating():  # 20 s, from t=10 to t=30
    pass
  # 100 steps in 30 s of which 20 s evaluated: still 10 steps/s (not 3.33). 800 steps left
  # (80 s) and 3 evaluations due (steps 500 and 1000, then the final test one) at 20 s each.
  assert line.update(200) == 'step 200/1000 (20.0%) | 10.00 steps/s | ETA 2m20s'
  assert line.evaluations_due(999) == 2 and line.evaluations_due(1000) == 0


def test_progress_report_and_finish(capsys):
  times = iter([0.0, 30.0, 125.0])
  line = writers.ProgressLine(100, start_step=40, clock=lambda: next(times))
  line.update(50, {'loss': 1.0})
  report = line.report(50, 'eval', {'loss': 0.5, 'by_length': [{'bucket': '0-4'}], 'n': 7})
  assert report == 'eval @ step 50 | loss 0.5 | n 7'
  done = line.finish('/runs/x')
  assert done == 'done: steps 40-50 of 100 in 2m05s; results in /runs/x'
  assert capsys.readouterr().out.splitlines()[1:] == [report, done]


def _tokens(n, prefix):
  return [f'{prefix}{i}' for i in range(n)]


def test_save_heatmap_writes_png(tmp_path):
  rng = np.random.default_rng(0)
  w = rng.random((60, 55))
  w /= w.sum(axis=1, keepdims=True)
  path = tmp_path / 'maps' / 'one.png'
  heatmaps.save_heatmap(path, w, _tokens(55, 's'), _tokens(60, 't'), 'luong / general')
  data = path.read_bytes()
  assert data[:8] == PNG_MAGIC and len(data) > 10_000
  # The PNG header's width and height: the figure grows with the number of tokens.
  width, height = struct.unpack('>II', data[16:24])
  small = tmp_path / 'small.png'
  heatmaps.save_heatmap(small, np.eye(3), list('abc'), list('xyz'), 'tiny')
  small_width, small_height = struct.unpack('>II', small.read_bytes()[16:24])
  assert width > small_width and height > small_height


def test_a_heatmap_is_written_as_drawn_last_with_its_titles_wrapped(tmp_path, monkeypatch):
  # The PNG comes from the canvas of the last layout pass, not from a new drawing: it must be
  # the picture a fresh drawing of the finished figure gives, wrapped title included.
  figures, real_save = [], heatmaps._save

  def save(fig, path):
    figures.append(fig)
    real_save(fig, path)

  monkeypatch.setattr(heatmaps, '_save', save)
  title = 'test #12 step 24000 (wrong)\nreference: a long reference that cannot fit a small panel'
  path = tmp_path / 'wrapped.png'
  heatmaps.save_heatmap(path, np.eye(4), list('abcd'), list('wxyz'), title)
  (fig,) = figures
  assert fig.axes[0].get_title().count('\n') > title.count('\n')  # wrapped
  again = io.BytesIO()
  fig.savefig(again, format='png', dpi=fig.dpi)
  written, redrawn = (matplotlib.image.imread(f) for f in (str(path), io.BytesIO(again.getvalue())))
  np.testing.assert_array_equal(written, redrawn)


def test_save_heatmap_grid(tmp_path):
  panels = [
    ('dot', np.eye(4), list('abcd'), list('wxyz')),
    ('general', np.full((3, 4), 0.25), list('abcd'), list('xyz')),
    ('concat', np.eye(2), list('ab'), list('yz')),
  ]
  path = tmp_path / 'grid.png'
  heatmaps.save_heatmap_grid(path, panels, ncols=2)
  assert path.read_bytes()[:8] == PNG_MAGIC


def test_a_grid_leaves_room_around_its_titles(tmp_path, monkeypatch):
  # Two rows of G2P-sized panels, as a sweep report draws them: in the drawing written, every
  # title clears the figure's top and each row's x label clears the next row's titles.
  figures, real_save = [], heatmaps._save
  monkeypatch.setattr(heatmaps, '_save', lambda fig, path: (figures.append(fig),
                                                            real_save(fig, path)))
  source, output = [*'portell', '<eos>'], ['P', 'AO', 'R', 'T', 'EH', 'L', '<eos>']
  panels = [(f'dtype={d}\n#{i} (seed 0)', np.eye(7, 8), source, output)
            for i in range(2) for d in ('float32', 'bfloat16', 'bfloat16_matmuls')]
  heatmaps.save_heatmap_grid(tmp_path / 'grid.png', panels, ncols=3)
  (fig,) = figures
  renderer = fig.canvas.get_renderer()
  top, bottom = fig.axes[0:3], fig.axes[3:6]
  for ax in top + bottom:
    assert fig.bbox.height - ax.title.get_window_extent(renderer).y1 > 3, ax.get_title()
  for upper, lower in zip(top, bottom, strict=True):
    gap = upper.xaxis.label.get_window_extent(renderer).y0 - lower.title.get_window_extent(
      renderer).y1
    assert gap > 5, (upper.get_title(), gap)


@pytest.mark.slow
def test_long_panel_titles_wrap_to_their_panels(tmp_path, monkeypatch):
  # A sweep's grid (9 variants x 2 examples): its labels are wider than a small panel.
  figures = []
  monkeypatch.setattr(heatmaps, '_save', lambda fig, path: figures.append(fig))
  labels = [
    f'score={s}, timing={t}, input_feeding={f}\n#{i} (seed 0)'
    for i in range(2)
    for s in ('dot', 'general', 'concat')
    for t, f in (('bahdanau', False), ('luong', False), ('luong', True))
  ]
  panels = [(label, np.eye(8), _tokens(8, 's'), _tokens(8, 't')) for label in labels]
  heatmaps.save_heatmap_grid(tmp_path / 'grid.png', panels, ncols=9)
  (fig,) = figures
  renderer = FigureCanvasAgg(fig).get_renderer()
  fig.draw(renderer)
  titled = [ax for ax in fig.axes if ax.get_title()]
  assert len(titled) == 18
  for ax in titled:
    title, box = ax.title.get_window_extent(renderer), ax.get_window_extent(renderer)
    assert box.x0 - 1 <= title.x0 and title.x1 <= box.x1 + 1, ax.get_title()
    assert ax.title.get_fontsize() == heatmaps._TITLE_SIZE
  # Every word of each label is still there, in order.
  assert [ax.get_title().split() for ax in titled] == [label.split() for label in labels]


def test_heatmap_shape_mismatch():
  with pytest.raises(
    ValueError,
    match=r"'bad': weights have shape \(3, 4\) \[target, source\] "
    'but there are 3 target and 5 source tokens',
  ):
    heatmaps.save_heatmap('/nonexistent/x.png', np.zeros((3, 4)), list('abcde'), list('xyz'), 'bad')
  with pytest.raises(ValueError, match='weights must be 2-D'):
    heatmaps.save_heatmap_grid('/nonexistent/x.png', [('p', np.zeros(3), list('abc'), ['x'])])
  with pytest.raises(ValueError, match='no panels'):
    heatmaps.save_heatmap_grid('/nonexistent/x.png', [])


def test_progress_line_without_progress():
  line = writers.ProgressLine(10, enabled=False, clock=lambda: 5.0)
  out = line.update(0, {'loss': math.nan})
  assert out == 'step 0/10 (0.0%) | ? steps/s | ETA ? | loss nan'


def _dates_characters() -> dict[str, str]:
  """Every character of every month's name and every format the dates task writes: char ->
  the first locale that writes it."""
  chars = {}
  for locale in dates.LOCALES:
    for month in range(1, 13):
      day = datetime.date(2023, month, 10 + month)  # a weekday name each, too
      for length in dates.CLDR_LENGTHS:
        for char in dates.format_date(day, length, locale=locale):
          chars.setdefault(char, locale)
  return chars


def test_token_labels_have_a_glyph_for_every_character_of_the_dates_task(tmp_path):
  families = heatmaps.token_families()
  missing = sorted(set(heatmaps.FALLBACK_FONTS) - set(families))
  require(
    f'the fonts {", ".join(missing)}',
    not missing,
    'apt-get install fonts-noto-core fonts-droid-fallback fonts-nanum',
  )
  # Each character's glyph, looked up in the fonts' own tables, independently of matplotlib's
  # fallback: the families above cover the task's alphabet.
  charmaps = [
    set(ft2font.FT2Font(font_manager.findfont(family, fallback_to_default=False)).get_charmap())
    for family in families
  ]
  uncovered = {
    char: locale
    for char, locale in _dates_characters().items()
    if not char.isspace() and not any(ord(char) in charmap for charmap in charmaps)
  }
  assert not uncovered
  # And matplotlib draws them: a label of each script the default font lacks, no glyph missing.
  words = ['हिन्दी', 'বাংলা', 'ไทย', '中文', '日本語', '한국어', 'русский']
  with warnings.catch_warnings():
    warnings.filterwarnings('error', message='Glyph .* missing')
    heatmaps.save_heatmap(tmp_path / 'scripts.png', np.eye(len(words)), words, words, 'scripts')
