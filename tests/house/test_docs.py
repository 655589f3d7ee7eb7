"""The docs hold together: every relative link in the repository's Markdown resolves.

A link is `[text](target)`, `![alt](target)`, a reference definition `[id]: target` or an HTML
`href`/`src`; its target is a file or folder relative to the Markdown file (or to the
repository root when it starts with `/`), and its `#anchor`, when it points into Markdown, is a
heading there under GitHub's slug rules. Links in code (fenced blocks, `inline code`) are text,
not links. Web addresses are not fetched. The files checked are the Markdown files git knows
(tracked, or new and not ignored), except what sweeps generate inside trial folders. README.md
stays an index a newcomer reads in minutes: at most 160 lines.
"""

import collections
import os
import re
import subprocess
import urllib.parse

from support import REPO

README_MAX_LINES = 160

_FENCE = re.compile(r'^ {0,3}(`{3,}|~{3,})')
_INLINE_CODE = re.compile(r'(`+)(?:(?!\1).)+?\1')
# [text](target "title") and ![alt](target); text may hold one level of brackets (an image).
_INLINE_LINK = re.compile(
  r'!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+"[^"]*")?\s*\)'
)
_REFERENCE = re.compile(r'^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)')
_HTML = re.compile(r'\b(?:href|src)\s*=\s*"([^"]*)"')
_HEADING = re.compile(r'^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$')
_SCHEME = re.compile(r'^[a-zA-Z][a-zA-Z0-9+.-]*:')


def _prose_lines(text: str):
  """(line number, line without inline code) outside fenced code blocks."""
  fence = None
  for number, line in enumerate(text.splitlines(), 1):
    match = _FENCE.match(line)
    if match:
      if fence is None:
        fence = match.group(1)
      elif match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence):
        fence = None
      continue
    if fence is None:
      yield number, _INLINE_CODE.sub('', line)


def slug(heading: str) -> str:
  """GitHub's anchor for a heading: markup dropped, lower case, punctuation out, spaces to -."""
  text = re.sub(r'!?\[([^\]]*)\]\([^)]*\)', r'\1', heading)  # a link's text stays
  text = re.sub(r'<[^>]+>', '', text).replace('`', '').strip().lower()
  text = re.sub(r'[^\w\- ]', '', text)
  return text.replace(' ', '-')


def anchors(text: str) -> set[str]:
  """Every heading's anchor in a Markdown text (a repeated slug gets -1, -2, ...)."""
  seen = collections.Counter()
  found = set()
  for _, line in _prose_lines(text):
    match = _HEADING.match(line)
    if match:
      base = slug(match.group(1))
      found.add(f'{base}-{seen[base]}' if seen[base] else base)
      seen[base] += 1
  return found


def links(text: str) -> list[tuple[int, str]]:
  """(line number, target) of every link in a Markdown text."""
  found = []
  for number, line in _prose_lines(text):
    targets = [m.group(1) for m in _INLINE_LINK.finditer(line)]
    targets += [m.group(1) for m in _REFERENCE.finditer(line)]
    targets += [m.group(1) for m in _HTML.finditer(line)]
    found += [(number, target.strip('<>')) for target in targets]
  return found


def broken_links(path: str, root: str | os.PathLike = REPO) -> list[str]:
  """'FILE:LINE: TARGET (why)' for each link of the Markdown file `path` that does not resolve."""
  with open(path, encoding='utf-8') as f:
    text = f.read()
  shown = os.path.relpath(path, root)
  problems = []
  for number, target in links(text):
    if not target or _SCHEME.match(target) or target.startswith('//'):
      continue  # a web address (or mailto:); not fetched
    file_part, _, anchor = target.partition('#')
    file_part = urllib.parse.unquote(file_part.split('?')[0])
    if not file_part:
      resolved = path
    elif file_part.startswith('/'):
      resolved = os.path.join(root, file_part.lstrip('/'))
    else:
      resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part))
    if not os.path.exists(resolved):
      missing = os.path.relpath(resolved, root)
      problems.append(f'{shown}:{number}: {target} (no such file: {missing})')
      continue
    if anchor and resolved.endswith('.md') and os.path.isfile(resolved):
      with open(resolved, encoding='utf-8') as f:
        if urllib.parse.unquote(anchor).lower() not in anchors(f.read()):
          problems.append(f'{shown}:{number}: {target} (no heading with anchor #{anchor})')
  return problems


def _in_trial_folder(rel: str) -> bool:
  """Whether `rel` lies inside a sweep's trial folder (a folder beside a sweep.json)."""
  parts = rel.split('/')
  for depth in range(1, len(parts) - 1):
    if os.path.isfile(os.path.join(REPO, *parts[:depth], 'sweep.json')):
      return True
  return False


def markdown_files() -> list[str]:
  """The Markdown files git knows (tracked, or new and not ignored), trial folders left out."""
  listed = subprocess.run(
    ['git', 'ls-files', '--cached', '--others', '--exclude-standard', '-z', '--', '*.md'],
    cwd=REPO, capture_output=True, text=True, check=True,
  ).stdout.split('\0')
  return sorted(
    os.path.join(REPO, rel)
    for rel in set(listed)
    if rel and not _in_trial_folder(rel) and os.path.isfile(os.path.join(REPO, rel))
  )


def test_every_relative_link_resolves():
  files = markdown_files()
  relative = {os.path.relpath(f, REPO) for f in files}
  assert {'README.md', 'results/README.md', 'docs/design.md'} <= relative
  problems = [problem for path in files for problem in broken_links(path)]
  assert not problems, 'broken links:\n' + '\n'.join(problems)


def test_readme_is_short():
  with open(os.path.join(REPO, 'README.md'), encoding='utf-8') as f:
    lines = f.read().splitlines()
  assert len(lines) <= README_MAX_LINES, f'README.md has {len(lines)} lines'


def test_checker_finds_planted_broken_links(tmp_path):
  (tmp_path / 'docs').mkdir()
  (tmp_path / 'docs' / 'other.md').write_text('# Other page\n\n## Data flow: config -> run\n')
  (tmp_path / 'picture.png').write_bytes(b'')
  page = tmp_path / 'page.md'
  page.write_text(
    '# A page\n\n'
    '[fine](docs/other.md) [fine too](docs/other.md#data-flow-config---run) [here](#a-page)\n'
    '![fine](picture.png) [web](https://example.com/missing.md) <img src="picture.png">\n'
    '`[code](not/a/link.md)`\n'
    '```\n[fenced](not/a/link.md)\n```\n'
    '[gone](docs/missing.md)\n'
    '[bad anchor](docs/other.md#data-flow)\n'
    '[bad local anchor](#nowhere)\n'
    '![gone](pictures/missing.png)\n'
    '[ref]: docs/absent.md\n'
    '<a href="also/absent.md">x</a>\n'
  )
  problems = broken_links(str(page), root=str(tmp_path))
  assert [p.split(' (')[0] for p in problems] == [
    'page.md:9: docs/missing.md',
    'page.md:10: docs/other.md#data-flow',
    'page.md:11: #nowhere',
    'page.md:12: pictures/missing.png',
    'page.md:13: docs/absent.md',
    'page.md:14: also/absent.md',
  ]


def test_slugs_follow_github():
  assert slug('Reproducing ablations') == 'reproducing-ablations'
  assert slug('1. The mathematics (names in code)') == '1-the-mathematics-names-in-code'
  assert slug('`attnlab.load_run`: a run from Python') == 'attnlabload_run-a-run-from-python'
  assert slug('Bahdanau vs. Luong timing') == 'bahdanau-vs-luong-timing'
  assert anchors('# Notes\n## Notes\n```\n# not a heading\n```\n') == {'notes', 'notes-1'}
