"""Score x timing at convergence on Bible Spanish -> English: the grid of
experiments/score_timing.py (Luong et al. 2015, Table 4) on real translation, ranked by test
BLEU, every trial tested on its best eval checkpoint. Half-width models
(experiments/sizes.py BIBLE) and 3 seeds (seed 2 stops as sizes.FINISH says, seeds 0-1 at
PLATEAU's floor). 9 variants x 3 seeds = 27 trials, 6 of them the bottleneck's attentional Bible
trials (Bahdanau
concat; Luong general + input feeding): the sweep copies those from results/bottleneck once
they finished there (attnlab/sweeps/shared.py).

COMMAND: python -m attnlab.sweep experiments/score_timing_bible.py --parallel=2 \
  --workdir=runs/score_timing_bible --archive=results/score_timing_bible
  (on CPU prefix XLA_FLAGS=--xla_cpu_multi_thread_eigen=false: one single-threaded trial per
  core; rerunning the command resumes the sweep where it stopped, and on another machine
  restores the trials finished in results/score_timing_bible instead of training them again)
"""

from experiments import sizes
from experiments.score_timing import grid

BASE = 'configs/bible.py'


def sweep(add):
  grid(add, 'configs/bible.py', sizes.BIBLE, sizes.SEEDS, sizes.BIBLE_FINISH_FROM)
