#!/usr/bin/env bash
# Set a fresh machine up for porter: the apt packages it needs, the virtual environment .venv with porter in it, the
# Docker engine, the local images. Used by the README's main command and by .ci/run. Safe to rerun: every step skips
# what is done (pip checks the installed set against the lock).
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

missing=()
command -v docker >/dev/null && command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v g++ >/dev/null || missing+=(g++)  # the twin compiles its kernels on the host when run without Docker
command -v git >/dev/null || missing+=(git)
command -v chromium >/dev/null || missing+=(chromium)  # loads report.html headless in tests/test_report_html.py
python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)  # Debian ships venv's pip apart
if ((${#missing[@]})); then
  log "apt-get install ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

log "python virtual environment .venv (requirements.lock)"
# porter and its dependencies live in .venv, never in the system Python, whose own packages' pins would make pip's
# resolver complain. The lock pins every dependency with hashes (scripts/lock.sh refreshes it); the package goes on
# top, editable, without letting pip resolve anything again.
if ! .venv/bin/python -c '' 2>/dev/null; then
  python3 -m venv --clear .venv
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
.venv/bin/python -m pip install -qq --require-hashes -r requirements.lock  # -qq: errors only, never a host's pip-config noise
.venv/bin/python -m pip install -qq --no-deps -e .
.venv/bin/porter --version >/dev/null || { echo "setup.sh: porter does not run from .venv" >&2; exit 1; }

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
log "ready: \`. .venv/bin/activate\` puts porter on this shell's PATH (or run .venv/bin/porter)"
