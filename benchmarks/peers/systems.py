"""Each system as its users run it: how it is prepared, trained and asked to translate.

A system writes its configuration into its run folder (`prepare`, not timed), trains with one
command (`train_command`), leaves checkpoints whose steps `checkpoint_steps` lists, reports its
training speed in a log (`speed_windows`), and translates a file of the exported inputs with
its own command (`translate_command`). The peers run from their own virtual environment
(benchmarks/peers/environment.py); attnlab from this interpreter and this checkout.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import yaml

from attnlab.rundir import layout
from attnlab.runtime import compilation_cache
from benchmarks.peers import environment, export, logs, recipes

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN_LOG = 'train.out'  # each system's console output, in its run folder
COMPILATION_CACHE = 'xla-cache'  # an attnlab row's compiled programs, in its run folder


def _steps(folder: str, pattern: re.Pattern) -> list[int]:
  if not os.path.isdir(folder):
    return []
  return sorted(int(m[1]) for m in map(pattern.fullmatch, os.listdir(folder)) if m)


def _write_yaml(file: str, config: dict) -> str:
  with open(file, 'w') as f:
    yaml.safe_dump(config, f, sort_keys=False)
  return file


class OpenNMT:
  name = 'opennmt-py'
  input_kind = export.SOURCE
  CHECKPOINT = re.compile(r'model_step_(\d+)\.pt')

  def __init__(self, task, venv_dir: str, data: str, run: str, plan: recipes.Plan):
    self.task, self.venv, self.data, self.run, self.plan = task, venv_dir, data, run, plan
    self.env = environment.peer_environment()
    self.config = os.path.join(run, 'train.yaml')

  def prepare(self) -> None:
    os.makedirs(self.run, exist_ok=True)
    _write_yaml(self.config, recipes.opennmt_config(self.task, self.data, self.run, self.plan))
    cmd = [
      environment.command(self.venv, 'onmt_build_vocab'),
      '-config',
      self.config,
      '-n_sample',
      '-1',
    ]
    subprocess.run(cmd, env=self.env, check=True, capture_output=True)

  def train_command(self) -> list[str]:
    return [environment.command(self.venv, 'onmt_train'), '-config', self.config]

  def checkpoint_steps(self) -> list[int]:
    return _steps(self.run, self.CHECKPOINT)

  def speed_windows(self) -> list[logs.Window]:
    return logs.opennmt_windows(export.read_lines(os.path.join(self.run, TRAIN_LOG)))

  def translate_command(self, step: int, source: str, output: str, beam: int) -> list[str]:
    return [
      environment.command(self.venv, 'onmt_translate'),
      '-model',
      os.path.join(self.run, f'model_step_{step}.pt'),
      '-src',
      source,
      '-output',
      output,
      '-beam_size',
      str(beam),
      '-batch_size',
      str(recipes.BATCH_SOURCES),
      '-batch_type',
      'sents',
      '-max_length',
      str(self.task.max_output),
    ]


class Joey:
  name = 'joeynmt'
  input_kind = export.SOURCE
  CHECKPOINT = re.compile(r'(\d+)\.ckpt')

  def __init__(self, task, venv_dir: str, data: str, run: str, plan: recipes.Plan):
    self.task, self.venv, self.data, self.run, self.plan = task, venv_dir, data, run, plan
    self.env = environment.peer_environment()
    self.model_dir = os.path.join(run, 'model')  # Joey NMT makes (and empties) it itself
    self.config = os.path.join(run, 'train.yaml')

  def prepare(self) -> None:
    os.makedirs(self.run, exist_ok=True)
    _write_yaml(self.config, recipes.joey_config(self.task, self.data, self.model_dir, self.plan))

  def train_command(self) -> list[str]:
    return [
      environment.python(self.venv),
      environment.JOEY_MAIN,
      'train',
      self.config,
      '--skip-test',
    ]

  def checkpoint_steps(self) -> list[int]:
    return _steps(self.model_dir, self.CHECKPOINT)

  def speed_windows(self) -> list[logs.Window]:
    return logs.joey_windows(export.read_lines(os.path.join(self.run, TRAIN_LOG)))

  def translate_command(self, step: int, source: str, output: str, beam: int) -> list[str]:
    """Joey NMT's translate reads the checkpoint and beam from a config and the input from
    stdin, and prints the outputs (its own --output-path fails in 2.3.0): the command runs
    under `sh -c` with both redirected."""
    config = _write_yaml(
      os.path.join(self.run, f'translate_{step}_beam{beam}.yaml'),
      recipes.joey_config(
        self.task,
        self.data,
        self.model_dir,
        self.plan,
        beam_size=beam,
        checkpoint=os.path.join(self.model_dir, f'{step}.ckpt'),
      ),
    )
    joey = f'{environment.python(self.venv)} {environment.JOEY_MAIN} translate {config}'
    return ['sh', '-c', f'exec {joey} < {source} > {output}']


class Attnlab:
  input_kind = export.INPUT

  def __init__(self, name: str, task, batching: str, data: str, run: str, plan: recipes.Plan,
               dtype: str = 'float32'):
    self.name, self.task, self.batching, self.dtype = name, task, batching, dtype
    self.data, self.run, self.plan = data, run, plan
    # An XLA compilation cache of the row's own, emptied with its run folder before training:
    # its training compiles as a first run on the machine does (the peers compile nothing), and
    # its decodes find what training left there, as a user's do.
    self.env = dict(os.environ, JAX_PLATFORMS='cpu',  # where the peers run
                    **{compilation_cache.ENV: os.path.join(run, COMPILATION_CACHE)})
    self.workdir = os.path.join(run, 'workdir')

  def prepare(self) -> None:
    os.makedirs(self.run, exist_ok=True)

  def train_command(self) -> list[str]:
    return [
      sys.executable,
      '-m',
      'attnlab.main',
      f'--workdir={self.workdir}',
      *recipes.attnlab_flags(self.task, self.plan, self.batching, self.dtype),
    ]

  def checkpoint_steps(self) -> list[int]:
    return layout.saved_steps(self.workdir)

  def speed_windows(self) -> list[logs.Window]:
    return logs.attnlab_windows(export.read_lines(os.path.join(self.workdir, layout.METRICS_FILE)))

  def translate_command(self, step: int, source: str, output: str, beam: int) -> list[str]:
    search = ['--search=greedy'] if beam == 1 else ['--search=beam', f'--beam_size={beam}']
    return [
      sys.executable,
      '-m',
      'attnlab.decode',
      f'--workdir={self.workdir}',
      f'--checkpoint={step}',
      f'--input={source}',
      f'--output={output}',
      *search,
      f'--batch_size={recipes.BATCH_SOURCES}',
      f'--max_decode_length={self.task.max_output}',
    ]


# attnlab's rows: (batching, model.dtype). attnlab-tokens-bf16 rounds the matmuls' operands to
# bfloat16 and sums in float32 (CPUs with avx512_bf16 or AMX run those natively).
ATTNLAB_ROWS = {
  'attnlab': ('examples', 'float32'),
  'attnlab-tokens': ('tokens', 'float32'),
  'attnlab-tokens-bf16': ('tokens', 'bfloat16_matmuls'),
}
SYSTEM_NAMES = (*ATTNLAB_ROWS, 'opennmt-py', 'joeynmt')


def build(name: str, task, venv_dir: str, data: str, runs: str, plan: recipes.Plan):
  """The system called `name` (SYSTEM_NAMES) on `task` (tasks.PeerTask), its run folder
  runs/NAME."""
  run = os.path.join(runs, name)
  if name in ATTNLAB_ROWS:
    batching, dtype = ATTNLAB_ROWS[name]
    return Attnlab(name, task, batching, data, run, plan, dtype)
  if name == 'opennmt-py':
    return OpenNMT(task, venv_dir, data, run, plan)
  if name == 'joeynmt':
    return Joey(task, venv_dir, data, run, plan)
  raise ValueError(f'unknown system {name!r}; choose from {", ".join(SYSTEM_NAMES)}')
