"""A sweep as a SLURM job array: `write_slurm_commands` lists one command per trial for
launch/slurm_sweep.sh, which submits them as one job array (`slurm_submission`; `submit` does
both). Each command runs one trial through the local runner (`attnlab.sweep ... --trial=NAME`)."""

from __future__ import annotations

import os
import shlex
import subprocess
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


def submit(
  experiment_path: str,
  experiment_name: str,
  workdir: str,
  trials: Sequence[Trial],
  *,
  archive: str | None,
  sbatch_args: str,
  parallel: int,
  dry_run: bool,
  out=None,
) -> None:
  """Writes the trials' commands and runs launch/slurm_sweep.sh on them: it submits the job
  array, or with `dry_run` prints the sbatch command it would run."""
  out = out or sys.stdout
  commands = write_slurm_commands(experiment_path, workdir, trials, archive=archive)
  command, env = slurm_submission(
    commands,
    shlex.split(sbatch_args),
    parallel=parallel,
    job_name=f'attnlab-{experiment_name}',
    dry_run=dry_run,
  )
  print(f'wrote {commands} ({len(trials)} trials)', file=out, flush=True)
  done = subprocess.run(command, env=env, capture_output=True, text=True)
  if done.returncode:
    raise SweepError(f'{shlex.join(command)} failed: {done.stderr.strip()}')
  if dry_run:
    print(f'not submitted (add --submit); it would run:\n{done.stdout.strip()}', file=out,
          flush=True)
  else:
    print(f'submitted job {done.stdout.strip()}', file=out, flush=True)
