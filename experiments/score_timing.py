"""Score x timing: does it matter how the decoder scores (dot, general, concat) and when it
looks (Bahdanau: query s_{t-1}; Luong: query s_t, with or without input feeding)?

Luong et al. (2015, Table 4) report the global/local x dot/general/concat/location grid on
WMT'14 En-De; Britz et al. (2017) found additive (concat) 22.47 vs multiplicative 22.33 BLEU.
Here: CMUdict G2P (ranked by test WER) and multilingual date normalisation (test sequence
accuracy), 3 seeds each; 9 variants x 2 tasks x 3 seeds = 54 trials.

COMMAND: python -m attnlab.sweep experiments/score_timing.py --workdir=runs/score_timing \
  --parallel=2
Sized for 2 CPU cores: hidden 128, batch 64, 1,500 steps (under one epoch: a comparison of
early training), greedy decoding of 1,000 eval/test examples. Estimated ~4.7 CPU-hours, about
2.3 h with --parallel=2 on 2 cores (the longest experiment): a G2P trial ~340 CPU-s, a dates
trial ~280 CPU-s (timed over 100 and 300 steps of the concat/luong/input-feeding trials on 2
shared cores, so rather an upper bound). On an accelerator drop CPU_SIZE to train the task
configs at full size.
"""

BASE = 'configs/g2p.py'
TASKS = ('configs/g2p.py', 'configs/dates.py')
SCORES = ('dot', 'general', 'concat')
# (timing, input_feeding): input feeding exists only for Luong timing.
TIMINGS = (('bahdanau', False), ('luong', False), ('luong', True))
SEEDS = (0, 1, 2)
CPU_SIZE = {
  'model.hidden_size': 128,
  'data.global_batch_size': 64,
  'train.num_steps': 1500,
  'train.eval_every': 500,
  'train.checkpoint_every': 500,
  'eval.search': 'greedy',
  'eval.max_examples': 1000,
}


def sweep(add):
  for task in TASKS:
    for score in SCORES:
      for timing, feeding in TIMINGS:
        for seed in SEEDS:
          overrides = {
            'model.attention.score': score,
            'model.attention.timing': timing,
            'model.attention.input_feeding': feeding,
            'seed': seed,
          }
          add(config=task, fixed=CPU_SIZE, **overrides)
