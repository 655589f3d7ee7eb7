"""Number of heads at a fixed model size, at convergence (Vaswani et al. 2017, Table 3 rows
A): a Transformer with 1, 2, 4 or 8 heads, d_k = d_v = d_model / heads (so the parameter count
is the same for every variant), on CMUdict G2P; every trial converged and tested on its best
eval checkpoint.

Vaswani et al. found one head 0.9 BLEU worse than the best (EN-DE dev) and quality dropping
again with too many heads (32). 4 variants x 3 seeds = 12 trials (experiments/sizes.py
G2P_TRANSFORMER: d_model 128, 2+2 layers, FFN 256; seed 2 stops as sizes.FINISH says, seeds 0-1
at the floor).

COMMAND: python -m attnlab.sweep experiments/heads.py --parallel=2 \
  --workdir=runs/heads --archive=results/heads
  (on CPU prefix XLA_FLAGS=--xla_cpu_multi_thread_eigen=false: one single-threaded trial per
  core; rerunning the command resumes the sweep where it stopped, and on another machine
  restores the trials finished in results/heads instead of training them again)
"""

from experiments import sizes

BASE = 'configs/g2p.py'
HEADS = (1, 2, 4, 8)


def sweep(add):
  for seed in sizes.SEEDS:  # outermost: a sweep cut short still holds every variant once
    for heads in HEADS:
      fixed = {**sizes.G2P_TRANSFORMER, **sizes.stopping(seed, sizes.G2P_TRANSFORMER_FINISH_FROM)}
      add(fixed=fixed, **{'model.transformer.num_heads': heads, 'seed': seed})
