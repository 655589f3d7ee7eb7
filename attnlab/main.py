"""Entry point: `python -m attnlab.main --config=configs/reverse.py --workdir=runs/reverse`.

Intentionally short: flags, distributed init, then `train.train_and_evaluate`. Single fields
are overridden on the command line, e.g. `--config.model.attention.score=concat`.
"""

from absl import app, flags, logging
from ml_collections import config_flags

from attnlab import distributed, parallel, train

_CONFIG = config_flags.DEFINE_config_file('config', None, 'Config file (path.py[:variant]).',
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string('workdir', None, 'Run directory (checkpoints, metrics, plots).')
_DISTRIBUTED = flags.DEFINE_enum('distributed', 'auto', ['auto', 'explicit', 'off'],
                                 'Multi-process initialisation (see attnlab/distributed.py).')
_COORDINATOR = flags.DEFINE_string('coordinator', '', 'explicit: HOST:PORT of process 0.')
_NUM_PROCESSES = flags.DEFINE_integer('num_processes', 0, 'explicit: number of processes.')
_PROCESS_ID = flags.DEFINE_integer('process_id', -1, 'explicit: this process index.')
flags.mark_flags_as_required(['config', 'workdir'])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  parallel.tune_host_allocator()  # before JAX starts its threads; see benchmarks/OPTIMISATIONS.md
  logging.set_verbosity(logging.INFO)
  distributed.initialize(_DISTRIBUTED.value, coordinator=_COORDINATOR.value,
                         num_processes=_NUM_PROCESSES.value, process_id=_PROCESS_ID.value)
  train.train_and_evaluate(_CONFIG.value, _WORKDIR.value)


if __name__ == '__main__':
  app.run(main)
