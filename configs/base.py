"""Every default of attnlab, documented in one place.

Task files (`configs/<task>.py`) start from `get_config()` here and change what differs.
Every group maps one-to-one onto a frozen dataclass in `attnlab/config/run.py` (the `model` group's
in `attnlab/config/model.py`), so a misspelled key or an invalid choice fails before anything is
compiled.

Batch semantics: `data.global_batch_size` is the number of examples in one optimiser step,
summed over all processes and devices. Each process loads global / process_count examples and
each device gets global / device_count, so 1 device, N devices and M processes x N devices
train identically for the same global batch (it must be divisible by the device count).
With `data.batching = 'tokens'` a training step instead holds about `data.tokens_per_batch`
tokens, its rows a multiple of the device count; eval batches keep `global_batch_size`.
"""

import ml_collections


def get_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.seed = 0  # seeds parameter init, dropout and the data order

  # What to learn. Synthetic tasks generate example i from (seed, split, i).
  c.task = ml_collections.ConfigDict()
  # Synthetic: copy | reverse | sort | addition. Real data (attnlab/data/<module>.py):
  # bible | cmudict_g2p | dates | parallel_text | wmt14_translate (module wmt.py).
  c.task.name = 'reverse'
  c.task.vocab_size = 20  # synthetic tasks: number of distinct symbols
  c.task.train_lengths = (5, 20)  # synthetic: inclusive (min, max) source length, train split
  c.task.eval_lengths = (5, 20)  # synthetic: (min, max) for eval/test (length generalisation)
  c.task.num_train_examples = 100_000  # synthetic, dates: size of the train split
  c.task.num_eval_examples = 500  # synthetic, dates: size of the eval and of the test split
  c.task.data_dir = ''  # TFDS data dir for real datasets and SentencePiece caches ('' = TFDS's)
  c.task.keep_stress = False  # cmudict_g2p: keep ARPAbet stress digits (AH0) in the targets
  c.task.train_files = ()  # parallel_text: (path.tsv,) or (source_path, target_path)
  c.task.eval_files = ()  # parallel_text: the same for the eval split
  c.task.test_files = ()  # parallel_text: the same for the test split
  c.task.tokenizer = 'char'  # parallel_text, bible: char | word | sentencepiece (wmt: the last)
  c.task.text_vocab_size = 8000  # parallel_text, bible, wmt: pieces or most frequent symbols/side
  c.task.max_chars = 1000  # parallel_text: pairs with a longer side are dropped (counted)
  c.task.source_language = 'de'  # wmt14_translate: language translated from
  c.task.target_language = 'en'  # wmt14_translate: language translated into
  c.task.source_module = 'spaRV1909eb'  # bible: SWORD module translated from (Reina-Valera 1909)
  c.task.target_module = 'engWEB2015eb'  # bible: SWORD module translated into (World English)
  c.task.sword_path = ''  # bible: SWORD library dirs, ':'-separated ('' = the usual places)

  # How examples become batches.
  c.data = ml_collections.ConfigDict()
  c.data.global_batch_size = 64  # examples per optimiser step, over all devices and hosts
  c.data.max_source_length = 32  # tokens incl. EOS; longer training pairs are dropped (counted)
  c.data.max_target_length = 32  # tokens incl. EOS
  c.data.bucket_size = 8  # pad lengths up to a multiple of this: few static shapes to compile
  c.data.shuffle_buffer_epochs = True  # reshuffle the train split each epoch
  c.data.prefetch = 2  # batches prepared ahead by the host
  # examples: global_batch_size pairs per step | tokens: length buckets (attnlab/data/batching.py)
  c.data.batching = 'examples'
  c.data.tokens_per_batch = 2048  # tokens: rows x longer padded side per step, all devices/hosts
  c.data.num_buckets = 8  # tokens: padded shapes (one compile each) fit to the train lengths

  # The model. `kind` picks the family; the other groups are read by that family only.
  c.model = ml_collections.ConfigDict()
  c.model.kind = 'rnn'  # rnn | transformer
  c.model.embed_dim = 64  # token embedding size
  c.model.hidden_size = 128  # H: decoder state and (concatenated) encoder output size
  c.model.encoder_layers = 1
  c.model.decoder_layers = 1
  c.model.dropout = 0.1  # on embeddings and between layers
  # float32 | bfloat16 (compute dtype; params and softmax stay fp32) | bfloat16_matmuls (a
  # float32 model whose weight matmuls take bf16 operands, as torch.autocast: models/matmul.py)
  c.model.dtype = 'float32'
  c.model.cell = 'lstm'  # rnn: lstm | gru
  c.model.bidirectional = True  # rnn encoder: each direction gets H/2 units
  c.model.bridge = 'dense'  # rnn: dense | copy | zero (encoder final state -> decoder init)

  c.model.attention = ml_collections.ConfigDict()
  c.model.attention.score = 'general'  # dot | scaled_dot | general | concat | location
  c.model.attention.timing = 'luong'  # bahdanau (query s_{t-1}) | luong (query s_t) | none | fixed
  c.model.attention.input_feeding = True  # luong: feed h~_{t-1} into the RNN input
  c.model.attention.window = 'global'  # global | local_m | local_p (Luong 2015 local attention)
  c.model.attention.window_radius = 10  # D: local windows cover [p_t - D, p_t + D]
  c.model.attention.num_heads = 1  # > 1: multi-head scaled-dot cross attention in the decoder
  c.model.attention.max_source_length = 0  # location score: scores per source slot (0 = unset)
  c.model.attention.concat_bias = False  # concat: bias on W_q q (OpenNMT-py/Sockeye MLP form)

  c.model.transformer = ml_collections.ConfigDict()
  c.model.transformer.num_heads = 4
  c.model.transformer.mlp_dim = 512  # feed-forward inner size
  c.model.transformer.norm = 'pre'  # pre | post layer norm
  c.model.transformer.max_length = 512  # longest sequence the sinusoidal positions cover

  c.optim = ml_collections.ConfigDict()
  c.optim.name = 'adam'  # adam | adamw
  c.optim.learning_rate = 3e-3  # peak learning rate
  c.optim.warmup_steps = 100  # linear warmup from 0
  c.optim.schedule = 'cosine'  # constant | cosine | linear | rsqrt | plateau (after warmup)
  c.optim.end_lr_fraction = 0.05  # cosine/linear: final lr as a fraction of the peak
  # plateau: the lr is multiplied by plateau_factor after plateau_patience evaluations in a
  # row without an eval improvement (train.select_metric); train.patience then ends the run.
  c.optim.plateau_factor = 0.5
  c.optim.plateau_patience = 2
  # plateau: the lowest lr, peak x plateau_min_scale (Keras' min_lr, Joey NMT's
  # learning_rate_min; 0 = cut for ever, train.patience stops). A cut below it ends the run
  # (plateau_at_floor = 'stop') or is not made (plateau_at_floor = 'hold': the lr stays at the
  # floor and train.patience ends the run, when the eval metric has stopped improving there).
  c.optim.plateau_min_scale = 0.0
  c.optim.plateau_at_floor = 'stop'  # stop | hold
  c.optim.weight_decay = 0.0  # adamw only
  c.optim.b1 = 0.9
  c.optim.b2 = 0.98
  c.optim.eps = 1e-9
  c.optim.clip_norm = 1.0  # global-norm gradient clipping (0 = off)

  c.train = ml_collections.ConfigDict()
  c.train.num_steps = 2000  # optimiser steps
  c.train.label_smoothing = 0.0
  c.train.log_every = 50  # steps between training metric lines
  c.train.eval_every = 500  # steps between evaluations (and heatmaps); the last step always
  c.train.checkpoint_every = 500  # steps between checkpoints; the last step always
  c.train.keep_checkpoints = 3  # rolling latest checkpoints; the best one is kept apart
  # Model selection on the eval split (attnlab/train/selection.py): the metric, or auto = the task's
  # (G2P wer, translation bleu, else sequence_accuracy); the test split uses the best step.
  c.train.select_metric = 'auto'
  c.train.patience = 0  # stop after this many evaluations without improvement (0 = never)
  # An improvement that resets train.patience and optim.plateau_patience: at least this many
  # points of the select metric (percentage points for rates, BLEU points) over the value that
  # last reset them. Any gain still makes the best checkpoint. 0 = any gain resets them.
  c.train.min_improvement = 0.0
  c.train.divergence_factor = 10.0  # stop when the loss exceeds this x its lowest (0 = off)

  c.eval = ml_collections.ConfigDict()
  c.eval.search = 'greedy'  # greedy | beam
  c.eval.beam_size = 5
  c.eval.length_penalty = 0.6  # beam: GNMT alpha, score / ((5 + len) / 6) ** alpha
  c.eval.max_decode_length = 0  # 0 = data.max_target_length
  c.eval.max_examples = 0  # examples decoded per eval (0 = the whole split)
  c.eval.num_heatmaps = 4  # attention heatmaps of fixed eval examples, per eval
  c.eval.num_samples = 16  # decoded examples written to samples/, per eval
  c.eval.splits = ('eval',)  # splits evaluated during training; 'test' is added at the end

  c.parallel = ml_collections.ConfigDict()
  c.parallel.mode = 'shard_map'  # shard_map (jit over a device Mesh) | pmap
  c.parallel.num_devices = 0  # 0 = every device of every process; N = first N (one process)
  return c


def shrink_for_smoke(c: ml_collections.ConfigDict) -> None:
  """The `:smoke` variant of the synthetic task configs: a tiny model for 4 steps (tests)."""
  c.task.num_train_examples = 2000
  c.task.num_eval_examples = 48
  c.data.global_batch_size = 16
  _tiny_model_few_steps(c, num_steps=4, num_heatmaps=2)


def luong_lstm_model(
  c: ml_collections.ConfigDict,
  *,
  embed_dim: int,
  hidden_size: int,
  dropout: float,
  layers: int = 1,
  bidirectional: bool = True,
) -> None:
  """An LSTM encoder-decoder with Luong et al.'s global attention (`general`, input feeding)."""
  c.model.kind = 'rnn'
  c.model.cell = 'lstm'
  c.model.bidirectional = bidirectional
  c.model.embed_dim = embed_dim
  c.model.hidden_size = hidden_size
  c.model.encoder_layers = layers
  c.model.decoder_layers = layers
  c.model.dropout = dropout
  c.model.attention.score = 'general'
  c.model.attention.timing = 'luong'
  c.model.attention.input_feeding = True


def translation(
  c: ml_collections.ConfigDict, *, text_vocab_size: int, global_batch_size: int
) -> None:
  """Sentence translation (parallel_text, wmt14_*): SentencePiece subwords, pairs of up to 64
  tokens, peak learning rate 1e-3, beam search (5) of up to 128 tokens."""
  c.task.tokenizer = 'sentencepiece'
  c.task.text_vocab_size = text_vocab_size
  c.data.max_source_length = 64
  c.data.max_target_length = 64
  c.data.bucket_size = 16
  c.data.global_batch_size = global_batch_size
  c.optim.learning_rate = 1e-3
  c.eval.search = 'beam'
  c.eval.beam_size = 5
  c.eval.max_decode_length = 128


def shrink_real_task_for_smoke(c: ml_collections.ConfigDict, global_batch_size: int = 16) -> None:
  """The core of the `:smoke` variant of the real-data configs: a tiny one-layer model, 2 steps."""
  c.data.global_batch_size = global_batch_size
  c.model.encoder_layers = 1
  c.model.decoder_layers = 1
  _tiny_model_few_steps(c, num_steps=2, num_heatmaps=1)


def shrink_translation_for_smoke(c: ml_collections.ConfigDict) -> None:
  """The `:smoke` variant of the translation configs: 320 pieces, short pairs, beam 2 (tests)."""
  shrink_real_task_for_smoke(c, global_batch_size=8)
  c.task.text_vocab_size = 320  # SentencePiece's byte fallback alone takes 256 pieces
  c.data.max_source_length = 32
  c.data.max_target_length = 32
  c.data.bucket_size = 8
  c.eval.beam_size = 2
  c.eval.max_decode_length = 32


def _tiny_model_few_steps(c: ml_collections.ConfigDict, num_steps: int, num_heatmaps: int) -> None:
  """Shared by every `:smoke` variant: embeddings of 8, H = 16; `num_steps` steps, logged twice,
  evaluated at the last, checkpointed every 2; 4 decoded samples and `num_heatmaps` per eval."""
  c.model.embed_dim = 8
  c.model.hidden_size = 16
  c.train.num_steps = num_steps
  c.train.log_every = num_steps // 2
  c.train.eval_every = num_steps
  c.train.checkpoint_every = 2
  c.eval.num_samples = 4
  c.eval.num_heatmaps = num_heatmaps
