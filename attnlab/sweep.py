r"""Run an experiment file as a sweep of trials, locally or as a SLURM job array.

    python -m attnlab.sweep experiments/score_timing.py --workdir=runs/score_timing \
        [--parallel=2] [--archive=results/score_timing] [--dry_run] [--backend=local|slurm]
        [--cpu_share=K/N]

Each trial (attnlab/sweeps/trials.py) runs `python -m attnlab.main` in its own process and
directory DIR/NAME, so a crash cannot take the sweep down. Every trial's config is checked
first; one that does not build is recorded as failed and the rest run. Rerunning the command
skips finished trials (final_metrics.json present) and continues the others from their
checkpoints (an interrupted sweep resumes). A failed trial keeps its error in
DIR/NAME/sweep_status.json and its output in DIR/NAME/sweep_log.txt. DIR/sweep.json lists the
trials. At the end the report is written (`python -m attnlab.report DIR`; skip with
--noreport). DIR (and ARCHIVE) must be new, empty, or this experiment's own sweep (its
sweep.json names it): any other folder is refused before anything is written.

--archive=ARCHIVE keeps a copy of each finished trial without its checkpoints in ARCHIVE/NAME
(attnlab/sweeps/archive.py): a sweep longer than one machine's life goes on elsewhere from the
archive (commit it, or copy it to lasting storage), restoring its finished trials into
--workdir instead of training them again. The report is written into ARCHIVE too. A trial that
another experiment's archive beside ARCHIVE holds finished under the same resolved config is
copied from there, not trained again (attnlab/sweeps/shared.py; --noshare trains it anyway).

Several sweep processes can work on one sweep (on one host): run the same command again, and
each starts only the trials it claims (attnlab/sweeps/claims.py). One that finds nothing left
to claim ends while the other finishes its trials, so a queue of experiments run by two such
processes keeps two cores busy where one process with --parallel=2 would idle one at the end of
each experiment; --cpu_share=1/2 and 2/2 give each its own half of the CPUs. A trial whose
config another experiment beside this one is training waits for it and is copied.

Trials running side by side get their own devices (attnlab/sweeps/slots.py): GPUs split
between them; without GPUs, --parallel=N pins each to its share of the CPUs, where XLA:CPU's
thread pool then runs on its own cores.

--select=REGEX runs only the trials whose name matches REGEX (re.search), e.g. --select=^g2p for
the G2P half of experiments/local_global.py: an experiment can be run in parts, in the order a
researcher needs its results. Restoring, archiving, sharing and the report still cover the whole
experiment.

--backend=slurm writes DIR/slurm_commands.txt, one line per unfinished trial (each runs this
module with --trial=NAME), and prints the `sbatch` command of launch/slurm_sweep.sh that runs
them as one job array; --submit submits it, with --sbatch_args (e.g. '--partition=gpu
--time=2:00:00'); --parallel caps the trials running at once.
"""

from __future__ import annotations

import os
import re
import signal
import sys

from absl import app, flags

from attnlab import cli, data, storage
from attnlab.reporting import sweep_report as report_lib
from attnlab.sweeps import archive as archive_lib
from attnlab.sweeps import claims, folders, listing, slots, slurm, trial_dirs
from attnlab.sweeps import runner as sweep_runner
from attnlab.sweeps import shared as shared_lib
from attnlab.sweeps import trials as trials_lib
from attnlab.sweeps.trials import SweepError

_WORKDIR = flags.DEFINE_string('workdir', None, 'Sweep directory: one subdirectory per trial.')
_PARALLEL = flags.DEFINE_integer(
  'parallel', 0, 'Trials at once (0: local 1, slurm no limit).', lower_bound=0
)
_DRY_RUN = flags.DEFINE_bool('dry_run', False, 'List the trials and their state; run nothing.')
_BACKEND = flags.DEFINE_enum('backend', 'local', ['local', 'slurm'], 'Where trials run.')
_SUBMIT = flags.DEFINE_bool('submit', False, 'slurm: submit the job array.')
_SBATCH_ARGS = flags.DEFINE_string('sbatch_args', '', 'slurm: extra sbatch options.')
_ARCHIVE = flags.DEFINE_string(
  'archive', None, 'Keep each finished trial, without checkpoints, in this folder; restore the '
  'trials finished there (attnlab/sweeps/archive.py).'
)
_SHARE = flags.DEFINE_bool(
  'share', True, 'With --archive: copy the trials that another archive beside it holds finished '
  'under the same config instead of training them (attnlab/sweeps/shared.py).'
)
_SELECT = flags.DEFINE_string(
  'select', None, 'Run only the trials whose name matches this regular expression (e.g. ^g2p); '
  'restoring, archiving and the report still cover the whole experiment.'
)
_TRIAL = flags.DEFINE_string('trial', None, 'Run only this trial (name); used by slurm tasks.')
_REPORT = flags.DEFINE_bool('report', True, 'Write the report when the trials are done.')
_SIZES = flags.DEFINE_enum(
  'sizes', None, trials_lib.SIZES, 'Model and trial sizes the experiment file picks '
  f'(experiments/sizes.py; default: ${trials_lib.SIZES_VARIABLE}, else cpu): cpu, for CPU '
  'cores, or accelerator, the papers\' widths for a GPU or TPU.'
)
_CPU_SHARE = flags.DEFINE_string(
  'cpu_share', None, 'K/N: run the trials on the K-th of N equal shares of the CPUs this '
  'process may use, pinned there, for N sweep processes side by side (e.g. 1/2 and 2/2).'
)
_PROGRESS_EVERY = flags.DEFINE_float(
  'progress_every', 30.0, 'Seconds between progress lines.', lower_bound=0
)


def _print(line: str = '', out=None) -> None:
  print(line, file=out or sys.stdout, flush=True)


def prepare_data(configs: dict, todo, out=None) -> None:
  """Prepares each distinct dataset once before trials run side by side (--parallel, or other
  sweep processes beside this one).

  Real tasks write their TFDS files on first use; two trials doing that at once would race on
  the same directory. Synthetic tasks cost nothing here (their splits are built lazily).
  """
  seen = set()
  for trial in todo:
    config = configs[trial.name]
    key = (config.task.to_json(), config.seed)
    if key in seen:
      continue
    seen.add(key)
    try:
      data.load_task(config)
    except Exception as e:  # noqa: BLE001 - the trial itself reports the error in full
      _print(f'warning: preparing data for {trial.name} failed: {type(e).__name__}: {e}', out)


def relax_limits(trials, dirs, states, workdir, archive, out=None) -> None:
  """Trials run under a stricter step cap or learning-rate floor than the experiment now gives:
  one that ended otherwise is kept, the others train on from their checkpoints
  (trial_dirs.relax_trial)."""
  relaxed = {}
  for trial in trials:
    old = trial_dirs.check_same_trial(dirs[trial.name], trial)
    if old:
      trial_dirs.check_relaxable(dirs[trial.name], trial, old)  # before any change
      relaxed[trial.name] = (trial, old)
  for trial, old in relaxed.values():
    directory = dirs[trial.name]
    finished = states[trial.name] == 'finished'
    ended = (f'it stopped at step {trial_dirs.read_final(directory).get("trained_steps")} '
             f'{trial_dirs.ENDINGS[trial_dirs.ending(directory)]}: ') if finished else ''
    outcome = trial_dirs.relax_trial(directory, trial, old)
    states[trial.name] = trial_dirs.trial_state(directory)
    if outcome == 'kept':
      how = f'{ended}kept'
      if archive:
        archive_lib.archive_trial(workdir, archive, trial)
    else:
      how = f'{ended}trains on from its latest checkpoint'
    tags = '/'.join(trial_dirs.LIMITS[key].ending for key in old)
    _print(f'[{tags}] {trial.name}: {trial_dirs.describe_change(trial, old)}; {how}', out)


def select_trials(trials, pattern: str, experiment_path: str):
  """The trials whose name matches `pattern` (re.search); a SweepError if it is not a regular
  expression or matches none."""
  try:
    regex = re.compile(pattern)
  except re.error as e:
    raise SweepError(f'--select={pattern!r} is not a regular expression: {e}') from None
  chosen = [t for t in trials if regex.search(t.name)]
  if not chosen:
    raise SweepError(
      f'--select={pattern!r} matches none of the {len(trials)} trials of {experiment_path}; '
      '--dry_run lists them'
    )
  return chosen


def copy_shared_trials(trials, configs, dirs, states, workdir, archive, out=None) -> None:
  """Copies the unfinished trials another experiment's archive holds finished under the same
  config (shared.copy_shared); a trial running in another process is left alone."""
  pending = [
    t for t in trials
    if states[t.name] != 'finished' and trial_dirs.running_elsewhere(dirs[t.name]) is None
  ]
  for name, origin in shared_lib.copy_shared(pending, configs, workdir, archive).items():
    states[name] = 'finished'
    _print(shared_lib.copied_line(name, origin), out)


def prepare_workdir(experiment, backend, valid, configs, dirs, states, workdir, archive, *,
                    share: bool, whole: bool, out=None) -> None:
  """Writes the manifest, restores and archives finished trials, copies shared ones and relaxes
  limits; updates `states`. `whole`: the sweep covers the experiment, not one --trial.

  One --trial writes the manifest only where there is none yet, so that every folder a sweep
  writes into names its experiment (folders.check_folder_owner lets the next sweep in).
  The folders are checked again here, under the sweep's lock, as another process may have
  written into them since run_sweep checked them."""
  folders.check_folder_owner(workdir, experiment, '--workdir')
  folders.check_folder_owner(archive, experiment, '--archive')
  if whole or not os.path.isfile(os.path.join(workdir, trials_lib.MANIFEST)):
    trials_lib.write_manifest(workdir, experiment, backend)
  if archive:
    if whole or not os.path.isfile(os.path.join(archive, trials_lib.MANIFEST)):
      archive_lib.copy_manifest(workdir, archive)
    restored, archived, outdated = archive_lib.sync(workdir, archive, valid)
    states.update({name: 'finished' for name in restored})
    if restored or archived or outdated:
      _print(f'archive {archive}: {len(restored)} finished trials restored, '
             f'{len(archived)} archived'
             + (f', {len(outdated)} ended at a limit relaxed since (trained on)'
                if outdated else ''),
             out)
    if share:
      copy_shared_trials(valid, configs, dirs, states, workdir, archive, out)
  relax_limits(valid, dirs, states, workdir, archive, out)


def run_sweep(
  experiment_path: str,
  workdir: str,
  *,
  parallel: int = 1,
  cpu_share: str | None = None,
  dry_run: bool = False,
  backend: str = 'local',
  submit: bool = False,
  sbatch_args: str = '',
  only: str | None = None,
  select: str | None = None,
  archive: str | None = None,
  share: bool = True,
  report: bool = True,
  progress_every: float = 30.0,
  out=None,
  python: str = sys.executable,
) -> int:
  """Runs (or lists) the sweep; returns the exit code: 0 when every trial finished."""
  share_of_cpus = None if cpu_share is None else slots.parse_share(cpu_share)
  if share_of_cpus and backend == 'slurm':
    raise SweepError('--cpu_share pins the trials of a local sweep; SLURM gives each task its '
                     "CPUs (e.g. --sbatch_args='--cpus-per-task=4')")
  experiment = trials_lib.load_experiment(experiment_path)
  check_folders(experiment, workdir, archive)
  trials = list(experiment.trials)
  if only is not None:
    trials = [t for t in trials if t.name == only]
    if not trials:
      raise SweepError(f'{experiment_path} has no trial {only!r}; --dry_run lists them')
  chosen = trials if select is None else select_trials(trials, select, experiment_path)
  configs, errors = trials_lib.check_trials(trials)
  dirs = {t.name: sweep_runner.trial_dir(workdir, t) for t in trials}
  states = {t.name: trial_dirs.trial_state(dirs[t.name]) for t in trials}
  if dry_run:
    listing.list_trials(experiment, trials, chosen, configs, errors, dirs, states, workdir,
                        archive, share=share, out=out)
    return 1 if errors else 0
  for trial in trials:  # other settings are refused before anything is written
    trial_dirs.check_same_trial(dirs[trial.name], trial)
  valid = [t for t in trials if t.name not in errors]
  with claims.sweep_lock(workdir):  # another sweep process on this workdir may be here too
    prepare_workdir(experiment, backend, valid, configs, dirs, states, workdir, archive,
                    share=share, whole=only is None, out=out)
  todo = [t for t in chosen if states[t.name] != 'finished' and t.name not in errors]
  skipped = sum(state == 'finished' for state in states.values())
  selected = '' if select is None else f' ({len(chosen)} selected by --select={select})'
  _print(
    f'{experiment.name}: {len(trials)} trials, {skipped} finished (skipped), {len(todo)} to '
    f'run{selected}, {len(errors)} invalid -> {workdir}',
    out,
  )
  runner = local_runner(workdir, configs, parallel=parallel, cpu_share=share_of_cpus,
                        archive=archive, share=share, progress_every=progress_every,
                        python=python, out=out)
  for trial in trials:
    if trial.name in errors:
      runner.record_invalid(trial, errors[trial.name])
  if todo:  # before any trial: trials of this and of other sweep processes start side by side
    with claims.data_lock(workdir):
      prepare_data(configs, todo, out)
  if backend == 'slurm':
    if not todo:
      _print('nothing to submit: every valid trial is finished', out)
      return 1 if errors else 0
    slurm.submit(experiment_path, experiment.name, workdir, todo, archive=archive,
                 sbatch_args=sbatch_args, parallel=parallel, dry_run=not submit, out=out)
    return 0
  final = runner.run(todo)
  failed = len(errors) + sum(state not in ('finished', 'running') for state in final.values())
  elsewhere = sum(state == 'running' for state in final.values())
  if elsewhere:
    _print(f'{elsewhere} trial(s) still running in another process, which finishes them', out)
  if report and only is None:
    write_reports(workdir, archive, out)
  return 1 if failed else 0


def check_folders(experiment, workdir: str, archive: str | None) -> None:
  """Refuses a --workdir or --archive that holds another experiment's sweep, an archive that is
  the workdir itself, and a bucket's folder: a sweep's claims and locks need a local (or shared)
  file system (docs/running.md, Cloud workdirs)."""
  for flag, folder in (('--workdir', workdir), ('--archive', archive)):
    if folder and storage.is_remote(folder):
      raise SweepError(f'{flag}={folder}: a sweep keeps its trials in a local or shared folder '
                       '(its claims and locks need one); a single training takes a bucket\'s '
                       '--workdir')
  folders.check_folder_owner(workdir, experiment, '--workdir')
  folders.check_folder_owner(archive, experiment, '--archive')
  if archive and os.path.realpath(archive) == os.path.realpath(workdir):
    # Archiving a trial onto itself would drop its checkpoints (archive.KEPT).
    raise SweepError(f'--archive={archive} is the --workdir: the archive is a copy kept apart '
                     f'from it; give another folder (e.g. --archive=results/{experiment.name})')


def local_runner(workdir: str, configs: dict, *, parallel: int, archive: str | None, share: bool,
                 progress_every: float, python: str, cpu_share: tuple[int, int] | None = None,
                 out=None) -> sweep_runner.LocalRunner:
  steps = {name: config.train.num_steps for name, config in configs.items()}
  sharing = bool(archive and share)
  return sweep_runner.LocalRunner(
    workdir,
    steps,
    parallel=max(parallel, 1),
    cpu_share=cpu_share,
    archive=archive,
    progress_every=progress_every,
    python=python,
    out=out or sys.stdout,
    # Shared trials are claimed by config: one claim for the same trial in every experiment.
    claim_key=(lambda t: shared_lib.config_key(configs[t.name].to_dict())) if sharing else None,
    copy_shared=(lambda t: shared_lib.copy_shared([t], configs, workdir, archive).get(t.name))
    if sharing else None,
  )


def write_reports(workdir: str, archive: str | None, out=None) -> None:
  with claims.sweep_lock(workdir):  # one report at a time: the last one written is complete
    _print(f'report: {report_lib.write_report(workdir)}', out)
    if archive:
      _print(f'report: {report_lib.write_report(archive)}', out)


def _interrupt(signum, frame):
  raise KeyboardInterrupt  # stop and record running trials as on Ctrl-C (e.g. on scancel)


def main(argv):
  signal.signal(signal.SIGTERM, _interrupt)
  if _SIZES.value:  # read by the experiment file, through experiments/sizes.py
    os.environ[trials_lib.SIZES_VARIABLE] = _SIZES.value
  if len(argv) != 2:
    raise app.UsageError('usage: python -m attnlab.sweep experiments/<name>.py --workdir=DIR')
  if not _WORKDIR.value:
    raise app.UsageError('--workdir is required')
  try:
    code = run_sweep(
      argv[1],
      _WORKDIR.value,
      parallel=_PARALLEL.value,
      cpu_share=_CPU_SHARE.value,
      dry_run=_DRY_RUN.value,
      backend=_BACKEND.value,
      submit=_SUBMIT.value,
      sbatch_args=_SBATCH_ARGS.value,
      only=_TRIAL.value,
      select=_SELECT.value,
      archive=_ARCHIVE.value,
      share=_SHARE.value,
      report=_REPORT.value,
      progress_every=_PROGRESS_EVERY.value,
    )
  except KeyboardInterrupt:
    sys.exit('interrupted: rerun the same command to resume')
  sys.exit(code)


def run() -> None:
  """The `attnlab-sweep` command (pyproject.toml's scripts), as `python -m attnlab.sweep`."""
  cli.run(main)


if __name__ == '__main__':
  run()
