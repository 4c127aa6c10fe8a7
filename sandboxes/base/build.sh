#!/usr/bin/env bash
# Build porter-base:bookworm, the local root of every porter image.
# No registry is reachable from porter's machines, so nothing is pulled: debootstrap lays down
# a minimal Debian bookworm (python3, git, patch, g++) and `docker import` turns it into an image.
# Idempotent: skips when the image exists; --force rebuilds.
set -euo pipefail

IMAGE="${PORTER_BASE_IMAGE:-porter-base:bookworm}"
SUITE=bookworm
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PACKAGES=python3,git,patch,g++,ca-certificates,procps,iproute2

force=0
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    -h|--help) echo "usage: $0 [--force]"; exit 0 ;;
    *) echo "build.sh: unknown argument: $arg (expected --force)" >&2; exit 2 ;;
  esac
done

if [[ $force -eq 0 ]] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "build.sh: $IMAGE exists (use --force to rebuild)"
  exit 0
fi
command -v debootstrap >/dev/null || { echo "build.sh: debootstrap is not installed (apt-get install debootstrap)" >&2; exit 1; }

rootfs="$(mktemp -d /tmp/porter-base.XXXXXX)"
trap 'rm -rf "$rootfs"' EXIT
start=$SECONDS
echo "build.sh: debootstrap $SUITE (minbase + $PACKAGES) into $rootfs"
if ! debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$rootfs" "$MIRROR" >"$rootfs.log" 2>&1; then
  tail -n 30 "$rootfs.log" >&2
  echo "build.sh: debootstrap failed (full log: $rootfs.log)" >&2
  exit 1
fi
# Keep the image small: package caches and docs are not needed to run the twin.
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/doc/* \
       "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/*
echo "build.sh: debootstrap took $((SECONDS - start)) s; importing as $IMAGE"
tar -C "$rootfs" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["/bin/bash"]' - "$IMAGE" >/dev/null
rm -f "$rootfs.log"
echo "build.sh: built $IMAGE in $((SECONDS - start)) s"
