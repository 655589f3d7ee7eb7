"""Does computing in bfloat16 cost quality at convergence? configs/g2p.py's network (general
score, Luong timing, input feeding) at the ablations' G2P size, trained in float32, with only
the weight matmuls' operands rounded to bfloat16 (`bfloat16_matmuls`, a float32 model) and
with bfloat16 activations (`bfloat16`: parameters, the recurrent carry, scores and softmax
stay float32; docs/design.md, Encoder, precision, search), 3 seeds each, every trial trained
until it stops (experiments/sizes.py FINISH) and tested on its best eval checkpoint.

A CPU with AMX or avx512_bf16 runs the bfloat16 matmuls faster (benchmarks/README.md); a
default that uses them there needs this comparison to show no loss of test WER across seeds.
3 variants x 3 seeds = 9 trials.

COMMAND: python -m attnlab.sweep experiments/dtype.py --parallel=2 \
  --workdir=runs/dtype --archive=results/dtype
  (on CPU prefix XLA_FLAGS=--xla_cpu_multi_thread_eigen=false: one single-threaded trial per
  core; rerunning the command resumes the sweep where it stopped, and on another machine
  restores the trials finished in results/dtype instead of training them again)
"""

from attnlab.config.model import DTYPES
from experiments import sizes

BASE = 'configs/g2p.py'


def sweep(add):
  for seed in sizes.SEEDS:  # outermost: a sweep cut short still holds every variant once
    for dtype in DTYPES:
      add(fixed={**sizes.G2P_RNN, **sizes.FINISH}, **{'model.dtype': dtype, 'seed': seed})
