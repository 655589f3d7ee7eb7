"""Score x timing at convergence on G2P (Luong et al. 2015, Table 4; Britz et al. 2017): does
it matter how the decoder scores (dot, general, concat) and when it looks (Bahdanau: query
s_{t-1}; Luong: query s_t, with or without input feeding)?

Luong et al. report the dot/general/concat grid on WMT'14 En-De (global attention: general
best, concat weakest); Britz et al. found additive 22.47 vs multiplicative 22.33 BLEU. Here
CMUdict G2P at half the width of configs/g2p.py (experiments/sizes.py), every trial converged
and tested on its best eval checkpoint; the same grid on Bible translation is
experiments/score_timing_bible.py. 9 variants x 5 seeds = 45 trials (seeds 3 and 4 stop as
experiments/sizes.py FINISH says, seeds 0-2 at PLATEAU's floor).

COMMAND: python -m attnlab.sweep experiments/score_timing.py --parallel=2 \
  --workdir=runs/score_timing --archive=results/score_timing
  (on CPU prefix XLA_FLAGS=--xla_cpu_multi_thread_eigen=false: one single-threaded trial per
  core; rerunning the command resumes the sweep where it stopped, and on another machine
  restores the trials finished in results/score_timing instead of training them again)
"""

from experiments import sizes

BASE = 'configs/g2p.py'
SCORES = ('dot', 'general', 'concat')
# (timing, input_feeding): input feeding exists only for Luong timing.
TIMINGS = (('bahdanau', False), ('luong', False), ('luong', True))


def grid(add, config, fixed, seeds, finish_from):
  """Seeds outermost: a sweep cut short still holds every variant once."""
  for seed in seeds:
    for score in SCORES:
      for timing, feeding in TIMINGS:
        add(config=config, fixed={**fixed, **sizes.stopping(seed, finish_from)}, **{
          'model.attention.score': score,
          'model.attention.timing': timing,
          'model.attention.input_feeding': feeding,
          'seed': seed,
        })


def sweep(add):
  grid(add, 'configs/g2p.py', sizes.G2P_RNN, sizes.SCORE_TIMING_SEEDS, sizes.G2P_RNN_FINISH_FROM)
