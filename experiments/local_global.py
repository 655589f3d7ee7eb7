"""Global vs local attention at convergence (Luong et al. 2015, Section 3.2): does attending
only to a window [p_t - D, p_t + D] around a monotonic (local_m: p_t = t) or predicted
(local_p: p_t = S sigmoid(v_p^T tanh(W_p h_t)), Gaussian sigma = D/2) position help or hurt?

D as the paper chose it, scaled to the sequences: Luong et al. took D = 10 for WMT sentences
of ~25 words; Bible sources are ~30-40 pieces (D = 10), G2P words ~8 letters (D = 3).
Luong et al. found local_p with the general score best on En-De (+0.9 BLEU over global) and
local_m close to global. Bible (BLEU, by length; half width) and G2P (WER), 3 seeds each, every
trial trained to its stop and tested on its best eval checkpoint (experiments/sizes.py; Bible
seed 2 stops as its FINISH says): 3 x 3 + 3 x 3 = 18 trials, of which the 6 global ones are
copied (attnlab/sweeps/shared.py) from results/score_timing (G2P general x luong + feeding) and
results/bottleneck (Bible Luong) once finished there.

COMMAND: python -m attnlab.sweep experiments/local_global.py --parallel=2 \
  --workdir=runs/local_global --archive=results/local_global
  (on CPU prefix XLA_FLAGS=--xla_cpu_multi_thread_eigen=false: one single-threaded trial per
  core; rerunning the command resumes the sweep where it stopped, and on another machine
  restores the trials finished in results/local_global instead of training them again)
"""

from attnlab.models.attention import WINDOWS
from experiments import sizes

BASE = 'configs/g2p.py'
# (config, FIXED, D, the first seed that FINISHes). D is set on the local windows only: global
# attention ignores it, and without it the global trials are the same configs as cells of
# score_timing (G2P) and of the bottleneck (Bible), whose finished trials the sweep copies
# (attnlab/sweeps/shared.py).
TASKS = (
  ('configs/bible.py', sizes.BIBLE, 10, sizes.BIBLE_FINISH_FROM),
  ('configs/g2p.py', sizes.G2P_RNN, 3, sizes.G2P_RNN_FINISH_FROM),
)


def sweep(add):
  for seed in sizes.SEEDS:  # outermost: a sweep cut short still holds every variant once
    for config, fixed, radius, finish_from in TASKS:
      for window in WINDOWS:
        local = {} if window == 'global' else {'model.attention.window_radius': radius}
        add(config=config, fixed={**fixed, **local, **sizes.stopping(seed, finish_from)},
            **{'model.attention.window': window, 'seed': seed})
