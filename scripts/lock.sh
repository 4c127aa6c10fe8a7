#!/usr/bin/env bash
# Refresh requirements.lock, the pinned, hashed set of every Python dependency that setup.sh and CI install
# (the package's own, the test extra and the ray extra), resolved for Linux x86_64 / aarch64 on Python 3.11.
# Upgrade: edit the ranges in pyproject.toml if needed, run scripts/lock.sh, run `bash .ci/run`, commit both files.
#   --upgrade-package NAME   move just NAME (and what it needs) to its newest release
set -euo pipefail
cd "$(dirname "$0")/.."
command -v uv >/dev/null || python3 -m pip install -q uv
upgrade=("$@")
((${#upgrade[@]})) || upgrade=(--upgrade)  # no argument: every package to its newest release
uv pip compile pyproject.toml --extra test --extra ray --generate-hashes --universal --python-version 3.11 \
  --no-header --quiet "${upgrade[@]}" -o requirements.lock
echo "requirements.lock: $(grep -c '^[A-Za-z0-9]' requirements.lock) packages pinned"
