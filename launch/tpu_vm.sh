#!/usr/bin/env bash
# A Cloud TPU VM or pod slice, from your workstation: (optionally) create it, copy this
# checkout to every worker, set up a virtualenv there, then run the same
# `python -m attnlab.main` on all workers at once (`gcloud ... ssh --worker=all`). JAX connects
# the workers itself (one process per worker; `ATTNLAB_DISTRIBUTED=1`).
#
#   TPU_NAME=attnlab-v4 ZONE=us-central2-b CONFIG=configs/reverse.py \
#   WORKDIR=gs://my-bucket/runs/reverse launch/tpu_vm.sh [--dry_run] [FLAGS...]
#
# Required: TPU_NAME, ZONE, CONFIG, WORKDIR. WORKDIR must be shared by all workers: a gs://
# path (attnlab writes the bucket itself, see launch/tpu_worker.sh) or a shared mount.
# Optional:
#   CREATE=1            create the TPU VM first, with ACCELERATOR_TYPE (default v4-32) and
#                       RUNTIME_VERSION (default tpu-ubuntu2204-base)
#   SETUP=0             skip copying the code and installing (rerun on a prepared VM)
#   PROJECT             gcloud project (default: gcloud's configured one)
#   REMOTE_DIR          checkout on the workers, relative to the home directory (attnlab)
#   TARBALL             local archive of the checkout (/tmp/attnlab-$TPU_NAME.tar.gz)
# FLAGS go to attnlab.main unchanged. --dry_run prints every command and runs none.
set -euo pipefail

: "${TPU_NAME:?set TPU_NAME=<TPU VM name>}"
: "${ZONE:?set ZONE=<zone of the TPU, e.g. us-central2-b>}"
: "${CONFIG:?set CONFIG=configs/<task>.py[:variant]}"
: "${WORKDIR:?set WORKDIR=gs://<bucket>/<path> (or a path every worker shares)}"
CREATE="${CREATE:-0}"
SETUP="${SETUP:-1}"
ACCELERATOR_TYPE="${ACCELERATOR_TYPE:-v4-32}"
RUNTIME_VERSION="${RUNTIME_VERSION:-tpu-ubuntu2204-base}"
REMOTE_DIR="${REMOTE_DIR:-attnlab}"
TARBALL="${TARBALL:-/tmp/attnlab-$TPU_NAME.tar.gz}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# shellcheck source=lib.bash
source "$(dirname "${BASH_SOURCE[0]}")/lib.bash"
parse_dry_run "$@"

run() {
  if (( dry_run )); then quote "$@"; else "$@"; fi
}

gcloud_tpu=(gcloud compute tpus tpu-vm)
where=("--zone=$ZONE")
if [[ -n ${PROJECT:-} ]]; then where+=("--project=$PROJECT"); fi

if [[ $CREATE == 1 ]]; then
  run "${gcloud_tpu[@]}" create "$TPU_NAME" "${where[@]}" "--accelerator-type=$ACCELERATOR_TYPE" \
    "--version=$RUNTIME_VERSION"
fi

if [[ $SETUP == 1 ]]; then
  # The working tree as it is (uncommitted edits included), without caches and local runs.
  run tar -czf "$TARBALL" --exclude=./.git --exclude=./.venv --exclude=./runs \
    --exclude=__pycache__ -C "$ROOT" .
  run "${gcloud_tpu[@]}" scp "$TARBALL" "$TPU_NAME:attnlab.tar.gz" "${where[@]}" --worker=all
  setup="mkdir -p $(quote "$REMOTE_DIR")"  # extracted over the old copy: its .venv stays
  setup+=" && tar -xzf attnlab.tar.gz -C $(quote "$REMOTE_DIR")"
  setup+=" && bash $(quote "$REMOTE_DIR/launch/tpu_worker.sh") setup"
  run "${gcloud_tpu[@]}" ssh "$TPU_NAME" "${where[@]}" --worker=all "--command=$setup"
fi

train="cd $(quote "$REMOTE_DIR") && CONFIG=$(quote "$CONFIG") WORKDIR=$(quote "$WORKDIR")"
train+=" bash launch/tpu_worker.sh run"
if (( ${#args[@]} )); then train+=" $(quote "${args[@]}")"; fi
run "${gcloud_tpu[@]}" ssh "$TPU_NAME" "${where[@]}" --worker=all "--command=$train"
