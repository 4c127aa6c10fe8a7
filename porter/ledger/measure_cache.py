"""Measurements kept across runs, and one measurement at a time per node: porter's own state on the host.

Covers, in porter's state folder (porter/state_dir.py, which no sandbox may mount), the cache: samples of a check
keyed by everything that decides its outcome (image digest, repo and model-overlay trees, serve flags, the check's
own definition with its workload, porter's version), appended as JSON records and validated when read back (a
record that is not porter's, for another key, over a size cap or with a non-finite number is skipped and counted),
so a baseline measured by one run is reused by the next; and the node's measurement lock (`flock` on a file there),
which `porter run`, `porter bench` and `porter check` hold while they load a server, so two measurements never
share the devices. A second one waits, says whom it waits for (the holder's own words, made printable), and gives
up after a bounded wait naming the holder. Does not decide when a cached figure may stand in for a new one
(ledger/evidence.py does).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from porter import __version__
from porter.state_dir import state_dir
from porter.terminal import printable

LOCK_NAME = "measure.lock"
RECORDS_DIR = "samples"  # one file of records per key
MAX_RECORD_BYTES = 1 << 20  # one sample (a sweep's levels, a quality result) is a few kB
MAX_RECORDS_FILE_BYTES = 64 << 20  # a key gains one record per run that measures it
# A measurement of a real task (a sweep of 300 s levels, GSM8K's 1319 questions) takes up to an hour or two; a lock
# held longer than this is not a measurement.
MAX_LOCK_WAIT_S = 4 * 3600.0
MAX_HOLDER_CHARS = 300


class LockTimeout(TimeoutError):
    """The measurement lock stayed held past the wait; the message names the holder."""


def cache_key(config: dict, check: str, definition: dict) -> str:
    """Same key, same measurement: configuration, check, its definition and the harness's version."""
    material = {"config": config, "check": check, "definition": definition, "porter": __version__}
    return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()[:24]


def _path(key: str) -> Path:
    return state_dir() / RECORDS_DIR / f"{key}.jsonl"


def cached_samples(key: str) -> list[dict]:
    """Every valid sample stored under `key`, oldest first. A torn last line (a killed writer) and any record
    that is not porter's (see `_sample_of`) are skipped; skipped records are counted on stderr."""
    path = _path(key)
    try:
        with open(path, "rb") as records:
            data = records.read(MAX_RECORDS_FILE_BYTES + 1)
    except FileNotFoundError:
        return []
    lines = data[:MAX_RECORDS_FILE_BYTES].splitlines()
    samples = [_sample_of(line, key) for line in lines]
    torn = 0 if data.endswith(b"\n") or not lines else 1  # a killed writer's last line, not a foreign record
    skipped = samples[: len(samples) - torn].count(None)
    if skipped or len(data) > MAX_RECORDS_FILE_BYTES:
        cut = f"; only its first {MAX_RECORDS_FILE_BYTES >> 20} MiB read" if len(data) > MAX_RECORDS_FILE_BYTES else ""
        print(f"porter: {skipped} records of {path} skipped: not valid samples of this key{cut}", file=sys.stderr)
    return [sample for sample in samples if sample is not None]


def _sample_of(line: bytes, key: str) -> dict | None:
    """The sample of one record line, or None: over MAX_RECORD_BYTES, not JSON, a non-finite number, not a
    {"key", "sample"} object, or another key's record."""
    if len(line) > MAX_RECORD_BYTES:
        return None
    try:
        record = json.loads(line, parse_constant=_refuse_constant, parse_float=_finite_float)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(record, dict) or set(record) != {"key", "sample"} or record["key"] != key:
        return None
    sample = record["sample"]
    return sample if isinstance(sample, dict) else None


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a measurement")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is not a finite number")
    return value


def store_sample(key: str, sample: dict) -> None:
    path = _path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps({"key": key, "sample": sample}, default=str) + "\n")


@contextlib.contextmanager
def measurement_lock(
    what: str, poll_s: float = 1.0, wait_s: float = MAX_LOCK_WAIT_S, on_wait: Callable[[str], None] | None = None
) -> Iterator[None]:
    """Hold the node's measurement lock for the block; if another holds it, say so once (and tell `on_wait` who
    holds it) and wait, at most `wait_s` (then LockTimeout, naming the holder)."""
    path = state_dir() / LOCK_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(descriptor, "r+", encoding="utf-8", errors="replace") as lock:
        _acquire(lock, path, poll_s, wait_s, on_wait)
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


def _acquire(lock, path: Path, poll_s: float, wait_s: float, on_wait: Callable[[str], None] | None) -> None:
    deadline, said = time.monotonic() + wait_s, False
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            holder = _holder(lock)
            if time.monotonic() >= deadline:
                raise LockTimeout(
                    f"the measurement lock {path} is still held by {holder} after {wait_s:g} s; nothing was "
                    "measured. If that process is stuck, stop it (the lock is released when it exits)"
                ) from None
            if not said:
                print(f"porter: waiting for the measurement lock ({path}): held by {holder}", file=sys.stderr)
                said = True
                if on_wait:
                    on_wait(holder)
            time.sleep(poll_s)


def _holder(lock) -> str:
    """What the holder wrote about itself, one printable line (the file is porter's, but a person reads it)."""
    lock.seek(0)
    text = printable(lock.read(MAX_HOLDER_CHARS)).strip().replace("\n", " ")
    return text or "another process"
