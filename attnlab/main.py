"""Entry point: `python -m attnlab.main --config=configs/reverse.py --workdir=runs/reverse`.

Intentionally short: flags, console routing, distributed init, then `train.train_and_evaluate`.
Single fields are overridden on the command line, e.g. `--config.model.attention.score=concat`.
The libraries' INFO logs go to the workdir's train.log; `--verbosity=0` (absl's `-v`) shows
them here too. A user's mistake prints one `error: ...` line and exits with status 2.
"""

from absl import app, flags, logging
from ml_collections import config_flags

from attnlab import cli
from attnlab.runtime import compilation_cache, distributed, interrupt, logs, parallel
from attnlab.train import loop as train

_CONFIG = config_flags.DEFINE_config_file('config', None, 'Config file (path.py[:variant]).',
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string('workdir', None, 'Run directory (checkpoints, metrics, plots).')
_ALLOW_CHANGE = flags.DEFINE_list(
    'allow_config_change', [], 'Config keys that may differ from the run in --workdir when it '
    'resumes, e.g. train.num_steps (attnlab/train/resume.py lists the keys that may).')
_DISTRIBUTED = flags.DEFINE_enum(
    'distributed', 'auto', ['auto', 'explicit', 'off'],
    'Multi-process initialisation (see attnlab/runtime/distributed.py).')
_COORDINATOR = flags.DEFINE_string('coordinator', '', 'explicit: HOST:PORT of process 0.')
_NUM_PROCESSES = flags.DEFINE_integer('num_processes', 0, 'explicit: number of processes.')
_PROCESS_ID = flags.DEFINE_integer('process_id', -1, 'explicit: this process index.')
flags.mark_flags_as_required(['config', 'workdir'])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  parallel.tune_host_allocator()  # before JAX starts its threads; see benchmarks/OPTIMISATIONS.md
  compilation_cache.enable()  # a resumed run or another seed compiles nothing again
  verbose = flags.FLAGS['verbosity'].present  # absl's -v / --verbosity on the command line
  if not verbose:
    logging.set_verbosity(logging.INFO)  # INFO reaches the log file, not the console
  logs.route_library_logs(verbose)
  # SIGTERM (a scheduler, the sweep runner) unwinds like Ctrl-C: pending checkpoint writes
  # finish and run_times.jsonl records the attempt. Set before JAX's own multi-host handler.
  interrupt.install()
  distributed.initialize(_DISTRIBUTED.value, coordinator=_COORDINATOR.value,
                         num_processes=_NUM_PROCESSES.value, process_id=_PROCESS_ID.value)
  try:
    train.train_and_evaluate(_CONFIG.value, _WORKDIR.value,
                             allow_config_change=tuple(_ALLOW_CHANGE.value))
  except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the checkpoints are complete, no traceback
    raise SystemExit(f'interrupted; the same command resumes the run in {_WORKDIR.value}') from None


def run() -> None:
  """The `attnlab-train` command (pyproject.toml's scripts), as `python -m attnlab.main`."""
  cli.run(main)


if __name__ == '__main__':
  run()
