"""How far a start-up got before it failed: a stage number read from the server's log.

Covers one engine-agnostic measure: the count of distinct progress lines (plain log lines, numbers
folded, not warnings, errors, tracebacks or the arguments dump) the server wrote before the first
traceback or the crash's key line. A loader that now gets past weight loading and dies compiling a
kernel has a later stage than one that died loading; a syntax error dies at import, stage 0.
Does not classify the failure (triage does) nor decide what is progress (ledger/decision.py).
"""

from __future__ import annotations

import re
from pathlib import Path

_NOT_PROGRESS = re.compile(r"traceback|error|exception|warn|server_args|^\s|^\s*file \"|^\s*$", re.IGNORECASE)
_NUMBERS = re.compile(r"\d+(\.\d+)?")
_STAMP = re.compile(r"^\[[^\]]*\]\s*")  # "[2026-07-02 10:00:01 TP0]" prefixes


def startup_stage(log_path: str | Path, stop_line_no: int | None = None) -> int:
    """Distinct progress lines before the first traceback (or line `stop_line_no`, 1-based)."""
    seen: set[str] = set()
    with open(log_path, encoding="utf-8", errors="replace") as log:
        for number, line in enumerate(log, start=1):
            if (stop_line_no and number >= stop_line_no) or line.lstrip().startswith("Traceback"):
                break
            text = _STAMP.sub("", line.rstrip("\n"))
            if not _NOT_PROGRESS.search(text):
                seen.add(_NUMBERS.sub("#", text))
    return len(seen)
