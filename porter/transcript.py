"""The run's append-only record: one JSON object per line, flushed as it happens.

Covers writing records (with secrets redacted before they touch the disk), reading them back for
replay and resume (a last line cut short by a crash is dropped, not fatal), and the run's small
`state.json`. Does not decide what is recorded: the loop and the tools do.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

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
    """All complete records; a torn last line (killed mid-write) is ignored, a torn middle line is an error."""
    return list(iter_records(path))


def iter_records(path: Path) -> Iterator[dict]:
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            yield json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines):
                return
            raise ValueError(f"{path}:{number}: not a JSON record ({exc.msg})") from None


def write_state(run_dir: Path, state: dict, redact: Callable[[str], str]) -> None:
    """Replace state.json atomically so a kill never leaves half a state behind."""
    target = run_dir / "state.json"
    scratch = run_dir / "state.json.tmp"
    scratch.write_text(redact(json.dumps(state, indent=1, default=str)), encoding="utf-8")
    os.replace(scratch, target)


def read_state(run_dir: Path) -> dict:
    path = run_dir / "state.json"
    if not path.exists():
        raise FileNotFoundError(f"{run_dir} has no state.json: it is not a porter run directory (or never started)")
    return json.loads(path.read_text(encoding="utf-8"))
