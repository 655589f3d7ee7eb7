"""`python -m joeynmt` beside torch 2.13, run by the peers' interpreter as a plain script:
`PEERS_VENV/bin/python benchmarks/peers/joey_main.py train|translate CONFIG ...`.

Joey NMT 2.3 builds its plateau scheduler with `ReduceLROnPlateau(..., verbose=False)`; torch
removed that argument (it only switched a message on). This drops it and then runs Joey NMT's
own command line unchanged. It imports nothing of attnlab: it runs in the peers' venv.
"""

import runpy
import sys

from torch.optim import lr_scheduler

_plateau_init = lr_scheduler.ReduceLROnPlateau.__init__


def _init_without_verbose(self, *args, verbose=False, **kwargs):
  del verbose  # Joey NMT passes False: no message either way
  _plateau_init(self, *args, **kwargs)


if __name__ == '__main__':
  lr_scheduler.ReduceLROnPlateau.__init__ = _init_without_verbose
  sys.argv[0] = 'joeynmt'
  runpy.run_module('joeynmt', run_name='__main__', alter_sys=True)
