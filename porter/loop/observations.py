"""What the model reads after a measuring call: each check result as its kind renders it, and the run's status.

A check result reads as its kind declares (porter/checks/*_kind.py: a sweep as a table of levels, single stream
and quality as one line each), with a note on repeated samples for a speed figure; the run's targets one line
each with a stale mark; the pending change and the server. A block or note the model was told already and that
reads the same is not repeated (`once`, over RunContext.said): the targets block, the samples note, a kind's
notes in parentheses. The facts themselves travel beside this text for programs. Does not measure (checks/) and
does not decide (ledger/decision.py).
"""

from __future__ import annotations

import json
import re

from porter.checks import registry
from porter.checks.render import number, target_value
from porter.ledger.state import TargetRow

NOTE = re.compile(r"\s+\(.*\)")
REPEATED_SAMPLES = (
    ": porter measures a configuration more than once, so that a keep decision compares repeated figures (the "
    "figures above are the latest sample)"
)
# Said first when the accepted configuration itself fails quality: tuning speed on wrong answers is wasted.
QUALITY_FAILS_FIRST = (
    "Quality fails on the accepted configuration ({checks}): look for a numerical defect first (a weight loaded "
    "into the wrong slot, a kernel or dtype path that differs on ROCm, a checkpoint config field) before tuning "
    "speed. A change that makes it pass beyond its interval is kept on that alone (rule quality_restored)."
)


def check(key: str, result: dict, said: dict[str, str]) -> str:
    """A check result as its kind renders it, with what its repeated samples mean for a speed figure (why, once)."""
    kind = registry.kind_of(key)
    # a note a kind renders in parentheses on its own line, told once: the model has it from the first result
    rows = [row for row in kind.render(key, result).splitlines() if not NOTE.fullmatch(row) or once(said, row, row)]
    text = "\n".join(rows)
    samples = result.get("samples") or 0
    if kind.performance and samples > 1:
        text += f"\n  {samples} samples of this check on this configuration, median {number(result.get('median'))}"
        text += once(said, "samples", REPEATED_SAMPLES)
    return text


def once(said: dict[str, str], key: str, text: str, otherwise: str = "") -> str:
    """`text` the first time and whenever it differs from what was last said under `key`; `otherwise` when the
    model was told the same already (a block repeated in every result is what makes requests grow)."""
    if said.get(key) == text:
        return otherwise
    said[key] = text
    return text


def targets(rows: list[TargetRow]) -> str:
    """The run's targets, one line each: value, goal, met, a stale mark when measured on another config, and the
    pending change's own figure once it has one (what accept would weigh)."""
    lines = []
    for row in rows:
        stale = " (stale: measured on another configuration; measure again)" if row.stale else ""
        met = "met" if row.met else "not met"
        line = f"- {row.target}: {target_value(row.value)} (goal {row.goal}): {met}{stale}"
        pending, would_meet = row.pending or (None, None)
        if pending is not None:
            would = "would meet" if would_meet else "would not meet"
            line += f"; the pending change: {target_value(pending)}, {would} the goal"
        lines.append(line)
    return "\n".join(lines)


def status(run_status: dict, said: dict[str, str]) -> str:
    """The run's status after a measuring call: targets of the accepted configuration when they read otherwise than
    last time, the pending change and the server."""
    pending = run_status.get("pending")
    changed = run_status.get("flags_changed") or {}
    pending_text = "none" if not pending else f"yes (flags changed: {json.dumps(changed)})" if changed else "yes"
    block = f"Targets of the accepted configuration:\n{targets(run_status.get('targets') or [])}\n"
    unchanged = "Targets of the accepted configuration: as last shown.\n"
    return (
        f"{once(said, 'targets', block, unchanged)}Pending change: {pending_text}. Server: {run_status.get('server')}."
    )
