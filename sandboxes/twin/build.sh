#!/usr/bin/env bash
# Build the twin serving image from porter-base:bookworm, or lay the same tree out without Docker.
#   sandboxes/twin/build.sh [--scenario NAME] [--front sglang|vllm] [--force]
#       -> image porter-twin2:NAME (sglang's front, default scenario glm52-day0) or porter-twin2:NAME-vllm
#          (the name before the colon is $PORTER_TWIN_TAG when set: worktrees sharing a Docker daemon keep their
#          images apart; the twin tasks name their image the same way)
#   sandboxes/twin/build.sh --local DIR [--scenario NAME] [--front sglang|vllm]
#       -> DIR/sgl-workspace/twin (or DIR/usr/local/lib/python3.12/dist-packages/vllm), DIR/models/..., DIR/opt/rocm
# An image whose label twin.hash matches the sources is reused unless --force is given.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
scenario=glm52-day0
front=sglang
force=0
local_dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --scenario) scenario="$2"; shift 2 ;;
    --front) front="$2"; shift 2 ;;
    --force) force=1; shift ;;
    --local) local_dir="$2"; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "build.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ -n "$local_dir" ]; then
  python3 "$here/layout.py" "$local_dir" --scenario "$scenario" --front "$front"
  exit 0
fi
image="${PORTER_TWIN_TAG:-porter-twin2}:$scenario"
[ "$front" = sglang ] || image="$image-$front"
# One build of a tag at a time on this host: two runs (or test workers) starting together would otherwise both
# build, and the tag would move under the first one's run (its image digest, part of every fingerprint, changes).
exec 9>"${TMPDIR:-/tmp}/${PORTER_TWIN_TAG:-porter-twin2}-$scenario-$front.build.lock"
flock 9
hash="$(python3 "$here/layout.py" --hash --scenario "$scenario" --front "$front")"
if [ "$force" = 0 ] && [ "$(docker image inspect -f '{{index .Config.Labels "twin.hash"}}' "$image" 2>/dev/null || true)" = "$hash" ]; then
  echo "$image is up to date (twin.hash=$hash)"
  exit 0
fi
staging="$(mktemp -d)"
trap 'rm -rf "$staging"' EXIT
python3 "$here/layout.py" "$staging/root" --scenario "$scenario" --front "$front" >/dev/null
cp "$here/Dockerfile" "$staging/Dockerfile"
workdir="$(python3 "$here/layout.py" --workdir --front "$front")"
docker build -q --build-arg "WORKDIR=$workdir" --label "twin.hash=$hash" --label "twin.scenario=$scenario" \
  --label "twin.front=$front" -t "$image" "$staging" >/dev/null
echo "built $image (twin.hash=$hash)"
