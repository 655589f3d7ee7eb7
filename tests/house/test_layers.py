"""The house's layers (docs/design.md, Layout): every import of an attnlab module points down.

Rooms are ranked from the ground up; a module may import its own room and the rooms below it.
An import inside a function counts like any other, and is allowed only where named below, so
that no function-local import can hide a circle.
"""

import ast
import collections
import os
import sys

from support import REPO

PACKAGE = os.path.join(REPO, 'attnlab')  # the package whose imports are checked

# From the ground up. The commands (attnlab/main.py, decode.py, ...) stand above every room.
LAYERS = (
  ('errors', 'tokens', 'cli', 'storage'),
  ('metrics', 'bleu_scores', 'runtime.logs'),
  ('config.fields', 'config.model'),
  ('models',),
  ('data',),
  ('config.run',),  # reads the registries of data (tasks, tokenizers, batchings)
  ('runtime',),  # devices and hosts, read from the config: parallel, distributed, ...
  ('rundir',),
  ('decoding',),
  ('train',),
  ('sweeps',),
  ('reporting',),
  ('explore',),
  ('main', 'decode', 'evaluate', 'sweep', 'report', 'run_report'),
  ('',),  # attnlab/__init__.py: attnlab.load_run, imported on first use
)
# (importer, imported) pairs allowed inside a function, each for the reason given.
LOCAL_IMPORTS = {
  ('attnlab', 'attnlab.decoding.runs'),  # `import attnlab` stays light: no JAX
}


def _modules() -> dict[str, str]:
  found = {}
  for folder, _, files in os.walk(PACKAGE):
    for name in files:
      if name.endswith('.py'):
        path = os.path.join(folder, name)
        rel = os.path.relpath(path, os.path.dirname(PACKAGE))[:-3].replace(os.sep, '.')
        found[rel.removesuffix('.__init__').removesuffix('.__main__')] = path
  return found


def _imports(modules: dict[str, str]) -> list[tuple[str, str, int, bool]]:
  """(importer, imported, line, inside a function) for every attnlab import."""

  def resolve(name: str) -> str:
    while name not in modules and '.' in name:
      name = name.rsplit('.', 1)[0]
    return name

  found = []
  for module, path in modules.items():
    with open(path, encoding='utf-8') as f:
      tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
      if isinstance(node, ast.ImportFrom) and (node.module or '').startswith('attnlab'):
        names = [resolve(f'{node.module}.{alias.name}') for alias in node.names]
      elif isinstance(node, ast.Import):
        names = [resolve(a.name) for a in node.names if a.name.startswith('attnlab')]
      else:
        continue
      for name in names:
        if name != module and name != 'attnlab.__main__':
          found.append((module, name, node.lineno, node.col_offset > 0))
  return found


def _rank(module: str) -> int:
  name = module.removeprefix('attnlab').removeprefix('.')
  best = None
  for rank, rooms in enumerate(LAYERS):
    for room in rooms:
      if name == room or (room and name.startswith(room + '.')):
        if best is None or len(room) > len(best[1]):
          best = (rank, room)
  assert best is not None, f'{module} is in no layer of tests/house/test_layers.py'
  return best[0]


def test_every_import_points_down_or_stays_in_its_room():
  modules = _modules()
  upward = [f'{a} -> {b} (line {line})' for a, b, line, _ in _imports(modules)
            if _rank(b) > _rank(a)]
  assert not upward, 'imports that point up the layers:\n' + '\n'.join(upward)


def test_no_import_hides_inside_a_function():
  modules = _modules()
  local = [f'{a} -> {b} (line {line})' for a, b, line, inside in _imports(modules)
           if inside and (a, b) not in LOCAL_IMPORTS]
  assert not local, 'imports inside functions:\n' + '\n'.join(local)


def test_no_modules_import_each_other_in_a_circle():
  modules = _modules()
  edges = collections.defaultdict(set)
  for a, b, _, _ in _imports(modules):
    edges[a].add(b)
  circles, state = [], {}

  def visit(module, path):
    state[module] = 'open'
    for nxt in sorted(edges[module]):
      if state.get(nxt) == 'open':
        circles.append(' -> '.join([*path[path.index(nxt):], nxt]))
      elif nxt not in state:
        visit(nxt, [*path, nxt])
    state[module] = 'done'

  for module in sorted(modules):
    if module not in state:
      visit(module, [module])
  assert not circles, 'import circles:\n' + '\n'.join(circles)


def test_the_checks_see_a_planted_circle_and_an_upward_import(tmp_path, monkeypatch):
  package = tmp_path / 'attnlab'
  (package / 'models').mkdir(parents=True)
  (package / '__init__.py').write_text('')
  (package / 'models' / '__init__.py').write_text('')
  (package / 'errors.py').write_text('from attnlab.models import a\n')
  (package / 'models' / 'a.py').write_text('def f():\n  from attnlab import errors\n')
  monkeypatch.setattr(sys.modules[__name__], 'PACKAGE', str(package))
  imports = _imports(_modules())
  assert ('attnlab.errors', 'attnlab.models.a', 1, False) in imports
  assert ('attnlab.models.a', 'attnlab.errors', 2, True) in imports
  assert _rank('attnlab.errors') < _rank('attnlab.models.a')
  for check in (test_every_import_points_down_or_stays_in_its_room,
                test_no_import_hides_inside_a_function,
                test_no_modules_import_each_other_in_a_circle):
    try:
      check()
    except AssertionError:
      continue
    raise AssertionError(f'{check.__name__} passed on a planted fault')
