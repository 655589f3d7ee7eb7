#!/usr/bin/env bash
# One host, all its devices (CPU, one or more GPUs, a single TPU VM): one process runs
# `python -m attnlab.main`; every local device trains data-parallel.
#
#   CONFIG=configs/reverse.py WORKDIR=runs/reverse launch/local.sh [--dry_run] [FLAGS...]
#
# FLAGS go to attnlab.main unchanged, e.g. --config.model.attention.score=concat.
# Optional: PYTHON (default .venv/bin/python, else python3); CPU_DEVICES=N splits the CPU into
# N devices (try the parallel modes on a laptop). --dry_run prints the command instead.
set -euo pipefail

: "${CONFIG:?set CONFIG=configs/<task>.py[:variant]}"
: "${WORKDIR:?set WORKDIR=<run directory> (created if missing; rerunning resumes)}"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -x "$ROOT/.venv/bin/python" ]]; then
  PYTHON="${PYTHON:-.venv/bin/python}"
else
  PYTHON="${PYTHON:-python3}"
fi

# shellcheck source=lib.bash
source "$(dirname "${BASH_SOURCE[0]}")/lib.bash"
parse_dry_run "$@"

command=()
if [[ -n ${CPU_DEVICES:-} ]]; then
  [[ $CPU_DEVICES =~ ^[1-9][0-9]*$ ]] || { echo "CPU_DEVICES=$CPU_DEVICES: need a positive integer" >&2; exit 2; }
  command+=(env JAX_PLATFORMS=cpu "XLA_FLAGS=--xla_force_host_platform_device_count=$CPU_DEVICES")
fi
command+=("$PYTHON" -m attnlab.main --distributed=off "--config=$CONFIG" "--workdir=$WORKDIR"
          "${args[@]}")

cd "$ROOT"
if (( dry_run )); then
  echo "cd $(quote "$ROOT")"
  quote "${command[@]}"
else
  exec "${command[@]}"
fi
