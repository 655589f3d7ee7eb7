"""The fixed-vector bottleneck: does a decoder without attention degrade with source length
while attentional decoders do not (Bahdanau et al. 2015, Figure 2)?

Timing none (the decoder starts from the encoder's final state, no attention) vs bahdanau vs
luong (with input feeding), on copy and reverse with sources of 5-40 symbols and on CMUdict
G2P. The report's by-length plot per task is the figure to look at; 3 tasks x 3 timings x
3 seeds = 27 trials.

COMMAND: python -m attnlab.sweep experiments/learning_speed/bottleneck.py --parallel=2 \
  --workdir=runs/learning_speed/bottleneck
  (on CPU prefix XLA_FLAGS=--xla_cpu_multi_thread_eigen=false: one single-threaded trial per core)
Sized for 2 CPU cores (one single-threaded trial per core; hidden 128, batch 64): copy and
reverse 1,000 steps, G2P 1,000 steps (under one epoch). The measured wall time is in
results/learning_speed/bottleneck/. On an accelerator raise the lengths to 5-60 (max
lengths 64) and the steps: the grid stays the same.
"""

from experiments import sizes

BASE = 'configs/reverse.py'
TIMINGS = (('none', False), ('bahdanau', False), ('luong', True))
SEEDS = (0, 1, 2)
LONG_SYNTHETIC = {
  'task.train_lengths': (5, 40),
  'task.eval_lengths': (5, 40),
  'data.max_source_length': 48,  # 40 symbols + EOS fit: nothing is dropped
  'data.max_target_length': 48,
  'data.bucket_size': 16,  # 3 padded shapes to compile
  'train.num_steps': 1000,
  'train.eval_every': 500,
  'train.checkpoint_every': 500,
}
G2P_CPU = {
  **sizes.G2P_LEARNING_SPEED_BASE,
  'model.hidden_size': 128,
  'data.global_batch_size': 64,
  'train.num_steps': 1000,
  'train.eval_every': 500,
  'train.checkpoint_every': 500,
  'eval.search': 'greedy',
  'eval.max_examples': 1000,
}


def sweep(add):
  # Seeds outermost: a sweep cut short still holds every variant once.
  for seed in SEEDS:
    for config, fixed in (
      ('configs/copy.py', LONG_SYNTHETIC),
      ('configs/reverse.py', LONG_SYNTHETIC),
      ('configs/g2p.py', G2P_CPU),
    ):
      for timing, feeding in TIMINGS:
        overrides = {
          'model.attention.timing': timing,
          'model.attention.input_feeding': feeding,
          'seed': seed,
        }
        add(config=config, fixed=fixed, **overrides)
