"""Measurements kept across runs, and one measurement at a time per node.

Covers the cache under `PORTER_CACHE` (default ~/.cache/porter): samples of a check keyed by everything
that decides its outcome (image digest, repo and model-overlay trees, serve flags, the check's own
definition with its workload, porter's version), appended as JSON lines, so a baseline measured by
one run is reused by the next; and the node's measurement lock (`flock` on a file in the cache dir),
which `porter run`, `porter bench` and `porter check` hold while they load a server, so two
measurements never share the devices. A second one waits and says whom it waits for. Does not
decide when a cached figure may stand in for a new one (evidence.py does).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from porter import __version__

LOCK_NAME = "measure.lock"


def cache_dir() -> Path:
    return Path(os.environ.get("PORTER_CACHE") or Path.home() / ".cache" / "porter").expanduser()


def cache_key(config: dict, check: str, definition: dict) -> str:
    """Same key, same measurement: configuration, check, its definition and the harness's version."""
    material = {"config": config, "check": check, "definition": definition, "porter": __version__}
    return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()[:24]


def _path(key: str) -> Path:
    return cache_dir() / "measurements" / f"{key}.jsonl"


def cached_samples(key: str) -> list[dict]:
    """Every sample stored under `key`, oldest first; a torn last line (killed writer) is skipped."""
    path = _path(key)
    if not path.exists():
        return []
    samples = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            samples.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return samples


def store_sample(key: str, sample: dict) -> None:
    path = _path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(sample, default=str) + "\n")


@contextlib.contextmanager
def measurement_lock(what: str, poll_s: float = 1.0) -> Iterator[None]:
    """Hold the node's measurement lock for the block; if another holds it, wait and say so once."""
    path = cache_dir() / LOCK_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+", encoding="utf-8") as lock:
        said = False
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not said:
                    lock.seek(0)
                    holder = lock.read().strip() or "another process"
                    print(f"porter: waiting for the measurement lock ({path}): held by {holder}", file=sys.stderr)
                    said = True
                time.sleep(poll_s)
        lock.seek(0)
        lock.truncate()
        lock.write(f"pid {os.getpid()} ({what})\n")
        lock.flush()
        try:
            yield
        finally:
            lock.seek(0)
            lock.truncate()
            lock.flush()
            fcntl.flock(lock, fcntl.LOCK_UN)
