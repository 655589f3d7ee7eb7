"""The headline runs as experiments: configs/g2p.py (CMUdict G2P, test WER), configs/dates.py
(date normalisation, test exact match) and configs/bible.py (Bible Spanish -> English, test
BLEU), 3 seeds each, every trial trained until its eval metric stops moving and tested on its
best eval checkpoint; the report gives each recipe's mean +- std over seeds.

Each recipe keeps its model, batching, peak learning rate, warmup and evaluation; only how long
it trains changes: the plateau schedule with experiments/sizes.py FINISH (the rate halved after
each evaluation without a gain, held at 1/16 of the peak, and 3 evaluations without a gain of
0.1 points end the trial) instead of each recipe's fixed-length cosine schedule, under which
results/g2p and results/bible still gained in their last quarter. The step counts below are
caps, not lengths. 3 recipes x 3 seeds = 9 trials.

COMMAND: python -m attnlab.sweep experiments/headlines.py --parallel=2 \
  --workdir=runs/headlines --archive=results/headlines
  (on CPU prefix XLA_FLAGS=--xla_cpu_multi_thread_eigen=false: one single-threaded trial per
  core; rerunning the command resumes the sweep where it stopped, and on another machine
  restores the trials finished in results/headlines instead of training them again)
"""

from experiments import sizes

BASE = 'configs/g2p.py'
# (recipe, its caps). G2P evaluates every 2,000 steps: a beam-5 pass over all 6,302 eval words
# costs as much as ~1,000 training steps.
RECIPES = (
  ('configs/g2p.py', {'train.num_steps': 60_000, 'train.eval_every': 2_000,
                      'train.checkpoint_every': 2_000}),
  ('configs/dates.py', {'train.num_steps': 12_000}),
  ('configs/bible.py', {'train.num_steps': 48_000}),
)


def sweep(add):
  for seed in sizes.SEEDS:  # outermost: a sweep cut short still holds every recipe once
    for config, caps in RECIPES:
      add(config=config, fixed={**sizes.PLATEAU, **sizes.FINISH, **caps}, seed=seed)
