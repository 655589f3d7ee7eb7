"""Number of heads at a fixed model size (Vaswani et al. 2017, Table 3 rows A): a Transformer
with 1, 2, 4 or 8 heads, d_k = d_v = d_model / heads, on CMUdict G2P.

Vaswani et al. found one head 0.9 BLEU worse than the best (8 heads, EN-DE dev) and quality
dropping again with too many heads (32). 4 variants x 3 seeds = 12 trials.

COMMAND: python -m attnlab.sweep experiments/learning_speed/heads.py --parallel=2 \
  --workdir=runs/learning_speed/heads
  (on CPU prefix XLA_FLAGS=--xla_cpu_multi_thread_eigen=false: one single-threaded trial per core)
Sized for 2 CPU cores (one single-threaded trial per core; d_model 128, 2+2 layers, FFN 256,
batch 64, 1,000 steps: about half an epoch, so an early-training comparison). The measured
wall time is in results/learning_speed/heads/. On an accelerator raise the steps.
"""

from experiments import sizes

BASE = 'configs/g2p.py'
FIXED = {
  **sizes.G2P_LEARNING_SPEED_BASE,
  'model.kind': 'transformer',
  'model.hidden_size': 128,
  'model.encoder_layers': 2,
  'model.decoder_layers': 2,
  'model.transformer.mlp_dim': 256,
  'model.dropout': 0.1,
  'optim.learning_rate': 1e-3,
  'data.global_batch_size': 64,
  'train.num_steps': 1000,
  'train.eval_every': 500,
  'train.checkpoint_every': 500,
  'eval.search': 'greedy',
  'eval.max_examples': 1000,
}
HEADS = (1, 2, 4, 8)
SEEDS = (0, 1, 2)


def sweep(add):
  for seed in SEEDS:  # outermost: a sweep cut short still holds every variant once
    for heads in HEADS:
      add(**{'model.transformer.num_heads': heads, 'seed': seed})
