"""Where a run's minutes went, from its transcript: start-ups, sweeps, single stream, quality, tuning, the rest.

Each transcript record carries its wall time; the time since the record before it is charged to what the record
closes: a `check` record to its check (quality:*, single_stream, throughput: each sample, whichever tool ran it,
accept's top-ups and re-measures included), a serve result or a "served with ..." note to start-ups (a reduced
serve's to reduced start-ups), a tune result to tuning, anything else to the rest (the agent, git, edits). Also counts
full and reduced launches apart (server logs: serve-NNN.log, serve-NNN-reduced.log), steps, kept and reverted
changes, and full launches per kept change. Figures are the twin's on this machine, never hardware claims.
Usage: python3 benchmarks/run_minutes.py RUN_DIR [RUN_DIR ...]; the last line is one JSON object per run.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path


def charge(record: dict) -> str:
    """What the time before `record` was spent on."""
    kind, name = record.get("kind"), record.get("name") or ""
    if kind == "check":
        return "quality" if name.startswith("quality:") else name
    if kind == "tool_result" and name == "serve" and (record.get("facts") or {}).get("reduced"):
        return "reduced start-ups"
    if (kind == "tool_result" and name == "serve") or (kind == "note" and "served" in str(record.get("text"))):
        return "start-ups"
    return "tuning" if kind == "tool_result" and name == "tune" else "rest"


def minutes(run_dir: Path) -> dict:
    records = [json.loads(line) for line in (run_dir / "transcript.jsonl").read_text().splitlines() if line.strip()]
    spent: Counter = Counter()
    for before, record in zip(records, records[1:], strict=False):
        spent[charge(record)] += record["t"] - before["t"]
    kinds = Counter(record["kind"] for record in records)
    reduced = len(list((run_dir / "logs").glob("serve-*-reduced.log")))
    launches = len(list((run_dir / "logs").glob("serve-*.log"))) - reduced  # full start-ups
    return {
        "run": run_dir.name,
        "wall_s": round(records[-1]["t"] - records[0]["t"], 1),
        "seconds": {what: round(seconds, 1) for what, seconds in spent.most_common()},
        "steps": kinds["tool_call"],
        "launches": launches,
        "reduced_launches": reduced,
        "kept": kinds["accept"],
        "reverted": kinds["revert"],
        "launches_per_kept": round(launches / kinds["accept"], 2) if kinds["accept"] else None,
    }


def main() -> None:
    for folder in sys.argv[1:]:
        figures = minutes(Path(folder))
        shown = ", ".join(f"{what} {seconds / 60:.1f} min" for what, seconds in figures["seconds"].items())
        print(
            f"{figures['run']}: {figures['wall_s'] / 60:.1f} min ({shown}); {figures['steps']} steps, "
            f"{figures['launches']} launches (and {figures['reduced_launches']} reduced), {figures['kept']} kept, "
            f"{figures['reverted']} reverted"
        )
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
