#!/usr/bin/env bash
# Submits a sweep to SLURM as one job array: task i runs line i+1 of COMMANDS_FILE.
#
#   launch/slurm_sweep.sh [--dry_run] COMMANDS_FILE [SBATCH_OPTIONS...]
#
# COMMANDS_FILE holds one trial per line: a complete shell command, run from the repository
# root (e.g. `python -m attnlab.main --config=... --workdir=... --config.KEY=VALUE`, written
# with Python's shlex.join); no blank lines. `python -m attnlab.sweep ... --backend slurm`
# writes it and calls this script. SBATCH_OPTIONS (e.g. --partition=gpu --time=2:00:00
# --gpus-per-node=1) go to sbatch and beat the #SBATCH defaults of launch/slurm_sweep.sbatch.
# Optional: MAX_PARALLEL=N runs at most N trials at once; JOB_NAME (attnlab-sweep); LOG_DIR
# (COMMANDS_FILE's directory/slurm_logs), where each task writes <job name>-<job>_<task>.out.
# Prints the job id (sbatch --parsable). --dry_run prints the sbatch command instead.
set -euo pipefail

# shellcheck source=lib.bash
source "$(dirname "${BASH_SOURCE[0]}")/lib.bash"
parse_dry_run "$@"
(( ${#args[@]} )) || { echo "usage: launch/slurm_sweep.sh [--dry_run] COMMANDS_FILE [SBATCH_OPTIONS...]" >&2; exit 2; }
commands_file="${args[0]}"
sbatch_options=("${args[@]:1}")
[[ -f $commands_file ]] || { echo "COMMANDS_FILE '$commands_file' does not exist" >&2; exit 2; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
commands_file="$(cd "$(dirname "$commands_file")" && pwd)/$(basename "$commands_file")"
JOB_NAME="${JOB_NAME:-attnlab-sweep}"
LOG_DIR="${LOG_DIR:-$(dirname "$commands_file")/slurm_logs}"

mapfile -t lines < "$commands_file"
(( ${#lines[@]} )) || { echo "$commands_file holds no command" >&2; exit 2; }
for i in "${!lines[@]}"; do
  [[ ${lines[$i]} =~ [^[:space:]] ]] || { echo "$commands_file: line $((i + 1)) is blank" >&2; exit 2; }
done
array="0-$(( ${#lines[@]} - 1 ))"
if [[ -n ${MAX_PARALLEL:-} ]]; then
  [[ $MAX_PARALLEL =~ ^[1-9][0-9]*$ ]] || { echo "MAX_PARALLEL=$MAX_PARALLEL: need a positive integer" >&2; exit 2; }
  array+="%$MAX_PARALLEL"
fi

command=(sbatch --parsable "--array=$array" "--job-name=$JOB_NAME" "--chdir=$ROOT"
         "--output=$LOG_DIR/%x-%A_%a.out" "${sbatch_options[@]}" "$ROOT/launch/slurm_sweep.sbatch"
         "$commands_file")
if (( dry_run )); then
  echo "mkdir -p $(quote "$LOG_DIR")"
  quote "${command[@]}"
else
  mkdir -p "$LOG_DIR"  # sbatch does not create the directory of --output
  "${command[@]}"
fi
