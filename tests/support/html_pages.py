"""report.html as the tests read it: its tags, scripts, tables and list items."""

import re
from html.parser import HTMLParser


class Page(HTMLParser):
  """The parts of a report.html that the tests read: tags, scripts, tables, list items."""

  def __init__(self, text: str):
    super().__init__(convert_charrefs=True)
    self.tags, self.scripts, self.tables, self.items = [], [], [], []
    self._text = self._row = None
    self._caption, self._in_head = '', False
    self.feed(text)
    self.close()

  def handle_starttag(self, tag, attrs):
    attrs = dict(attrs)
    self.tags.append((tag, attrs))
    if tag == 'table':
      self.tables.append(
        {'class': attrs.get('class'), 'caption': self._caption, 'head': [], 'rows': []}
      )
    elif tag == 'thead':
      self._in_head = True
    elif tag == 'tr':
      self._row = []
    elif tag in ('th', 'td', 'figcaption', 'script', 'li'):
      self._text, self._attrs = [], attrs

  def handle_data(self, data):
    if self._text is not None:
      self._text.append(data)

  def handle_endtag(self, tag):
    text = ''.join(self._text or [])
    if tag in ('th', 'td'):
      self._row.append((text, self._attrs))
    elif tag == 'tr':
      table = self.tables[-1]
      if self._in_head:
        table['head'] = [t for t, _ in self._row]
      else:
        table['rows'].append(self._row)
    elif tag == 'thead':
      self._in_head = False
    elif tag == 'figcaption':
      self._caption = text
    elif tag == 'script':
      self.scripts.append(text)
    elif tag == 'li':
      self.items.append(text)
    if tag in ('th', 'td', 'figcaption', 'script', 'li'):
      self._text = None

  def of_class(self, name):
    return [t for t in self.tables if t['class'] == name]

  def images(self):
    return [a['src'] for tag, a in self.tags if tag == 'img']


def read_page(path) -> tuple[str, Page]:
  """The text of the page at `path` and its Page."""
  with open(path, encoding='utf-8') as f:
    text = f.read()
  return text, Page(text)


def css_colours(style: str) -> dict[str, str]:
  """Class name -> '#rrggbb' of the rules `.NAME{background:#rrggbb}` in `style`."""
  return dict(re.findall(r'\.(v\d+)\{background:(#[0-9a-f]{6})\}', style))
