"""Global vs local attention (Luong et al. 2015, Section 3.2): does restricting attention to a
window of half-width D around a monotonic (local_m: p_t = t) or predicted (local_p) position
help or hurt?

On reverse (sources of 5-40 symbols: the anti-diagonal alignment that local_m cannot follow)
and CMUdict G2P (nearly monotonic letters -> phonemes), D = 5, Luong general score with input
feeding; 2 tasks x 3 windows x 3 seeds = 18 trials.

COMMAND: python -m attnlab.sweep experiments/learning_speed/local_global.py --parallel=2 \
  --workdir=runs/learning_speed/local_global
  (on CPU prefix XLA_FLAGS=--xla_cpu_multi_thread_eigen=false: one single-threaded trial per core)
Sized for 2 CPU cores (one single-threaded trial per core; hidden 128, batch 64, 1,000
steps). The measured wall time is in results/learning_speed/local_global/. On an
accelerator raise the steps.
"""

from experiments import sizes

BASE = 'configs/reverse.py'
WINDOWS = ('global', 'local_m', 'local_p')
SEEDS = (0, 1, 2)
SHARED = {
  'model.attention.window_radius': 5,
  'train.num_steps': 1000,
  'train.eval_every': 500,
  'train.checkpoint_every': 500,
}
REVERSE = {
  **SHARED,
  'task.train_lengths': (5, 40),
  'task.eval_lengths': (5, 40),
  'data.max_source_length': 48,
  'data.max_target_length': 48,
  'data.bucket_size': 16,
}
G2P_CPU = {
  **sizes.G2P_LEARNING_SPEED_BASE,
  **SHARED,
  'model.hidden_size': 128,
  'data.global_batch_size': 64,
  'eval.search': 'greedy',
  'eval.max_examples': 1000,
}


def sweep(add):
  for seed in SEEDS:  # outermost: a sweep cut short still holds every variant once
    for config, fixed in (('configs/reverse.py', REVERSE), ('configs/g2p.py', G2P_CPU)):
      for window in WINDOWS:
        add(config=config, fixed=fixed, **{'model.attention.window': window, 'seed': seed})
