"""What the terminal shows during a run: a summary of the run at its start, the evaluation and
test lines, and the run directory's files at its end (attnlab/runtime/logs.py keeps the
libraries' logs off the console)."""

from __future__ import annotations

import os

from etils import epath

from attnlab.config.run import SELECT_SPLIT
from attnlab.rundir import layout


def _format_number(value) -> str:
  return f'{value:.4g}' if isinstance(value, float) else str(value)


def start_summary(cfg, *, num_params: int, num_devices: int, workdir: str, log: str,
                  selection, start_step: int, filtered: int) -> list[str]:
  """Three or four lines: the task and model, the training plan, the run directory."""
  m = cfg.model
  if m.kind == 'rnn':
    attention = (m.attention.describe_no_attention() if not m.attention.attends else
                 f'{m.attention.timing} attention, {m.attention.score} score, '
                 f'{m.attention.window} window')
    model = f'rnn {m.cell} {m.encoder_layers}+{m.decoder_layers} layers, {attention}'
  else:
    model = (f'transformer {m.encoder_layers}+{m.decoder_layers} layers, '
             f'{m.transformer.num_heads} heads')
  o, t = cfg.optim, cfg.train
  if selection is None:
    select = 'no model selection (eval.splits has no eval split): the last step is tested'
  else:
    patience = f'stop after {t.patience} without improvement' if t.patience else 'no early stop'
    select = f'select on {selection.describe()}, {patience}'
  if cfg.data.batching == 'tokens':
    batch = f'~{cfg.data.tokens_per_batch} tokens ({cfg.data.num_buckets} padded shapes)'
  else:
    batch = f'{cfg.data.global_batch_size} examples'
  regularise = f'dropout {m.dropout:g}' if m.dropout else 'no dropout'
  if t.label_smoothing:
    regularise += f', label smoothing {t.label_smoothing:g}'
  schedule = o.schedule
  if o.schedule == 'plateau':
    schedule = f'x{o.plateau_factor:g} after {o.plateau_patience} evaluations without improvement'
    if o.plateau_min_scale:
      schedule += (f', stop below x{o.plateau_min_scale:g}' if o.plateau_at_floor == 'stop'
                   else f', held at x{o.plateau_min_scale:g}')
  lines = [
    f'{cfg.task.name}: {model}, H={m.hidden_size}, {regularise}; {num_params:,} parameters on '
    f'{num_devices} device(s)',
    f'{t.num_steps} steps of {batch}, {o.name} lr {o.learning_rate:g}'
    f' ({schedule}, warmup {o.warmup_steps}); eval every {t.eval_every} steps; {select}',
    f'run directory {workdir} (library logs: {log})',
  ]
  if filtered:
    lines.append(f'{filtered} training pairs longer than data.max_*_length are left out')
  if start_step:
    lines.append(f'resumed from step {start_step}')
  return lines


def result_line(split: str, step: int, metrics: dict, selection, stopped_at: int | None) -> str:
  """`test @ step 300 (selected: best eval wer 0.21 of 6 evaluations) | wer 0.22 | ...`."""
  if selection is not None and selection.best_step is not None:
    best = _format_number(selection.best_value)
    how = (f'selected on {SELECT_SPLIT} {selection.metric}: best {best}'
           f' at step {selection.best_step}')
  else:
    how = 'the last step'
  if stopped_at is not None:
    how += f'; stopped early at step {stopped_at}'
  first = [selection.metric] if selection is not None else []
  keys = first + [k for k in ('sequence_accuracy', 'wer', 'per', 'bleu', 'chrf', 'loss',
                              'perplexity') if k not in first]
  parts = [f'{split} @ step {step} ({how})']
  parts += [f'{k} {_format_number(metrics[k])}' for k in keys
            if isinstance(metrics.get(k), int | float)]
  return ' | '.join(parts)


def files_line(workdir: str, *, log: str) -> str:
  """Where the run's files are, as they exist on disk (or in the bucket)."""
  names = sorted(p.name for p in epath.Path(workdir).iterdir())
  files = (layout.FINAL_METRICS_FILE, layout.METRICS_FILE, layout.CONFIG_FILE)
  parts = [n for n in files if n in names]
  latest = layout.saved_steps(workdir)
  best = layout.saved_steps(workdir, best=True)
  checkpoints = f'checkpoints/ (latest: {", ".join(map(str, latest)) or "none"}'
  parts.append(checkpoints + (f'; best/: {best[-1]})' if best else ')'))
  parts += [f'{n}/' for n in (layout.SAMPLES, layout.ATTENTION) if n in names]
  parts += [n for n in names if n.startswith(layout.predictions_file(''))]
  if layout.TENSORBOARD in names:
    logdir = os.path.join(workdir, layout.TENSORBOARD)
    parts.append(f'{layout.TENSORBOARD}/ (tensorboard --logdir {logdir})')
  parts.append(os.path.basename(log))
  return f'files in {workdir}: ' + ', '.join(parts)
