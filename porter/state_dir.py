"""Where porter keeps its own state on the host, and whether a sandbox mount would reach it: a leaf module.

porter's state folder (`PORTER_STATE`, default ~/.cache/porter) holds the measurement cache and the node's
measurement lock (porter/ledger/measure_cache.py); no sandbox may mount it, or a folder around or inside it
(porter/sandbox/docker_options.py refuses such a mount). The sandbox's own read-write cache is another
folder (`PORTER_SANDBOX_CACHE` in the real tasks), never read by porter.
"""

from __future__ import annotations

import os
from pathlib import Path

STATE_VARIABLE = "PORTER_STATE"  # porter's own state: this cache and the lock; never mounted into a sandbox
SANDBOX_CACHE_VARIABLE = "PORTER_SANDBOX_CACHE"  # the sandbox's read-write cache in the real tasks; never read here


def state_dir() -> Path:
    return Path(os.environ.get(STATE_VARIABLE) or Path.home() / ".cache" / "porter").expanduser()


def shares_state(host_path: str | Path) -> bool:
    """Whether a sandbox mount of `host_path` would reach porter's state folder (the same folder, one inside the
    other, either way; links resolved)."""
    state, mount = os.path.realpath(state_dir()), os.path.realpath(host_path)
    return state == mount or state.startswith(mount.rstrip("/") + "/") or mount.startswith(state + "/")
