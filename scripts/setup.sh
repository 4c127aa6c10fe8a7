#!/usr/bin/env bash
# Set a fresh machine up for porter: Python package, Docker engine, debootstrap, the local images.
# Used by the README's main command and by .ci/run. Safe to rerun: every step skips what is done.
#   --no-twin   stop after the base image (the tests build the twin images they need themselves)
set -euo pipefail
cd "$(dirname "$0")/.."

build_twin=1
for arg in "$@"; do
  case "$arg" in
    --no-twin) build_twin=0 ;;
    *) echo "setup.sh: unknown argument: $arg (expected --no-twin)" >&2; exit 2 ;;
  esac
done

log() { printf '== %s (%s)\n' "$*" "$(date -u +%H:%M:%S)"; }

log "python packages (requirements.lock)"
# The lock pins every dependency with hashes (scripts/lock.sh refreshes it); the package itself goes on top
# without letting pip resolve anything again.
python3 -m pip install -q --require-hashes -r requirements.lock 2>&1 | grep -v -e '^WARNING' -e 'Running pip as' || true
python3 -m pip install -q --no-deps -e . 2>&1 | grep -v -e '^WARNING' -e 'Running pip as' || true
python3 -c 'import porter' || { echo "setup.sh: installing the porter package failed" >&2; exit 1; }
if command -v pyenv >/dev/null; then pyenv rehash; fi  # so the new `porter` command is on PATH at once

missing=()
command -v docker >/dev/null && command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v g++ >/dev/null || missing+=(g++)  # the twin compiles its kernels on the host when run without Docker
command -v git >/dev/null || missing+=(git)
command -v chromium >/dev/null || missing+=(chromium)  # loads report.html headless in tests/test_report_html.py
if ((${#missing[@]})); then
  log "apt-get install ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  log "starting dockerd (log: /tmp/porter-dockerd.log)"
  nohup dockerd >/tmp/porter-dockerd.log 2>&1 &
  for _ in $(seq 60); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
  if ! docker info >/dev/null 2>&1; then
    tail -n 40 /tmp/porter-dockerd.log >&2
    echo "setup.sh: dockerd did not answer within 60 s (see /tmp/porter-dockerd.log)" >&2
    exit 1
  fi
fi

log "base image"
sandboxes/base/build.sh
if ((build_twin)); then
  log "twin image"
  sandboxes/twin/build.sh
fi
log "ready"
