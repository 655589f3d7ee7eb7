#!/usr/bin/env bash
# Runs ON each worker of a Cloud TPU VM; launch/tpu_vm.sh calls it on all workers at once.
#
#   launch/tpu_worker.sh [--dry_run] setup
#       a virtualenv in .venv with attnlab and jax[tpu] (libtpu comes from the package index),
#       made with python3, or with Ubuntu's python3.11 (installed by apt) when python3 is older
#       than 3.11, as on tpu-ubuntu2204-base (3.10)
#   CONFIG=configs/reverse.py WORKDIR=gs://bucket/runs/x launch/tpu_worker.sh [--dry_run] run [FLAGS...]
#       runs `python -m attnlab.main` with ATTNLAB_DISTRIBUTED=1, so that JAX finds the other
#       workers from the VM's metadata. attnlab writes a gs:// WORKDIR itself, through
#       etils.epath and orbax (the gcs extra, installed by setup; docs/running.md), so no mount
#       is needed; a path every worker shares (e.g. Filestore NFS) works as well.
#
# --dry_run prints the commands and runs none.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# shellcheck source=lib.bash
source "$(dirname "${BASH_SOURCE[0]}")/lib.bash"
parse_dry_run "$@"
run() {
  if (( dry_run )); then quote "$@"; else "$@"; fi
}

usage="usage: launch/tpu_worker.sh [--dry_run] setup | run [FLAGS...]"
(( ${#args[@]} )) || { echo "$usage" >&2; exit 2; }
action="${args[0]}"
flags=("${args[@]:1}")
cd "$ROOT"

case "$action" in
  setup)
    # jax 0.10, flax 0.12 and grain 0.2.18 require Python >= 3.11. The version
    # is read even with --dry_run (it changes nothing), so the dry run shows this worker's steps.
    python=python3
    if [[ ! $(python3 --version 2>&1) =~ ^Python\ 3\.(1[1-9]|[2-9][0-9]) ]]; then
      python=python3.11
      run sudo apt-get update -q
      run sudo apt-get install -y -q python3.11 python3.11-venv
    fi
    run "$python" -m venv .venv
    run .venv/bin/pip install -q --upgrade pip
    run .venv/bin/pip install -q -e '.[tpu,gcs]'  # pyproject.toml's jax range, with libtpu
    ;;
  run)
    : "${CONFIG:?set CONFIG=configs/<task>.py[:variant]}"
    : "${WORKDIR:?set WORKDIR=gs://<bucket>/<path> (or a path every worker shares)}"
    run env ATTNLAB_DISTRIBUTED=1 .venv/bin/python -m attnlab.main "--config=$CONFIG" \
      "--workdir=$WORKDIR" "${flags[@]}"
    ;;
  *)
    echo "unknown action '$action'; choose from setup, run ($usage)" >&2
    exit 2
    ;;
esac
