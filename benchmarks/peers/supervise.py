"""A training command under a CPU budget, with the wall and CPU time at which each checkpoint
appeared.

The CPU time is that of the command's whole process tree (data-loader workers included), read
from /proc every POLL_S seconds while it runs: each live process's user + system time plus
what it collected from children that ended. When it passes the budget the tree gets SIGINT
(every system saves and stops on it) and, after GRACE_S, SIGKILL. The final figures come from
the kernel's own account of the ended command (`os.wait4`).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable

POLL_S = 0.5
GRACE_S = 60.0
TICKS = os.sysconf('SC_CLK_TCK')


@dataclasses.dataclass(frozen=True)
class Stamp:
  wall_s: float
  cpu_s: float


@dataclasses.dataclass
class Supervised:
  returncode: int
  wall_s: float
  cpu_s: float
  over_budget: bool  # stopped by the budget, not by its own end
  checkpoints: dict[int, Stamp]  # step -> when its checkpoint first appeared


def _stat(pid: int) -> tuple[int, float] | None:
  """(parent pid, CPU seconds: own + collected children's) of a live process, else None."""
  try:
    with open(f'/proc/{pid}/stat') as f:
      text = f.read()
  except OSError:
    return None
  fields = text[text.rindex(')') + 2 :].split()  # the command name may hold spaces
  ppid, utime, stime, cutime, cstime = int(fields[1]), *map(int, fields[11:15])
  return ppid, (utime + stime + cutime + cstime) / TICKS


def tree_cpu_seconds(root: int) -> float:
  """CPU seconds used so far by `root` and its live descendants (ended ones once collected)."""
  stats = {}
  for name in os.listdir('/proc'):
    if name.isdigit() and (stat := _stat(int(name))) is not None:
      stats[int(name)] = stat
  children: dict[int, list[int]] = {}
  for pid, (ppid, _) in stats.items():
    children.setdefault(ppid, []).append(pid)
  total, todo = 0.0, [root]
  while todo:
    pid = todo.pop()
    if pid in stats:
      total += stats[pid][1]
      todo.extend(children.get(pid, []))
  return total


def run(
  cmd: list[str],
  *,
  log_path: str,
  cpu_budget_s: float,
  checkpoint_steps: Callable[[], Iterable[int]],
  cwd: str | None = None,
  env: dict[str, str] | None = None,
) -> Supervised:
  """Runs `cmd` (output to `log_path`) until it ends or passes `cpu_budget_s`."""
  seen: dict[int, Stamp] = {}
  over = False
  started = time.perf_counter()

  def stamp(cpu_s: float) -> None:
    for step in checkpoint_steps():
      if step not in seen:
        seen[step] = Stamp(time.perf_counter() - started, cpu_s)

  with open(log_path, 'w') as log:
    proc = subprocess.Popen(
      cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    stopped_at = None
    while True:
      pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
      if pid:
        break
      cpu = tree_cpu_seconds(proc.pid)
      stamp(cpu)
      if cpu > cpu_budget_s and stopped_at is None:
        over, stopped_at = True, time.perf_counter()
        os.killpg(proc.pid, signal.SIGINT)
      elif stopped_at is not None and time.perf_counter() - stopped_at > GRACE_S:
        os.killpg(proc.pid, signal.SIGKILL)
      time.sleep(POLL_S)
    proc.returncode = os.waitstatus_to_exitcode(status)  # collected here, not by Popen
    try:  # workers the command left behind: the group is this command's alone
      os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
      pass
  wall = time.perf_counter() - started
  cpu = usage.ru_utime + usage.ru_stime
  stamp(cpu)  # checkpoints written as it ended
  return Supervised(proc.returncode, wall, cpu, over, seen)
