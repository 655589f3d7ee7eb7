"""Score x timing: does it matter how the decoder scores (dot, general, concat) and when it
looks (Bahdanau: query s_{t-1}; Luong: query s_t, with or without input feeding)?

Luong et al. (2015, Table 4) report the global/local x dot/general/concat/location grid on
WMT'14 En-De; Britz et al. (2017) found additive (concat) 22.47 vs multiplicative 22.33 BLEU.
Here: CMUdict G2P (ranked by test WER) and multilingual date normalisation (test sequence
accuracy); 9 variants x 2 tasks x 3 seeds = 54 trials.

COMMAND: python -m attnlab.sweep experiments/learning_speed/score_timing.py --parallel=2 \
  --workdir=runs/learning_speed/score_timing
  (on CPU prefix XLA_FLAGS=--xla_cpu_multi_thread_eigen=false: one single-threaded trial per core)
Sized for 2 CPU cores (one single-threaded trial per core; hidden 128, batch 64, greedy
decoding of 1,000 eval/test examples): G2P 1,000 steps (about half an epoch), dates 400 steps
(the full dates config is at 98.7% after 400 steps and 100% after 800, so a longer run would
rank nothing). Both compare early training: how fast each variant learns. The measured wall
time is in results/learning_speed/score_timing/. On an accelerator drop the step counts
to train the task configs at full size.
"""

from experiments import sizes

BASE = 'configs/g2p.py'
SCORES = ('dot', 'general', 'concat')
# (timing, input_feeding): input feeding exists only for Luong timing.
TIMINGS = (('bahdanau', False), ('luong', False), ('luong', True))
SEEDS = (0, 1, 2)
CPU_SIZE = {
  'model.hidden_size': 128,
  'data.global_batch_size': 64,
  'eval.search': 'greedy',
  'eval.max_examples': 1000,
}
G2P_AS_RUN = sizes.G2P_LEARNING_SPEED_BASE
TASKS = (
  ('configs/g2p.py', {**CPU_SIZE, **G2P_AS_RUN, 'train.num_steps': 1000, 'train.eval_every': 500,
                      'train.checkpoint_every': 500}),
  ('configs/dates.py', {**CPU_SIZE, 'train.num_steps': 400, 'train.eval_every': 200,
                        'train.checkpoint_every': 200}),
)


def sweep(add):
  # Seeds outermost: a sweep cut short still holds every variant once.
  for seed in SEEDS:
    for task, fixed in TASKS:
      for score in SCORES:
        for timing, feeding in TIMINGS:
          overrides = {
            'model.attention.score': score,
            'model.attention.timing': timing,
            'model.attention.input_feeding': feeding,
            'seed': seed,
          }
          add(config=task, fixed=fixed, **overrides)
