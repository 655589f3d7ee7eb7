"""Number of heads at a fixed model size (Vaswani et al. 2017, Table 3 rows A): a Transformer
with 1, 2, 4 or 8 heads, d_k = d_v = d_model / heads, on CMUdict G2P.

Vaswani et al. found one head 0.9 BLEU worse than the best (8 heads, EN-DE dev) and quality
dropping again with too many heads (32). 4 variants x 3 seeds = 12 trials.

COMMAND: python -m attnlab.sweep experiments/heads.py --workdir=runs/heads --parallel=2
Sized for 2 CPU cores (d_model 128, 2+2 layers, FFN 256, batch 64, 1,500 steps). Estimated
~1.85 CPU-hours, about 55 min with --parallel=2 on 2 cores (~555 CPU-s per trial: timed over
100 and 300 steps of the 8-head trial on 2 shared cores).
"""

BASE = 'configs/g2p.py'
FIXED = {
  'model.kind': 'transformer',
  'model.hidden_size': 128,
  'model.encoder_layers': 2,
  'model.decoder_layers': 2,
  'model.transformer.mlp_dim': 256,
  'model.dropout': 0.1,
  'optim.learning_rate': 1e-3,
  'data.global_batch_size': 64,
  'train.num_steps': 1500,
  'train.eval_every': 500,
  'train.checkpoint_every': 500,
  'eval.search': 'greedy',
  'eval.max_examples': 1000,
}
HEADS = (1, 2, 4, 8)
SEEDS = (0, 1, 2)


def sweep(add):
  for heads in HEADS:
    for seed in SEEDS:
      add(**{'model.transformer.num_heads': heads, 'seed': seed})
