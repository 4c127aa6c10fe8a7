#!/usr/bin/env bash
# Start the twin's simulated device on this host, serving DIR/device.sock (bind-mount DIR into the sandbox
# at /run/twin-device). Runs until the process that started it exits.
#   sandboxes/twin/device.sh DIR [--scenario NAME]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dir="$1"
shift
exec env PYTHONPATH="$here/device" PYTHONDONTWRITEBYTECODE=1 python3 -m twin_device.server --dir "$dir" "$@"
