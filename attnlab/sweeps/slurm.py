"""A sweep as a SLURM job array: `write_slurm_commands` lists one command per trial for
launch/slurm_sweep.sh, which submits them as one job array (`slurm_submission`). Each command
runs one trial through the local runner (`attnlab.sweep ... --trial=NAME`)."""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Sequence

from attnlab.sweeps.trials import PROJECT_ROOT, SweepError, Trial

SLURM_SUBMIT = os.path.join(PROJECT_ROOT, 'launch', 'slurm_sweep.sh')


def write_slurm_commands(
  experiment_path: str,
  workdir: str,
  trials: Sequence[Trial],
  *,
  python: str = sys.executable,
  archive: str | None = None,
) -> str:
  """DIR/slurm_commands.txt for launch/slurm_sweep.sh: array task i runs line i+1.

  Each line runs one trial through this runner (`attnlab.sweep ... --trial=NAME`), so status
  files, logs, skipping and resuming work on the cluster as they do locally.
  """
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, 'slurm_commands.txt')  # logs go to DIR/slurm_logs/
  experiment, root = os.path.abspath(experiment_path), os.path.abspath(workdir)
  with open(path, 'w') as f:
    for trial in trials:
      f.write(
        shlex.join(
          [
            python,
            '-m',
            'attnlab.sweep',
            experiment,
            f'--workdir={root}',
            f'--trial={trial.name}',
            '--noreport',
          ]
          + ([f'--archive={os.path.abspath(archive)}'] if archive else [])
        )
        + '\n'
      )
  return path


def slurm_submission(
  commands_file: str, sbatch_args: Sequence[str], *, parallel: int, job_name: str, dry_run: bool
) -> tuple[list[str], dict]:
  """The launch/slurm_sweep.sh command (and its environment) that submits the job array."""
  if not os.path.isfile(SLURM_SUBMIT):
    raise SweepError(f'{SLURM_SUBMIT} is missing: it submits sweeps to SLURM')
  command = ['bash', SLURM_SUBMIT] + (['--dry_run'] if dry_run else [])
  env = {**os.environ, 'JOB_NAME': job_name}
  if parallel > 0:
    env['MAX_PARALLEL'] = str(parallel)
  return command + [commands_file, *sbatch_args], env
