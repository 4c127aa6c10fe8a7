"""How far a start-up got before it failed, by the engine's own stage lines, and which lines a change forges.

Covers one measure: which of the engine's declared start-up stages (porter/engines/<engine>.py `stages`:
process group, weights loaded, memory pool, graphs captured, serving) its log printed before the first
traceback or the crash's key line; a later stage is progress. A print the agent adds is no stage unless it
spells the engine's own line, and a change whose added lines spell one is caught by `forged_stages`. The
log is read bounded (a crash log can be gigabytes). Does not classify the failure (triage does) nor decide
what is progress (ledger/decision.py).
"""

from __future__ import annotations

import re
from pathlib import Path

from porter.engines.engine import Engine

MAX_LINES = 200_000  # stage lines come in the first minutes of a log; a flood after them is not read
MAX_LINE_CHARS = 4_096


def startup_stage(log_path: str | Path, engine: Engine, stop_line_no: int | None = None) -> tuple[int, list[str]]:
    """(stage reached, the stages seen) in the lines before the first traceback (or line `stop_line_no`)."""
    lines = []
    with open(log_path, encoding="utf-8", errors="replace") as log:
        for number, line in enumerate(log, start=1):
            if number > MAX_LINES or (stop_line_no and number >= stop_line_no) or line.lstrip().startswith("Traceback"):
                break
            lines.append(line[:MAX_LINE_CHARS])
    return engine.stage_reached(lines)


def forged_stages(engine: Engine, diff: str) -> list[str]:
    """The engine's stage lines that a change's added lines spell: printed by the change, not reached."""
    added = [line[1:] for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    return [stage for stage, pattern in engine.stages if any(re.search(pattern, line) for line in added)]
