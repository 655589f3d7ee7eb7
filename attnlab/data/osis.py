"""OSIS markup (the SourceType of SWORD Bible modules) -> the plain text of one verse.

Kept: the words, with the content of inline elements (<w> carries Strong's numbers and
morphology in attributes only; <q>, <transChange> (words the translators added, italic in
print), <divineName>, <foreign>, <seg>, <hi>, <name>, an in-text <reference>), and canonical
titles (Psalm superscriptions are verse text: the Reina-Valera writes them inline in verse 1).
Dropped with their content: <note> (footnotes and cross references, with their <reference>,
<rdg> and <catchWord>), titles that are not canonical (section headings, the acrostic letters of
Psalm 119), <speaker> labels (Song of Songs), <div type="glossary|introduction"> sections, and
anything after the closing milestone of a book (the WEB appends its glossary to Rev 22:21).

Word boundaries: a dropped element, a line, paragraph or chapter boundary (<l>, <lg>, <lb>,
<p>, <div>, <chapter>, <list>, <item>, <title>, <milestone>), a ¶ sign, and the meeting of two
word elements (a <w> or <transChange> closing right where the next one opens: the RV1909 has
'ejército</w><transChange>se llamaba</transChange><w>Sísara') separate the text around them.
They become a space where the two sides would otherwise be glued ('only born</q><note>...
</note><q><w>Son</w>' -> 'only born Son') and nothing before punctuation ('gerahs<note>...
</note>);' -> 'gerahs);'). Text running into a word element stays glued: a <w> may end inside
a word (KJV 'give</w>n'), and an added clitic belongs to its verb
('preguntándo<transChange>le</transChange>'). Entities are decoded; runs of whitespace become
one space; USFM character markers leaked into a module's text (the KJV's '\\nd JEHOVAH' in
Exod 6:3) are removed.
"""

from __future__ import annotations

import html
import re

# A tag (closing slash, name, attributes, self-closing slash) or a run of text.
TOKEN = re.compile(r'<(/?)([A-Za-z]+)\b([^>]*?)(/?)>|([^<]+)')
ATTRIBUTE = re.compile(r'([A-Za-z:]+)="([^"]*)"')
DROPPED = frozenset({'note', 'speaker'})  # and non-canonical titles
BOUNDARIES = frozenset({'l', 'lg', 'lb', 'p', 'div', 'chapter', 'list', 'item', 'title',
                        'milestone'})
SKIPPED_DIVS = frozenset({'glossary', 'introduction'})
WORD_ELEMENTS = frozenset({'w', 'transChange'})
BREAK = '\x00'
USFM_MARKER = re.compile(r'\\\+?[a-z]+[0-9]*\*?')  # \nd, \+nd*, \w*: USFM, not OSIS
PARAGRAPH_SIGN = '\u00b6'
# A break followed by one of these (after non-space text) becomes a space: word characters and
# opening punctuation. Before anything else (closing punctuation, space, the end) it vanishes.
_GLUED = re.compile(rf'(?<=\S){BREAK}(?=[\w“‘"\'(\[¿¡«])')


def _is_dropped(name: str, attributes: dict[str, str]) -> bool:
  return name in DROPPED or (name == 'title' and attributes.get('canonical') != 'true')


def verse_text(markup: str) -> str:
  """The plain text of one verse's OSIS markup (see the module docstring)."""
  out: list[str] = []
  dropped: list[str] = []  # open elements whose content is dropped, innermost last
  skipped_div = None  # sID of an open glossary/introduction div
  word_ended = False  # the last tokens closed a word element (and maybe more inline elements)
  for match in TOKEN.finditer(markup):
    closing, name, raw_attributes, self_closing, text = match.groups()
    if name in WORD_ELEMENTS and not self_closing:
      if closing:
        word_ended = True
        continue
      if word_ended and not dropped and skipped_div is None:
        out.append(BREAK)
    if not (closing and name) or name in BOUNDARIES:
      word_ended = False
    if text is not None:
      if not dropped and skipped_div is None:
        text = USFM_MARKER.sub(BREAK, html.unescape(text))
        out.append(text.replace(PARAGRAPH_SIGN, BREAK))
      continue
    attributes = dict(ATTRIBUTE.findall(raw_attributes))
    if skipped_div is not None:
      if name == 'div' and attributes.get('eID') == skipped_div:
        skipped_div = None
        out.append(BREAK)
      continue
    if dropped:  # inside a note: only its nesting matters
      if _is_dropped(name, attributes) and not self_closing:
        if closing and name == dropped[-1]:
          dropped.pop()
        elif not closing:
          dropped.append(name)
        if not dropped:
          out.append(BREAK)
      continue
    if name == 'div' and attributes.get('type') == 'book' and 'eID' in attributes:
      break  # the book has ended: nothing after it belongs to this verse
    if name == 'div' and attributes.get('type') in SKIPPED_DIVS and 'sID' in attributes:
      skipped_div = attributes['sID']
      continue
    if _is_dropped(name, attributes) and not closing:
      if not self_closing:
        dropped.append(name)
      out.append(BREAK)
    elif name in BOUNDARIES:
      out.append(BREAK)
  text = re.sub(f'{BREAK}+', BREAK, ''.join(out))
  text = _GLUED.sub(' ', text).replace(BREAK, '')
  return ' '.join(text.split())
