"""The peers' result as the Markdown table benchmarks/README.md quotes (results/peers_*.md)."""

from __future__ import annotations

from benchmarks.peers import measures, recipes

PEERS = ('opennmt-py', 'joeynmt')


def columns(task) -> tuple[tuple[str, str, str], ...]:
  """(measure, header, format) of the table's columns for a tasks.PeerTask."""
  m, label, inputs = task.metric, task.metric_label, task.input_name
  return (
    ('train_target_tokens_per_s', 'train target tok/s', '{:,.0f}'),
    ('decode_inputs_per_s_greedy', f'greedy {inputs}/s', '{:,.1f}'),
    ('decode_inputs_per_s_beam5', f'beam-5 {inputs}/s', '{:,.1f}'),
    ('wall_s_to_threshold', 'wall s to threshold', '{:,.0f}'),
    ('cpu_s_to_threshold', 'CPU s to threshold', '{:,.0f}'),
    (f'best_dev_{m}_in_budget', f'best dev {label} in budget', '{:.2f}'),
    ('steps_in_budget', 'steps in budget', '{:,.0f}'),
    (f'test_{m}_greedy', f'test {label} greedy', '{:.2f}'),
    (f'test_{m}_beam5', f'test {label} beam 5', '{:.2f}'),
  )


# attnlab / the faster peer: how the targets read (time: the peer's over attnlab's).
RATIOS = (
  ('train_target_tokens_per_s', 'training tok/s', False),
  ('decode_inputs_per_s_greedy', 'greedy', False),
  ('decode_inputs_per_s_beam5', 'beam 5', False),
  ('cpu_s_to_threshold', 'CPU time to threshold', True),
)


def values(records: list[dict]) -> dict[str, dict[str, float]]:
  """system -> measure -> value."""
  table: dict[str, dict[str, float]] = {}
  for r in records:
    table.setdefault(r['system'], {})[r['measure']] = r['value']
  return table


def _cell(row: dict, measure: str, fmt: str) -> str:
  return fmt.format(row[measure]) if measure in row else '-'


def ratio(table: dict, system: str, measure: str, lower_is_better: bool) -> float | None:
  """attnlab's speed over the faster peer's (> 1: attnlab faster), None where one is missing."""
  peers = [table[p][measure] for p in PEERS if measure in table.get(p, {})]
  ours = table.get(system, {}).get(measure)
  if not peers or not ours:
    return None
  return min(peers) / ours if lower_is_better else ours / max(peers)


def _peer_versions(v: dict) -> str:
  """'; OpenNMT-py X and Joey NMT Y with torch Z', naming only the peers that ran."""
  peers = [f'{label} {v[key]}' for label, key in (('OpenNMT-py', 'OpenNMT-py'),
                                                   ('Joey NMT', 'joeynmt')) if v.get(key)]
  return f'; {" and ".join(peers)} with torch {v["torch"]}' if peers else ''


def markdown(task, result: dict) -> str:
  table = values(result['records'])
  v = result['versions']
  cols = columns(task)
  threshold = task.shown(result['threshold']) if result['threshold'] is not None else 'none'
  lines = [
    f'# attnlab beside its peers: {task.label}, {result["machine"]}\n\n',
    f'Command: `{result["command"]}` ({result["wall_s"] / 60:.0f} min; attnlab with jax '
    f'{v["jax"]}{_peer_versions(v)}; {result["cpu_count"]} CPU cores, load average '
    f'{result["load_at_start"]} '
    f'at start). {task.label}, the matched network of benchmarks/peers/recipes.py; budget '
    f'{result["cpu_budget_s"] / 60:.0f} CPU-minutes a system, a checkpoint every '
    f'{result["every"]} steps; threshold = dev {threshold} ({result["threshold_from"]}).\n\n',
    '| system | ' + ' | '.join(h for _, h, _ in cols) + ' |\n',
    '|---|' + '---:|' * len(cols) + '\n',
  ]
  for system, row in table.items():
    lines.append(f'| {system} | ' + ' | '.join(_cell(row, m, f) for m, _, f in cols) + ' |\n')
  ours = [s for s in table if s not in PEERS]
  if ours and any(p in table for p in PEERS):
    lines.append('\nattnlab / the faster peer (> 1: attnlab faster): ')
    parts = []
    for system in ours:
      found = [(name, ratio(table, system, m, low)) for m, name, low in RATIOS]
      parts.append(f'{system} ' + ', '.join(f'{n} {r:.2f}' for n, r in found if r is not None))
    lines.append('; '.join(parts) + '.\n')
  lines += _taken_apart(task, result)
  lines += _to_best_peer(task, result)
  lines.append('\nSchedules: ' + '; '.join(f'{s}: {d}' for s, d in recipes.SCHEDULES.items()))
  lines.append(
    '. Training speed is the median logging window after the first; decoding rates time each '
    f"system's own translate command on the test {task.input_name} less the same command on "
    f"one; every {task.metric_label.split()[0]} is attnlab's metric on the system's output "
    'file (a peer\'s pieces detokenized as attnlab detokenizes its own).\n'
  )
  return ''.join(lines)


def _taken_apart(task, result: dict) -> list[str]:
  """The table of each system's CPU time to the threshold as steps x steady cost + the rest."""
  if result['threshold'] is None:
    return []
  rows = []
  for system, curve in result.get('curves', {}).items():
    apart = measures.taken_apart(task, [measures.Point(**p) for p in curve], result['threshold'])
    if apart:
      rows.append(f'| {system} | {apart.steps:,} | {apart.cpu_s_per_1000_steps:,.1f} | '
                  f'{apart.other_cpu_s:,.0f} | {apart.cpu_s:,.0f} |\n')
  if not rows:
    return []
  return [
    '\nCPU time to the threshold taken apart: the steps to the first checkpoint at it, times the '
    'steady CPU seconds a step (the median between checkpoints, validating and saving '
    'included), plus the rest (start-up, compilation, whatever else the first steps cost).\n\n',
    '| system | steps to threshold | CPU s per 1,000 steps | rest, CPU s | CPU s to threshold |\n',
    '|---|---:|---:|---:|---:|\n',
    *rows,
  ]


def _to_best_peer(task, result: dict) -> list[str]:
  """Each system's CPU time to the best dev score a peer reached in the budget: the stricter
  point where the shared threshold is the score of a system that barely learnt."""
  curves = {s: [measures.Point(**p) for p in c] for s, c in result.get('curves', {}).items()}
  bests = {p: measures.best(task, curves[p]) for p in PEERS if curves.get(p)}
  bests = {p: b for p, b in bests.items() if b is not None}
  if not bests or all(s in PEERS for s in curves):
    return []
  top = measures.best(task, list(bests.values()))
  peer = next(p for p, b in bests.items() if b is top)
  target, peer_cpu_s = top.score, top.cpu_s
  rows = []
  for system, points in curves.items():
    reached = measures.first_reaching(task, points, target)
    cells = ((f'{reached.step:,}', f'{reached.cpu_s:,.0f}', f'{reached.cpu_s / peer_cpu_s:.2f}')
             if reached else ('never', '-', '-'))
    rows.append(f'| {system} | ' + ' | '.join(cells) + ' |\n')
  return [
    f'\nCPU time to {peer}\'s best dev score in the budget, {task.shown(round(target, 2))}: '
    'the first checkpoint at or beyond it, and its CPU time over that peer\'s (< 1: sooner).\n\n',
    '| system | step | CPU s | x ' + peer + ' |\n',
    '|---|---:|---:|---:|\n',
    *rows,
  ]


def row_line(task, system: str, records: list[dict]) -> str:
  """One progress line per system."""
  row = values(records).get(system, {})
  return f'{system:<16} ' + '  '.join(
    f'{h} {_cell(row, m, f)}' for m, h, f in columns(task) if m in row)
