#!/usr/bin/env bash
# Runs ON each worker of a Cloud TPU VM; launch/tpu_vm.sh calls it on all workers at once.
#
#   launch/tpu_worker.sh [--dry_run] setup
#       a virtualenv in .venv with attnlab and jax[tpu] (libtpu comes from the package index),
#       made with python3, or with Ubuntu's python3.11 (installed by apt) when python3 is older
#       than 3.11, as on tpu-ubuntu2204-base (3.10)
#   CONFIG=configs/reverse.py WORKDIR=gs://bucket/runs/x launch/tpu_worker.sh [--dry_run] run [FLAGS...]
#       mounts the bucket of a gs:// WORKDIR with gcsfuse (installing it if missing) at
#       ~/gcs/<bucket>, then runs `python -m attnlab.main` with ATTNLAB_DISTRIBUTED=1, so that
#       JAX finds the other workers from the VM's metadata.
#
# The run writes its workdir through the mount (attnlab also takes a gs:// URL itself, with
# pip's gcs extra: docs/running.md). orbax finalises a checkpoint there by renaming its
# temporary directory, which gcsfuse only does with
# --rename-dir-limit. --dry_run prints the commands and runs none.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
GCS_MOUNTS="${GCS_MOUNTS:-$HOME/gcs}"

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
    run .venv/bin/pip install -q -e '.[tpu]'  # pyproject.toml's jax range, with libtpu
    ;;
  run)
    : "${CONFIG:?set CONFIG=configs/<task>.py[:variant]}"
    : "${WORKDIR:?set WORKDIR=gs://<bucket>/<path> (or a path every worker shares)}"
    workdir="$WORKDIR"
    if [[ $workdir == gs://* ]]; then
      path="${workdir#gs://}"
      bucket="${path%%/*}"
      mount="$GCS_MOUNTS/$bucket"
      workdir="$mount${path#"$bucket"}"
      if (( dry_run )); then echo '# only if gcsfuse is missing:'; fi
      if (( dry_run )) || ! command -v gcsfuse >/dev/null; then
        # Google's apt source for gcsfuse; the release name is read on the worker.
        # shellcheck disable=SC2016
        repo='deb [signed-by=/usr/share/keyrings/cloud.google.asc] https://packages.cloud.google.com/apt gcsfuse-$(lsb_release -c -s) main'
        run sudo bash -c "echo \"$repo\" > /etc/apt/sources.list.d/gcsfuse.list && curl -fsSL https://packages.cloud.google.com/apt/doc/apt-key.gpg > /usr/share/keyrings/cloud.google.asc && apt-get update -q && apt-get install -y -q gcsfuse"
      fi
      run mkdir -p "$mount"
      if (( dry_run )); then echo '# only if not mounted yet:'; fi
      if (( dry_run )) || ! mountpoint -q "$mount"; then
        run gcsfuse --implicit-dirs --rename-dir-limit=1000000 "$bucket" "$mount"
      fi
    fi
    run env ATTNLAB_DISTRIBUTED=1 .venv/bin/python -m attnlab.main "--config=$CONFIG" \
      "--workdir=$workdir" "${flags[@]}"
    ;;
  *)
    echo "unknown action '$action'; choose from setup, run ($usage)" >&2
    exit 2
    ;;
esac
