"""launch/ scripts: golden `--dry_run` output, required-variable guards, bash -n, shellcheck.

The printed commands are also split back with shlex and their `attnlab.main` flags parsed by
the real entry point, so quoting and flag names cannot drift from attnlab/main.py.
"""

import json
import shlex
import shutil
import subprocess
import sys
import time

import ml_collections
import pytest
from support import REPO
from support.parts import require

LAUNCH = REPO / 'launch'
SCRIPTS = sorted(p.name for p in LAUNCH.iterdir() if p.suffix in ('.sh', '.sbatch'))


def run(script: str, *args: str, cwd=REPO, **env: str) -> subprocess.CompletedProcess:
  """Runs a script with only PATH, HOME and `env` set, so the caller's variables cannot leak."""
  full_env = {'PATH': '/usr/local/bin:/usr/bin:/bin', 'HOME': '/home/me', **env}
  return subprocess.run(
    ['bash', str(LAUNCH / script), *args],
    cwd=cwd,
    env=full_env,
    capture_output=True,
    text=True,
    timeout=30,
  )


def dry_run(script: str, *args: str, **env: str) -> str:
  result = run(script, '--dry_run', *args, **env)
  assert result.returncode == 0, result.stderr
  return result.stdout.replace(str(REPO), '<root>')


# Parses argv with attnlab.main's own flag definitions, in a child process: absl flags are
# process-global, and other tests (attnlab.sweep) define flags of the same names.
_PARSE_MAIN_FLAGS = """
import json, sys
from absl import flags
from attnlab import main  # noqa: F401  (defines the flags)
argv = json.loads(sys.argv[1])
sys.argv = argv  # ml_collections reads the --config.KEY overrides from sys.argv
flags.FLAGS(argv)
print(json.dumps({'config': flags.FLAGS.config.to_dict(), 'workdir': flags.FLAGS.workdir,
                  'distributed': flags.FLAGS.distributed}))
"""


def main_flags(line: str):
  """Parses the attnlab.main flags of a printed command line with the real flag definitions."""
  argv = shlex.split(line)
  argv = argv[argv.index('attnlab.main') :]
  result = subprocess.run([sys.executable, '-c', _PARSE_MAIN_FLAGS, json.dumps(argv)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
  assert result.returncode == 0, result.stderr[-2000:]
  parsed = json.loads(result.stdout.splitlines()[-1])
  parsed['config'] = ml_collections.ConfigDict(parsed['config'])
  return parsed


def test_every_script_is_checked():
  assert SCRIPTS == [
    'local.sh',
    'slurm.sbatch',
    'slurm_sweep.sbatch',
    'slurm_sweep.sh',
    'tpu_vm.sh',
    'tpu_worker.sh',
  ]


@pytest.mark.parametrize('script', SCRIPTS)
def test_bash_syntax_and_strict_mode(script):
  text = (LAUNCH / script).read_text()
  assert text.startswith('#!/usr/bin/env bash\n')
  assert '\nset -euo pipefail\n' in text
  result = subprocess.run(['bash', '-n', str(LAUNCH / script)], capture_output=True, text=True)
  assert result.returncode == 0, result.stderr


def test_shellcheck():
  require('shellcheck', shutil.which('shellcheck') is not None, 'apt-get install shellcheck')
  result = subprocess.run(
    ['shellcheck', '--shell=bash', '--external-sources', *SCRIPTS],
    cwd=LAUNCH,
    capture_output=True,
    text=True,
  )
  assert result.returncode == 0, result.stdout


@pytest.mark.slow
def test_local():
  out = dry_run(
    'local.sh',
    '--config.model.attention.score=concat',
    "--config.eval.splits=('eval',)",
    CONFIG='configs/reverse.py:smoke',
    WORKDIR='runs/my run',
    PYTHON='python3',
    CPU_DEVICES='8',
  )
  assert out == (
    'cd <root>\n'
    'env JAX_PLATFORMS=cpu XLA_FLAGS=--xla_force_host_platform_device_count=8 python3 -m '
    "attnlab.main --distributed=off --config=configs/reverse.py:smoke '--workdir=runs/my run' "
    "--config.model.attention.score=concat '--config.eval.splits=('\\''eval'\\'',)'\n"
  )
  parsed = main_flags(out.splitlines()[1])
  assert parsed['workdir'] == 'runs/my run' and parsed['distributed'] == 'off'
  assert parsed['config'].model.attention.score == 'concat'
  assert tuple(parsed['config'].eval.splits) == ('eval',)
  assert parsed['config'].train.num_steps == 4  # the :smoke variant


def test_tpu_vm_create_copy_setup_run():
  out = dry_run(
    'tpu_vm.sh',
    '--config.seed=1',
    TPU_NAME='attnlab-v4',
    ZONE='us-central2-b',
    CONFIG='configs/reverse.py',
    WORKDIR='gs://my-bucket/runs/reverse',
    CREATE='1',
    PROJECT='my-project',
  )
  where = '--zone=us-central2-b --project=my-project'
  assert out == (
    f'gcloud compute tpus tpu-vm create attnlab-v4 {where} --accelerator-type=v4-32 '
    '--version=tpu-ubuntu2204-base\n'
    'tar -czf /tmp/attnlab-attnlab-v4.tar.gz --exclude=./.git --exclude=./.venv --exclude=./runs '
    '--exclude=__pycache__ -C <root> .\n'
    'gcloud compute tpus tpu-vm scp /tmp/attnlab-attnlab-v4.tar.gz attnlab-v4:attnlab.tar.gz '
    f'{where} --worker=all\n'
    f"gcloud compute tpus tpu-vm ssh attnlab-v4 {where} --worker=all '--command=mkdir -p "
    "attnlab && tar -xzf attnlab.tar.gz -C attnlab && bash attnlab/launch/tpu_worker.sh setup'\n"
    f"gcloud compute tpus tpu-vm ssh attnlab-v4 {where} --worker=all '--command=cd attnlab && "
    'CONFIG=configs/reverse.py WORKDIR=gs://my-bucket/runs/reverse bash launch/tpu_worker.sh '
    "run --config.seed=1'\n"
  )


def test_tpu_vm_rerun_without_setup():
  out = dry_run(
    'tpu_vm.sh',
    TPU_NAME='t',
    ZONE='z',
    CONFIG='configs/reverse.py',
    WORKDIR='/mnt/shared/run',
    SETUP='0',
  )
  assert out == (
    "gcloud compute tpus tpu-vm ssh t --zone=z --worker=all '--command=cd attnlab && "
    "CONFIG=configs/reverse.py WORKDIR=/mnt/shared/run bash launch/tpu_worker.sh run'\n"
  )


@pytest.mark.parametrize('version, steps', [
  # tpu-ubuntu2204-base: attnlab's jax, flax and grain need 3.11, which Ubuntu 22.04 packages.
  ('3.10.12', ['sudo apt-get update -q', 'sudo apt-get install -y -q python3.11 python3.11-venv',
               'python3.11 -m venv .venv']),
  ('3.11.9', ['python3 -m venv .venv']),
  ('3.12.3', ['python3 -m venv .venv']),
])
def test_tpu_worker_setup_makes_the_venv_with_python_3_11_or_newer(tmp_path, version, steps):
  (tmp_path / 'python3').write_text(f'#!/bin/sh\necho "Python {version}"\n')
  (tmp_path / 'python3').chmod(0o755)
  out = dry_run('tpu_worker.sh', 'setup', PATH=f'{tmp_path}:/usr/local/bin:/usr/bin:/bin')
  assert out.splitlines() == steps + [
    '.venv/bin/pip install -q --upgrade pip',
    ".venv/bin/pip install -q -e '.[tpu,gcs]'",
  ]


@pytest.mark.slow
def test_tpu_worker():
  out = dry_run(
    'tpu_worker.sh',
    'run',
    '--config.seed=1',
    CONFIG='configs/reverse.py',
    WORKDIR='gs://my-bucket/runs/reverse',
  )
  # attnlab writes the bucket itself (etils.epath, orbax): no mount.
  assert out == (
    'env ATTNLAB_DISTRIBUTED=1 .venv/bin/python -m attnlab.main --config=configs/reverse.py '
    '--workdir=gs://my-bucket/runs/reverse --config.seed=1\n'
  )
  parsed = main_flags(out.strip())
  assert parsed['distributed'] == 'auto' and parsed['config'].seed == 1
  assert parsed['workdir'] == 'gs://my-bucket/runs/reverse'
  # A path that every worker already shares is used as it is.
  out = dry_run('tpu_worker.sh', 'run', CONFIG='configs/reverse.py', WORKDIR='/mnt/nfs/run')
  assert out == (
    'env ATTNLAB_DISTRIBUTED=1 .venv/bin/python -m attnlab.main '
    '--config=configs/reverse.py --workdir=/mnt/nfs/run\n'
  )
  result = run('tpu_worker.sh', 'train')
  assert result.returncode == 2 and 'choose from setup, run' in result.stderr


@pytest.mark.slow
def test_slurm_multi_node():
  out = dry_run(
    'slurm.sbatch', '--config.seed=3', CONFIG='configs/reverse.py', WORKDIR='/shared/runs/reverse'
  )
  assert out == (
    'srun --kill-on-bad-exit=1 --ntasks-per-node=8 env ATTNLAB_DISTRIBUTED=1 '
    '.venv/bin/python -m attnlab.main --config=configs/reverse.py '
    '--workdir=/shared/runs/reverse --config.seed=3\n'
  )
  assert main_flags(out)['config'].seed == 3
  text = (LAUNCH / 'slurm.sbatch').read_text()
  for option in ('--nodes=2', '--ntasks-per-node=8', '--gpus-per-node=8'):
    assert f'#SBATCH {option}\n' in text
  # Outside an allocation a real run stops before srun.
  result = run('slurm.sbatch', CONFIG='configs/reverse.py', WORKDIR='/shared/x')
  assert result.returncode != 0 and 'SLURM_JOB_ID' in result.stderr


@pytest.mark.slow
def test_slurm_sweep(tmp_path):
  commands = tmp_path / 'sweep' / 'slurm_commands.txt'
  commands.parent.mkdir()
  trials = [
    [
      'python',
      '-m',
      'attnlab.main',
      '--config=configs/reverse.py',
      '--workdir=runs/sw/score=dot,seed=0',
      '--config.model.attention.score=dot',
    ],
    [
      'python',
      '-m',
      'attnlab.main',
      '--config=configs/reverse.py',
      "--workdir=runs/sw/it's seed=1",
      '--config.seed=1',
    ],
  ]
  commands.write_text(''.join(shlex.join(t) + '\n' for t in trials))
  out = dry_run(
    'slurm_sweep.sh', str(commands), '--partition=gpu', '--time=2:00:00', MAX_PARALLEL='4'
  ).replace(str(tmp_path), '<tmp>')
  assert out == (
    'mkdir -p <tmp>/sweep/slurm_logs\n'
    'sbatch --parsable --array=0-1%4 --job-name=attnlab-sweep --chdir=<root> '
    '--output=<tmp>/sweep/slurm_logs/%x-%A_%a.out --partition=gpu --time=2:00:00 '
    '<root>/launch/slurm_sweep.sbatch <tmp>/sweep/slurm_commands.txt\n'
  )
  # Each array task runs exactly its own line, quoting intact.
  for task, trial in enumerate(trials):
    line = dry_run('slurm_sweep.sbatch', str(commands), SLURM_ARRAY_TASK_ID=str(task))
    srun = shlex.split(line)
    assert srun[:3] == ['srun', '--kill-on-bad-exit=1', 'bash'] and srun[3] == '-c'
    assert shlex.split(srun[4]) == trial
  assert main_flags(srun[4])['workdir'] == "runs/sw/it's seed=1"


@pytest.mark.parametrize(
  'script, args, env, message',
  [
    ('local.sh', (), {'WORKDIR': 'w'}, 'CONFIG'),
    ('local.sh', (), {'CONFIG': 'c'}, 'WORKDIR'),
    ('local.sh', (), {'CONFIG': 'c', 'WORKDIR': 'w', 'CPU_DEVICES': 'all'}, 'positive integer'),
    ('tpu_vm.sh', (), {'ZONE': 'z', 'CONFIG': 'c', 'WORKDIR': 'w'}, 'TPU_NAME'),
    ('tpu_vm.sh', (), {'TPU_NAME': 't', 'CONFIG': 'c', 'WORKDIR': 'w'}, 'ZONE'),
    ('tpu_worker.sh', ('run',), {'CONFIG': 'c'}, 'WORKDIR'),
    ('slurm.sbatch', (), {'WORKDIR': 'w'}, 'CONFIG'),
    ('slurm_sweep.sh', (), {}, 'usage'),
    ('slurm_sweep.sh', ('missing.txt',), {}, 'does not exist'),
    ('slurm_sweep.sbatch', ('launch/local.sh',), {}, 'SLURM_ARRAY_TASK_ID'),
    ('slurm_sweep.sbatch', ('launch/local.sh',), {'SLURM_ARRAY_TASK_ID': '999'}, 'no line 1000'),
  ],
)
def test_guards(script, args, env, message):
  result = run(script, '--dry_run', *args, **env)
  assert result.returncode != 0 and result.stdout == ''
  assert message in result.stderr


def test_sweep_rejects_blank_lines_and_bad_limits(tmp_path):
  commands = tmp_path / 'c.txt'
  commands.write_text('echo a\n\necho b\n')
  result = run('slurm_sweep.sh', '--dry_run', str(commands))
  assert result.returncode == 2 and 'line 2 is blank' in result.stderr
  commands.write_text('echo a\n')
  result = run('slurm_sweep.sh', '--dry_run', str(commands), MAX_PARALLEL='0')
  assert result.returncode == 2 and 'MAX_PARALLEL=0' in result.stderr


def fake_tools(tmp_path) -> str:
  """A PATH whose `srun` runs its command and whose `sbatch` records its arguments."""
  bin_dir = tmp_path / 'bin'
  bin_dir.mkdir()
  (bin_dir / 'srun').write_text('#!/bin/bash\nwhile [[ $1 == --* ]]; do shift; done\nexec "$@"\n')
  (bin_dir / 'sbatch').write_text(
    f'#!/bin/bash\nprintf "%s\\n" "$@" > {tmp_path}/sbatch_args\necho 4242\n'
  )
  for tool in ('srun', 'sbatch'):
    (bin_dir / tool).chmod(0o755)
  return f'{bin_dir}:/usr/local/bin:/usr/bin:/bin'


def test_slurm_sweep_really_runs_its_line(tmp_path):
  path = fake_tools(tmp_path)
  commands = tmp_path / 'commands.txt'
  commands.write_text(
    ''.join(
      shlex.join(['sh', '-c', f'echo "$0" > {tmp_path}/ran', f'trial {i}']) + '\n' for i in range(3)
    )
  )
  result = run('slurm_sweep.sh', str(commands), '--partition=gpu', PATH=path, MAX_PARALLEL='2')
  assert result.returncode == 0, result.stderr
  assert result.stdout == '4242\n'  # the job id, as sbatch --parsable prints it
  assert (tmp_path / 'slurm_logs').is_dir()  # made before submitting: sbatch would not
  args = (tmp_path / 'sbatch_args').read_text().splitlines()
  assert args[:2] == ['--parsable', '--array=0-2%2'] and args[-1] == str(commands)
  result = run('slurm_sweep.sbatch', str(commands), PATH=path, SLURM_ARRAY_TASK_ID='1')
  assert result.returncode == 0, result.stderr
  assert (tmp_path / 'ran').read_text() == 'trial 1\n'


def test_slurm_job_stopped_before_its_time_limit_saves_and_requeues(tmp_path):
  """SIGTERM to the batch script (what --signal=B:TERM@300 sends before the time limit) reaches
  the runs, which exit after saving; the script then requeues its job."""
  bin_dir = tmp_path / 'bin'
  bin_dir.mkdir()
  # srun stands in for the runs: on SIGTERM it records it and exits as attnlab.main does.
  (bin_dir / 'srun').write_text(
    f"#!/bin/bash\ntrap 'echo saved > {tmp_path}/term; exit 1' TERM\n"
    f'echo started > {tmp_path}/started\nwhile true; do sleep 0.1; done\n'
  )
  (bin_dir / 'scontrol').write_text(f'#!/bin/bash\necho "$@" > {tmp_path}/scontrol\n')
  for tool in ('srun', 'scontrol'):
    (bin_dir / tool).chmod(0o755)
  env = {'PATH': f'{bin_dir}:/usr/local/bin:/usr/bin:/bin', 'HOME': '/home/me',
         'CONFIG': 'configs/reverse.py', 'WORKDIR': str(tmp_path / 'run'), 'SLURM_JOB_ID': '77'}
  job = subprocess.Popen(['bash', str(LAUNCH / 'slurm.sbatch')], cwd=REPO, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  try:
    deadline = time.monotonic() + 30
    while not (tmp_path / 'started').exists() and job.poll() is None:
      assert time.monotonic() < deadline, 'the stand-in srun never started'
      time.sleep(0.05)
    assert job.poll() is None, job.communicate(timeout=5)
    job.terminate()
    out, err = job.communicate(timeout=30)
  finally:
    job.kill()
  assert (tmp_path / 'term').read_text() == 'saved\n'
  assert (tmp_path / 'scontrol').read_text() == 'requeue 77\n'
  assert 'requeued to resume' in out and job.returncode == 1, err
  text = (LAUNCH / 'slurm.sbatch').read_text()
  assert '#SBATCH --signal=B:TERM@300\n' in text and '#SBATCH --requeue\n' in text
