"""Trial sizes shared by the converged ablations (issue 15): one definition of each.

Every trial trains until its eval metric has converged: model selection on eval
(train.select_metric auto: G2P WER, translation BLEU, sequence accuracy on synthetic tasks),
the best checkpoint tested, and early stopping after `train.patience` evaluations without
improvement; the cosine schedule's last quarter runs at a low learning rate, so a trial that
does not stop early settles before the cap. The report checks the issue's criterion per trial
(attnlab/reporting/convergence.py: early stop, or < 0.3 points over the last quarter).

Sized for 2 CPU cores running one single-threaded trial per core
(XLA_FLAGS=--xla_cpu_multi_thread_eigen=false, --parallel=2); on an accelerator raise the
model sizes and drop the thread flag, the grids stay the same.
"""

# Sequences of 5-40 symbols (copy, reverse): long enough for the bottleneck to show.
LONG_SYNTHETIC = {
  'task.train_lengths': (5, 40),
  'task.eval_lengths': (5, 40),
  'data.max_source_length': 48,  # 40 symbols + EOS fit: nothing is dropped
  'data.max_target_length': 48,
  'data.bucket_size': 16,  # 3 padded shapes to compile
  'train.num_steps': 6_000,
  'train.eval_every': 500,
  'train.checkpoint_every': 500,
  'train.patience': 4,
}

# configs/g2p.py (token batching, dropout 0.3, beam-5 selection and test on the full eval and
# test sets) at half width (H=128), one encoder layer and 9,000 steps (~9.5 epochs): with the
# recipe's 2-layer encoder and 12,000 steps a single-threaded trial ran at ~6 steps/s, which
# put score_timing's 27 trials at ~8 h on 2 cores.
G2P_RNN = {
  'model.hidden_size': 128,
  'model.encoder_layers': 1,
  'train.num_steps': 9_000,
  'train.eval_every': 1_000,
  'train.checkpoint_every': 1_000,
  'train.patience': 4,
}

# A 2+2-layer Transformer on G2P (d_model 128, FFN 256, dropout 0.1), configs/g2p.py's batching.
G2P_TRANSFORMER = {
  'model.kind': 'transformer',
  'model.hidden_size': 128,
  'model.encoder_layers': 2,
  'model.decoder_layers': 2,
  'model.transformer.mlp_dim': 256,
  'model.dropout': 0.1,
  'optim.learning_rate': 1e-3,
  'optim.warmup_steps': 1_000,
  'train.num_steps': 16_000,
  'train.eval_every': 1_000,
  'train.checkpoint_every': 1_000,
  'train.patience': 4,
}

# configs/bible.py as it is (H=256, 6,000 steps cap, patience 3): 2.3 steps/s on one core of
# the AMD EPYC (measured), about 50 min a trial, so 2 seeds (the rule past 30 min).
BIBLE = {}
BIBLE_SEEDS = (0, 1)

# configs/bible.py at half width (encoder 2 x 64, decoder 128) for the wide grids
# (score x timing, windows): about a third of the step time (not yet measured).
BIBLE_SMALL = {
  'model.hidden_size': 128,
  'model.embed_dim': 64,
}

SEEDS = (0, 1, 2)
