"""The fixed-vector bottleneck: does a decoder without attention degrade with source length
while attentional decoders do not (Bahdanau et al. 2015, Figure 2)?

Timing none (the decoder starts from the encoder's final state, no attention) vs bahdanau vs
luong (with input feeding), on copy and reverse with sources of 5-60 symbols and on CMUdict
G2P. The report's by-length plot per task is the figure to look at; 3 tasks x 3 timings x
3 seeds = 27 trials.

COMMAND: python -m attnlab.sweep experiments/bottleneck.py --workdir=runs/bottleneck \
  --parallel=2
Sized for 2 CPU cores (hidden 128, batch 64, 1,500 steps). Estimated ~2.8 CPU-hours, about
85 min with --parallel=2 on 2 cores; the 12 attentional length-60 copy/reverse trials dominate
(~450 CPU-s each: timed over 100 and 300 steps of reverse/luong on 2 shared cores).
"""

BASE = 'configs/reverse.py'
TIMINGS = (('none', False), ('bahdanau', False), ('luong', True))
SEEDS = (0, 1, 2)
LONG_SYNTHETIC = {
  'task.train_lengths': (5, 60),
  'task.eval_lengths': (5, 60),
  'data.max_source_length': 64,  # 60 symbols + EOS fit: nothing is dropped
  'data.max_target_length': 64,
  'data.bucket_size': 16,  # 4 padded shapes to compile instead of 8
  'train.num_steps': 1500,
  'train.eval_every': 500,
  'train.checkpoint_every': 500,
}
G2P_CPU = {
  'model.hidden_size': 128,
  'data.global_batch_size': 64,
  'train.num_steps': 1500,
  'train.eval_every': 500,
  'train.checkpoint_every': 500,
  'eval.search': 'greedy',
  'eval.max_examples': 1000,
}


def sweep(add):
  tasks = (
    ('configs/copy.py', LONG_SYNTHETIC),
    ('configs/reverse.py', LONG_SYNTHETIC),
    ('configs/g2p.py', G2P_CPU),
  )
  for config, fixed in tasks:
    for timing, feeding in TIMINGS:
      for seed in SEEDS:
        overrides = {
          'model.attention.timing': timing,
          'model.attention.input_feeding': feeding,
          'seed': seed,
        }
        add(config=config, fixed=fixed, **overrides)
