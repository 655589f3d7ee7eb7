"""The fixed-vector bottleneck at convergence (Bahdanau et al. 2015, Figure 2): does a decoder
without attention degrade with source length while attentional decoders do not?

Two decoders without attention: RNNencdec as Bahdanau et al. compared against (Cho et al. 2014;
timing fixed: a summary c = tanh(V h_N) of the source enters every decoder step and the
readout) and the plain encoder-decoder (Sutskever et al. 2014; timing none: the source reaches
the decoder through its initial state only). Against RNNsearch (Bahdanau timing, concat score)
and Luong (general score, input feeding). On real translation, Bible Spanish -> English
(configs/bible.py; BLEU by source length in words, the paper's x axis), and on copy and reverse
with sources of 5-40 symbols. Every trial runs to convergence and is tested on its best eval
checkpoint (experiments/sizes.py; Bible seed 2 stops as its FINISH says, seeds 0-1 at PLATEAU's
floor). 4 decoders x 3 tasks x 3 seeds = 36 trials (RNNencdec joined after the first 9 had
finished).

COMMAND: python -m attnlab.sweep experiments/bottleneck.py --parallel=2 \
  --workdir=runs/bottleneck --archive=results/bottleneck
  (on CPU prefix XLA_FLAGS=--xla_cpu_multi_thread_eigen=false: one single-threaded trial per
  core; rerunning the command resumes the sweep where it stopped, and on another machine
  restores the trials finished in results/bottleneck instead of training them again)
"""

from experiments import sizes

BASE = 'configs/bible.py'
# (report label, timing, score, input_feeding): the decoders of the comparison (the score is
# unread without attention; 'general' is the config default).
DECODERS = (
  ('no attention (Sutskever 2014)', 'none', 'general', False),
  ('Bahdanau concat (RNNsearch)', 'bahdanau', 'concat', False),
  ('Luong general + input feeding', 'luong', 'general', True),
  ('fixed context (RNNencdec, Cho 2014)', 'fixed', 'general', False),
)
# (config, FIXED, the first seed that FINISHes). LONG_SYNTHETIC stops by train.patience already.
TASKS = (
  ('configs/bible.py', sizes.BIBLE, sizes.BIBLE_FINISH_FROM),
  ('configs/reverse.py', sizes.LONG_SYNTHETIC, len(sizes.SEEDS)),
  ('configs/copy.py', sizes.LONG_SYNTHETIC, len(sizes.SEEDS)),
)


def sweep(add):
  # Seeds outermost: a sweep cut short still holds every variant once.
  for seed in sizes.SEEDS:
    for config, fixed, finish_from in TASKS:
      for label, timing, score, feeding in DECODERS:
        add(config=config, fixed={**fixed, **sizes.stopping(seed, finish_from)}, label=label, **{
          'model.attention.timing': timing,
          'model.attention.score': score,
          'model.attention.input_feeding': feeding,
          'seed': seed,
        })
