"""The run's append-only record: one JSON object per line, flushed as it happens.

Covers writing records (with secrets redacted before they touch the disk), reading them and any
other JSONL file of a run (metrics.jsonl) back for replay, resume and reports (a last line cut short by
a kill is dropped with a warning; a broken line in the middle is an error naming it), and the run's
small `state.json` (a torn or foreign one is an error naming the file). Every reading error is a
RunDirError: one line for the CLI. Does not decide what is recorded: the loop and the tools do.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from porter.errors import RunDirError

logger = logging.getLogger(__name__)
MAX_TRANSCRIPT_BYTES = 256 << 20  # a run's transcript keeps digests of requests: a few MiB at most
MAX_STATE_BYTES = 256 << 20  # a state.json holds the conversation: megabytes, not gigabytes

KINDS = (
    "run_start",
    "model_request",
    "model_reply",
    "tool_call",
    "tool_result",
    "check",
    "accept",
    "revert",
    "note",
    "run_end",
)


class Transcript:
    """Append-only JSONL writer; each record gets `seq` and `t` (UTC epoch seconds)."""

    def __init__(self, path: Path, redact: Callable[[str], str]):
        self.path = path
        self._redact = redact
        self.path.parent.mkdir(parents=True, exist_ok=True)
        existing = read_transcript(path) if path.exists() else []
        self.seq = existing[-1]["seq"] if existing else 0
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for the run's life

    def record(self, kind: str, **fields: Any) -> dict:
        if kind not in KINDS:
            raise ValueError(f"unknown transcript kind {kind!r}; expected one of {KINDS}")
        self.seq += 1
        record = {"seq": self.seq, "t": round(time.time(), 3), "kind": kind, **fields}
        line = self._redact(json.dumps(record, ensure_ascii=False, default=str))
        self._file.write(line + "\n")
        self._file.flush()
        # A run can be SIGKILLed at any moment; fsync makes "recorded" mean "on disk".
        os.fsync(self._file.fileno())
        return record

    def close(self) -> None:
        self._file.close()


def read_transcript(path: Path) -> list[dict]:
    """All complete records; a torn last line (killed mid-write) is skipped with a warning, a torn middle line
    is an error."""
    return list(iter_records(path))


def iter_records(path: Path) -> Iterator[dict]:
    """The JSON objects of a JSONL file, one per line, as `read_transcript` describes."""
    try:
        if Path(path).stat().st_size > MAX_TRANSCRIPT_BYTES:  # a recording from elsewhere is read into memory
            raise RunDirError(f"{path}: larger than {MAX_TRANSCRIPT_BYTES >> 20} MiB, not a transcript porter wrote")
        lines = Path(path).read_bytes().split(b"\n")
    except OSError as exc:
        raise RunDirError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    while lines and not lines[-1].strip():
        lines.pop()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:  # JSONDecodeError, and bytes that are not UTF-8
            if number == len(lines):
                logger.warning("%s:%d: skipped a torn last line (a kill mid-write?)", path, number)
                return
            raise RunDirError(f"{path}:{number}: not a JSON record ({getattr(exc, 'msg', exc)})") from None
        if not isinstance(record, dict):
            raise RunDirError(f"{path}:{number}: a record is a JSON object, this is a {type(record).__name__}")
        yield record


def write_state(run_dir: Path, state: dict, redact: Callable[[str], str]) -> None:
    """Replace state.json atomically so a kill never leaves half a state behind."""
    target = run_dir / "state.json"
    scratch = run_dir / "state.json.tmp"
    scratch.write_text(redact(json.dumps(state, indent=1, default=str)), encoding="utf-8")
    os.replace(scratch, target)


def read_state(run_dir: Path) -> dict:
    """state.json as a dict; a missing, torn, oversized or foreign one is a RunDirError naming it."""
    path = Path(run_dir) / "state.json"
    if not path.is_file():
        raise RunDirError(f"{run_dir} has no state.json: it is not a porter run directory (or never started)")
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_STATE_BYTES + 1)
    except OSError as exc:
        raise RunDirError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    if len(raw) > MAX_STATE_BYTES:
        raise RunDirError(f"{path}: larger than {MAX_STATE_BYTES} bytes; not a state porter wrote")
    try:
        state = json.loads(raw)
    except ValueError as exc:
        raise RunDirError(f"{path}: not valid JSON ({getattr(exc, 'msg', exc)}); torn, or not porter's") from None
    if not isinstance(state, dict) or not isinstance(state.get("run_id"), str):
        raise RunDirError(f"{path}: not a porter run state (no run_id)")
    return state
