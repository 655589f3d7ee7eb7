#!/usr/bin/env bash
# Sourced by the launch scripts (not run on its own): quoting for printed commands and the
# shared --dry_run flag.

# Words quoted for a shell only where needed, so printed commands can be pasted back.
quote() {
  local out=() word
  for word in "$@"; do
    if [[ $word =~ ^[A-Za-z0-9_./:=@%+,-]+$ ]]; then
      out+=("$word")
    else
      out+=("'${word//\'/\'\\\'\'}'")
    fi
  done
  echo "${out[*]}"
}

# Sets dry_run (0 or 1) and args (every argument except --dry_run).
parse_dry_run() {
  dry_run=0
  args=()
  local arg
  for arg in "$@"; do
    if [[ $arg == --dry_run ]]; then dry_run=1; else args+=("$arg"); fi
  done
}
