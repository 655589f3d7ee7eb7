"""The fixed-vector bottleneck at convergence (Bahdanau et al. 2015, Figure 2): does a decoder
without attention degrade with source length while attentional decoders do not?

RNNencdec-style (timing none: the decoder starts from the encoder, no attention) vs RNNsearch
(Bahdanau timing, concat score) vs Luong (general score, input feeding) on real translation,
Bible Spanish -> English (configs/bible.py; BLEU by source length in words, the paper's x
axis), and on copy and reverse with sources of 5-40 symbols. Every trial runs to convergence
and is tested on its best eval checkpoint (experiments/sizes.py). Bible trials (half width,
5.7 steps/s on one core, stopped by the plateau schedule) take over 30 min each: 2 seeds; copy
and reverse 3 seeds. 3 timings x (2 + 3 + 3) = 24 trials.

COMMAND: python -m attnlab.sweep experiments/bottleneck.py --parallel=2 \
  --workdir=runs/bottleneck --archive=results/bottleneck
  (on CPU prefix XLA_FLAGS=--xla_cpu_multi_thread_eigen=false: one single-threaded trial per
  core; rerunning the command resumes the sweep where it stopped, and on another machine
  restores the trials finished in results/bottleneck instead of training them again)
"""

from experiments import sizes

BASE = 'configs/bible.py'
# (timing, score, input_feeding): the three decoders of the comparison.
DECODERS = (('none', 'general', False), ('bahdanau', 'concat', False), ('luong', 'general', True))
TASKS = (
  ('configs/bible.py', sizes.BIBLE_SMALL, sizes.BIBLE_SEEDS),
  ('configs/reverse.py', sizes.LONG_SYNTHETIC, sizes.SEEDS),
  ('configs/copy.py', sizes.LONG_SYNTHETIC, sizes.SEEDS),
)


def sweep(add):
  # Seeds outermost: a sweep cut short still holds every variant once.
  for seed in sizes.SEEDS:
    for config, fixed, seeds in TASKS:
      if seed not in seeds:
        continue
      for timing, score, feeding in DECODERS:
        add(config=config, fixed=fixed, **{
          'model.attention.timing': timing,
          'model.attention.score': score,
          'model.attention.input_feeding': feeding,
          'seed': seed,
        })
