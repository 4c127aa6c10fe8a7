#!/usr/bin/env bash
# Build the twin serving image porter-twin2:<scenario> from porter-base:bookworm, or lay the same tree
# out without Docker.
#   sandboxes/twin/build.sh [--scenario NAME] [--force]     -> image porter-twin2:NAME (default glm52-day0)
#   sandboxes/twin/build.sh --local DIR [--scenario NAME]    -> DIR/sgl-workspace/twin, DIR/models/..., DIR/opt/rocm
# An image whose label twin.hash matches the sources is reused unless --force is given.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
scenario=glm52-day0
force=0
local_dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --scenario) scenario="$2"; shift 2 ;;
    --force) force=1; shift ;;
    --local) local_dir="$2"; shift 2 ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "build.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ -n "$local_dir" ]; then
  python3 "$here/layout.py" "$local_dir" --scenario "$scenario"
  exit 0
fi
image="porter-twin2:$scenario"
# One build of a tag at a time on this host: two runs (or test workers) starting together would otherwise both
# build, and the tag would move under the first one's run (its image digest, part of every fingerprint, changes).
exec 9>"${TMPDIR:-/tmp}/porter-twin2-$scenario.build.lock"
flock 9
hash="$(python3 "$here/layout.py" --hash --scenario "$scenario")"
if [ "$force" = 0 ] && [ "$(docker image inspect -f '{{index .Config.Labels "twin.hash"}}' "$image" 2>/dev/null || true)" = "$hash" ]; then
  echo "$image is up to date (twin.hash=$hash)"
  exit 0
fi
staging="$(mktemp -d)"
trap 'rm -rf "$staging"' EXIT
python3 "$here/layout.py" "$staging/root" --scenario "$scenario" >/dev/null
cp "$here/Dockerfile" "$staging/Dockerfile"
docker build -q --label "twin.hash=$hash" --label "twin.scenario=$scenario" -t "$image" "$staging" >/dev/null
echo "built $image (twin.hash=$hash)"
