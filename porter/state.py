"""What a run knows between steps, and the task's targets read against it.

Covers the run state saved to `state.json` after every step (flags, accepted commits, the metrics of the
accepted configuration, the evidence gathered for the pending change, spend) and the comparisons the
accept rules need. Does not run anything: tools.py fills it, agent.py loops over it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from porter.repos import RepoState
from porter.task import FlagValue, Task
from porter.transcript import RunDirError, read_state

# A throughput or speed figure must move by more than this to count as a real change (run-to-run noise).
IMPROVEMENT_MARGIN = 0.03
PERF_METRICS = {"throughput": "total_tok_s_per_node", "single_stream": "output_tok_s"}


@dataclass
class Evidence:
    """What was observed for one configuration: the last start-up and the last result of each check."""

    serve: dict | None = None  # {"healthy", "crash_class", "signature", "seconds", "log"}
    first_crash: str | None = None  # the first crash class seen since the last accept or revert
    first_crash_serve: dict | None = None  # its serve record (key line, log) for commit messages and PRs
    checks: dict[str, dict] = field(default_factory=dict)  # "throughput" | "single_stream" | "quality:<name>"


@dataclass
class RunState:
    run_id: str
    task_path: str
    flags: dict[str, FlagValue]
    accepted_flags: dict[str, FlagValue]
    repos: dict[str, RepoState] = field(default_factory=dict)
    accepted: Evidence = field(default_factory=Evidence)
    pending: Evidence = field(default_factory=Evidence)
    attempts: list[dict] = field(default_factory=list)
    step: int = 0
    relaunches: int = 0
    cost_usd: float = 0.0
    cost_known: bool = True
    tokens: dict[str, int] = field(default_factory=lambda: {"input": 0, "output": 0, "cache_read": 0, "cache_write": 0})
    wall_s: float = 0.0  # wall time of earlier sessions of this run (resume adds to it)
    server_process: dict | None = None  # Process.record() of the running server: what resume must kill
    messages: list[dict] = field(default_factory=list)
    finished: str | None = None
    solved: bool = False

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> RunState:
        data = dict(data)
        data["repos"] = {name: RepoState(**repo) for name, repo in data.get("repos", {}).items()}
        data["accepted"] = Evidence(**data.get("accepted", {}))
        data["pending"] = Evidence(**data.get("pending", {}))
        return cls(**data)

    @classmethod
    def read(cls, run_dir) -> RunState:
        """The state of a run directory; a broken or foreign state.json is a RunDirError naming it."""
        data = read_state(run_dir)
        try:
            return cls.from_dict(data)
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise RunDirError(f"{run_dir}/state.json does not match this porter's run state: {exc}") from None

    def phase(self) -> str:
        if not (self.accepted.serve or {}).get("healthy"):
            return "bring-up"
        if not self.accepted.checks:
            return "baseline"
        return "optimisation"


def target_report(task: Task, checks: dict[str, dict]) -> list[dict[str, Any]]:
    """One row per target of the task: name, measured value (or None), target, met."""
    rows = []
    spec = task.checks
    if spec.throughput:
        value = (checks.get("throughput") or {}).get("total_tok_s_per_node")
        target = spec.throughput.target_total_tok_s_per_node
        rows.append(_row("throughput (total tok/s/node at knee)", value, target, value is not None and value >= target))
    if spec.single_stream:
        value = (checks.get("single_stream") or {}).get("output_tok_s")
        target = spec.single_stream.target_output_tok_s
        rows.append(_row("single stream (output tok/s)", value, target, value is not None and value >= target))
    for quality in spec.quality:
        result = checks.get(f"quality:{quality.name}") or {}
        bar = quality.minimum if quality.minimum is not None else f"{quality.reference} - {quality.tolerance}"
        rows.append(_row(f"quality {quality.name}", result.get("score"), bar, bool(result.get("passed"))))
    return rows


def _row(name: str, value: Any, target: Any, met: bool) -> dict[str, Any]:
    return {"target": name, "value": value, "goal": target, "met": met}


def all_targets_met(task: Task, checks: dict[str, dict]) -> bool:
    rows = target_report(task, checks)
    return bool(rows) and all(row["met"] for row in rows)


def improvement(kind: str, before: dict | None, after: dict | None) -> float | None:
    """Relative change of a perf check's headline figure; None when either side is missing."""
    metric = PERF_METRICS[kind]
    if not before or not after or before.get(metric) in (None, 0) or after.get(metric) is None:
        return None
    return after[metric] / before[metric] - 1.0
