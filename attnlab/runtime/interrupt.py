"""Ctrl-C and SIGTERM stop a run, even when the signal arrives at a moment Python cannot raise.

A signal handler raises in whatever Python code is running. When that is a finaliser (a
weakref callback, `__del__`, garbage collection, as JAX and orbax run often), Python cannot
propagate the exception: it prints `Exception ignored in ...` with a traceback and carries on,
so the run would ignore the signal. Here the handler also records the request; `check()`,
called by the training loop at every step and by evaluation between batches, raises it again
at a point where it unwinds, and the swallowed copy is not printed.

    interrupt.install()   # attnlab.main, before JAX starts; SIGTERM then acts like Ctrl-C
    ...
    interrupt.check()     # raises KeyboardInterrupt if a signal was swallowed
"""

from __future__ import annotations

import signal
import sys

_requested: str | None = None  # 'signal 15' once a signal arrived, until check() raises it


def _handler(signum, frame) -> None:
  del frame
  global _requested
  _requested = f'signal {signum}'
  raise KeyboardInterrupt(_requested)


def _unraisable(hook):
  """`sys.unraisablehook` that drops a KeyboardInterrupt this module will raise again."""

  def quiet(unraisable) -> None:
    if _requested is not None and isinstance(unraisable.exc_value, KeyboardInterrupt):
      return
    hook(unraisable)

  return quiet


def install() -> None:
  """SIGTERM (a scheduler, the sweep runner) unwinds like Ctrl-C, and neither is lost. Handlers
  someone else installed (e.g. JAX's multi-host preemption handler) are kept."""
  if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
    signal.signal(signal.SIGTERM, _handler)
  if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, _handler)
  sys.unraisablehook = _unraisable(sys.unraisablehook)


def check() -> None:
  """Raises KeyboardInterrupt if a signal arrived and was swallowed."""
  global _requested
  if _requested is not None:
    request, _requested = _requested, None
    raise KeyboardInterrupt(request)


def reset() -> None:
  """Forgets a request that already stopped the run (the handler raised it where it could)."""
  global _requested
  _requested = None
