"""Trial sizes shared by the converged ablations: one definition of each.

Every trial trains until its eval metric has converged: model selection on eval
(train.select_metric auto: G2P WER, translation BLEU, sequence accuracy on synthetic tasks), the
best checkpoint tested. The learning rate follows `optim.schedule=plateau` (`PLATEAU`): constant
after warmup, halved after each evaluation without improvement, as Bahdanau et al. and Luong et
al. trained; how a trial stops is `FINISH` (below). A cosine schedule cannot show convergence:
its learning rate falls until the last step, and the runs of results/g2p and results/bible
still moved 0.87 and 1.24 points in their last quarter. `train.num_steps` is only a cap. The
report says per trial how it stopped and whether it was still improving
(attnlab/reporting/convergence.py: >= 0.3 points over the last quarter).

Sized for 2 CPU cores running one single-threaded trial per core
(XLA_FLAGS=--xla_cpu_multi_thread_eigen=false, --parallel=2). `attnlab.sweep --sizes=accelerator`
picks the recipes' full widths instead (the end of this file), for a GPU or TPU where a trial
takes minutes; the grids stay the same.
"""


from attnlab.sweeps.trials import chosen_size

SIZE = chosen_size()

# Reduce on plateau, then stop: one definition for every trial.
PLATEAU = {
  'optim.schedule': 'plateau',
  'optim.plateau_factor': 0.5,
  'optim.plateau_patience': 1,
  'optim.plateau_min_scale': 1 / 16,  # four cuts at most
  'train.patience': 3,
}

# Sequences of 5-40 symbols (copy, reverse): long enough for the bottleneck to show.
# The no-attention decoders learn these slowly and their eval accuracy is noisy: with 500 eval
# sequences (sequence accuracy's std ~2 points at 0.7) single dips of 1-3 points cut the
# learning rate while the trend still rises ~2 points per 1,000 steps, and PLATEAU's floor ends
# copy (no attention, seed 0) at 0.73 after gaining 9.6 points over its last quarter, reverse
# at 0.44 after 5.4. Hence 2,000 eval and test sequences (std ~1 point, ~250 per length bucket
# of the test curves), a cut only after 2 evaluations without improvement, a stop after 4 (each
# cut gets 2 evaluations to help), and a cap the slow learners can plateau under.
# The floor is 1/1024, not PLATEAU's 1/16: the no-attention decoders gain at every cut down to
# 1/16 (seed 0, best eval accuracy per learning rate x1 ... x1/16: reverse none 0.49, 0.67,
# 0.79, 0.88, 0.91; reverse fixed 0.51, 0.65, 0.75, 0.82, 0.87), so the stop is left to
# train.patience (two cuts that did not help). A trial that ended at a higher floor trains on
# from its checkpoints (attnlab/sweeps/trial_dirs.py LIMITS).
LONG_SYNTHETIC = {
  'task.train_lengths': (5, 40),
  'task.eval_lengths': (5, 40),
  'task.num_eval_examples': 2_000,
  'data.max_source_length': 48,  # 40 symbols + EOS fit: nothing is dropped
  'data.max_target_length': 48,
  'data.bucket_size': 16,  # 3 padded shapes to compile
  **PLATEAU,
  'optim.plateau_patience': 2,
  'optim.plateau_min_scale': 1 / 1024,
  'train.patience': 4,
  'train.num_steps': 40_000,
  'train.eval_every': 500,
  'train.checkpoint_every': 500,
}

# configs/g2p.py (token batching, beam-5 selection and test on the full eval and test sets) at
# half width (H=128) and one encoder layer, without the recipe's label smoothing (the ablations
# compare the papers' cross-entropy training), dropout 0.3 and float32 pinned so that every
# trial trains alike whatever the recipe uses. With the recipe's 2-layer encoder a
# single-threaded trial runs at ~6 steps/s: ~8 h on 2 cores for score_timing's 27 trials of
# 12,000 steps.
G2P_RNN = {
  'model.dtype': 'float32',  # whatever the recipe computes in: the ablations stay in float32
  'model.dropout': 0.3,  # every trial alike, whatever the recipe's dropout
  'model.hidden_size': 128,
  'model.encoder_layers': 1,
  'train.label_smoothing': 0.0,
  **PLATEAU,
  # A cap, not a length, above 24,000: under a 24,000-step cap dot x luong (seed 0) still gains
  # 0.89 points of eval WER over the last quarter, one cut above the floor. A trial that ran to
  # a lower cap trains on from its checkpoints; one that stopped early stands
  # (attnlab/sweeps/trial_dirs.py).
  'train.num_steps': 40_000,
  'train.eval_every': 1_000,
  'train.checkpoint_every': 1_000,
}

# A 2+2-layer Transformer on G2P (d_model 128, FFN 256, dropout 0.1), configs/g2p.py's batching.
G2P_TRANSFORMER = {
  'model.kind': 'transformer',
  'model.hidden_size': 128,
  'model.encoder_layers': 2,
  'model.decoder_layers': 2,
  'model.transformer.mlp_dim': 256,
  'model.dropout': 0.1,
  'model.dtype': 'float32',
  'optim.learning_rate': 1e-3,
  'optim.warmup_steps': 1_000,
  'train.label_smoothing': 0.0,
  **PLATEAU,
  # Not PLATEAU's floor: at 1/16 the Transformer still gains. 1 and 2 heads (seed 0) improve
  # eval WER 0.4-0.7 points at 1/8 and 0.1-0.6 at 1/16 of the peak and move 1.0 and 1.1 points
  # over their last quarter (the report's convergence table), where the G2P RNN gains 0.01-0.1.
  # So the stop is left to train.patience, as for LONG_SYNTHETIC; a trial that ended at a
  # higher floor trains on from its checkpoints (attnlab/sweeps/trial_dirs.py).
  'optim.plateau_min_scale': 1 / 1024,
  # A cap, not a length, above 24,000: under a 24,000-step cap the 2-head trial (seed 0) reaches
  # the cap still gaining (eval WER 33.12% -> 32.02% over the last quarter, at 1/8 of the peak
  # learning rate), unconverged. A trial that ran to a lower cap trains on from its checkpoints
  # (attnlab/sweeps/trial_dirs.py).
  'train.num_steps': 40_000,
  'train.eval_every': 1_000,
  'train.checkpoint_every': 1_000,
}

# configs/bible.py with the plateau schedule at half width (encoder 2 x 64, decoder 128): 5.7
# steps/s on one CPU core (AMD EPYC Zen 4, single-threaded, 600 steps after the ~3 min of
# compiling its 16 padded shapes), 2.5x the full width's 2.3, at which a converged trial takes
# 80-110 min and no Bible experiment fits in 4 hours. A cap, not a length: the floor's stop rule
# ends a trial within a few evaluations of its last gain, and every Bible trial but the slowest
# stops early, at 13,000-27,000 steps. Lower caps cut trials that still gain: under 12,000 no
# attention (seed 0; eval BLEU 6.0 -> 6.7 over the last quarter, never a plateau cut) and
# Bahdanau concat (~1 BLEU per 1,000 steps at 7,000); under 24,000 Bahdanau concat (seed 0;
# 30.41 -> 30.93, a new best at the last evaluation); under 32,000 dot x Bahdanau
# (score_timing_bible, seed 1; 30.77 -> 31.34, a new best at the last evaluation). A trial that
# ran to a lower cap trains on from its checkpoints (attnlab/sweeps/trial_dirs.py).
BIBLE = {
  **PLATEAU,
  'train.num_steps': 48_000,
  'model.hidden_size': 128,
  'model.embed_dim': 64,
}
# Seeds are the unit of evidence (the reports' Welch tests over trials): 3 for every cell, 5 for
# the G2P score x timing grid, whose gaps are small beside its seed spread.
SEEDS = (0, 1, 2)
SCORE_TIMING_SEEDS = (0, 1, 2, 3, 4)

# How a trial stops. PLATEAU ends a trial when a cut below its floor is due, often one or two
# evaluations after its best while the eval metric still moves. FINISH holds the rate at the
# floor instead, and train.patience evaluations without a gain of at least 0.1 points
# (train.min_improvement: percentage points of WER or accuracy, BLEU points) end the trial: it
# stops when the metric no longer moves, not after a count of cuts. Trials trained before FINISH
# existed keep their floor stop (the seeds below *_FINISH_FROM); the reports say per trial how it
# ended and whether it was still improving.
FINISH = {'optim.plateau_at_floor': 'hold', 'train.min_improvement': 0.1}
G2P_RNN_FINISH_FROM = 3  # score_timing, local_global (G2P)
G2P_TRANSFORMER_FINISH_FROM = 2  # heads
BIBLE_FINISH_FROM = 2  # score_timing_bible, bottleneck and local_global (Bible)


def stopping(seed: int, finish_from: int) -> dict:
  """The overrides that set how a trial of `seed` stops: FINISH from seed `finish_from` on."""
  return FINISH if seed >= finish_from else {}


# configs/g2p.py with the settings of experiments/learning_speed/'s 1,000-step trials (example
# batching, one encoder layer, dropout 0.2, float32, no label smoothing): those experiments pin
# them so that a rerun repeats results/learning_speed/ whatever the recipe becomes.
G2P_LEARNING_SPEED_BASE = {
  'data.batching': 'examples',
  'model.encoder_layers': 1,
  'model.dropout': 0.2,
  'model.dtype': 'float32',
  'train.label_smoothing': 0.0,
}

if SIZE == 'accelerator':
  # The recipes' widths (configs/g2p.py: a 2-layer encoder, H=256; configs/bible.py: H=256,
  # embeddings 128), a Transformer of the same width; every trial is new there: all FINISH.
  G2P_RNN = {**G2P_RNN, 'model.hidden_size': 256, 'model.encoder_layers': 2}
  G2P_TRANSFORMER = {**G2P_TRANSFORMER, 'model.hidden_size': 256, 'model.transformer.mlp_dim': 1024}
  BIBLE = {**BIBLE, 'model.hidden_size': 256, 'model.embed_dim': 128}
  G2P_RNN_FINISH_FROM = G2P_TRANSFORMER_FINISH_FROM = BIBLE_FINISH_FROM = 0
