"""The records a run keeps, typed: a configuration, a start-up, a sample, an attempt, a decision.

Each is a dataclass that the run's code reads by attribute; each turns into plain JSON once, at the edge
of the state file (`to_dict`), and back (`from_dict`, which ignores fields a later porter added, so an
older state.json still loads). A sample's `result` is the check's own result document, in
bench_serving's names (what metrics.jsonl, the cache and `porter bench` write); only its check kind
reads inside it (porter.checks.registry). Computes nothing but fingerprints and small predicates.

Every record porter reads back from JSON (these, a transcript's messages, a check's result document) is read by
`read_record`, with one rule for nulls: a null means "not set", so a key that is null or left out takes the field's
default. A field without a default must be there (a TypeError otherwise, which each reader turns into its own error).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Self, TypeVar

from porter.ledger.noise import Comparison
from porter.schema import FlagValue

R = TypeVar("R")


def read_record(record: type[R], data: dict, **readers: Callable[[Any], Any]) -> R:
    """A dataclass from its JSON document: each field the document sets, through its reader in `readers` where it
    has one (a nested record, a list of them); a field left out or null takes its default, and a key the record
    does not know (a later porter's) is ignored, so an older or newer document still reads."""
    held = {item.name: data[item.name] for item in fields(record) if data.get(item.name) is not None}
    return record(**{name: readers[name](value) if name in readers else value for name, value in held.items()})


class Record:
    """A dataclass kept as JSON: its fields as they are (`to_dict`), and back by them (`from_dict`, read_record)."""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Self:
        return read_record(cls, data)


@dataclass(frozen=True)
class Configuration(Record):
    """What a server or a check ran on: the content tree of every repo, the serve flags, the image."""

    repos: dict[str, str] = field(default_factory=dict)
    flags: dict[str, FlagValue] = field(default_factory=dict)
    image: str = ""

    @property
    def fingerprint(self) -> str:
        """A result measured on another fingerprint is not evidence for this configuration."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True, default=str).encode()).hexdigest()[:16]

    def to_dict(self) -> dict:
        return {
            "repos": dict(sorted(self.repos.items())),
            "flags": dict(sorted(self.flags.items())),
            "image": self.image,
        }


@dataclass
class StartUp(Record):
    """One launch of the serve command: healthy, or the crash as triage read it and how far it got."""

    healthy: bool
    seconds: float
    log: str  # the server log, relative to the run directory
    fingerprint: str | None = None  # the configuration it ran
    crash_class: str | None = None
    signature: str | None = None
    key_line: str | None = None
    stage: int | None = None  # how far start-up got by the engine's own stage markers (None: healthy)
    stages: list[str] = field(default_factory=list)  # those markers, in the order the log printed them
    findings: list[dict] = field(default_factory=list)  # triage's findings (category, key line, facts)

    def outcome(self) -> str:
        return "healthy" if self.healthy else f"{self.crash_class} at stage {self.stage}"


@dataclass
class Side(Record):
    """The start-ups seen for one side of a decision (the accepted configuration, or the pending change)."""

    serve: StartUp | None = None  # its latest start-up
    first_crash: StartUp | None = None  # its first crash since the last accept or revert (pending side)
    # (pending side) what the agent said of each repo's edit at an accept refused for a crash, [summary, why]:
    # that repo's commit subject and reason when it is kept later under another accept's summary
    said: dict[str, list[str]] = field(default_factory=dict)

    @property
    def crash_class(self) -> str | None:
        """The crash of its latest start-up (None when it started, or never ran)."""
        return None if self.serve is None or self.serve.healthy else self.serve.crash_class

    @classmethod
    def from_dict(cls, data: dict | None) -> Side:
        data = data or {}
        first = data.get("first_crash")
        if not isinstance(first, dict):  # a state.json of porter before records: the class, its record beside it
            first = data.get("first_crash_serve")
        said = data.get("said") if isinstance(data.get("said"), dict) else {}
        said = {str(k): [str(x) for x in v] for k, v in said.items() if isinstance(v, list) and len(v) == 2}
        return cls(_start_up(data.get("serve")), _start_up(first), said)


def _start_up(data: dict | None) -> StartUp | None:
    return StartUp.from_dict(data) if data else None


@dataclass
class SetAside(Record):
    """While an earlier configuration runs in place (RunContext.in_place): the flags to put back, and whether each
    repo that moved had a pending edit (its stash to restore)."""

    flags: dict[str, FlagValue] = field(default_factory=dict)
    dirty: dict[str, bool] = field(default_factory=dict)


@dataclass
class Reference(Record):
    """A relative quality bar's reference: the score it was anchored at, and the configuration that scored it."""

    value: float
    config: str | None = None


@dataclass
class Sample(Record):
    """One check result, kept as evidence of the configuration it was measured on; never overwritten."""

    key: str  # "throughput", "single_stream", "quality:<name>"
    config: str  # the configuration's fingerprint
    harness: str  # the check as defined and porter's version: samples compare only within one harness
    step: int
    value: float | None = None  # the kind's headline figure (None: the check produced none)
    result: dict = field(default_factory=dict)  # the check's result document (bench_serving names), read by its kind
    cached: bool = False  # reused from an earlier run's measurement of the same configuration


@dataclass
class Tokens(Record):
    """A run's model tokens so far, as they are billed: full-rate input, output, cache reads and cache writes."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0


@dataclass
class Decision:
    """What porter decided about a pending change, which rule decided it, and by how much."""

    keep: bool
    rule: str  # one of RULES
    reason: str  # the evidence in words: what was compared, the margin, the bar
    flags_too: bool = True  # a kept source fix may leave its flags pending
    comparisons: list[Comparison] = field(default_factory=list)  # each compared figure


# The rules a decision can name (the tool result and the transcript say which one decided, and its margin).
RULES = {
    "crash_gone": "the accepted configuration crashed and the change starts healthy",
    "crash_fix": "with the pending flags the accepted tree crashed, and the source change starts it healthy",
    "crash_progress": "both crash, and the change gets further by the engine's own start-up stages",
    "no_progress": "the crash is the same, or start-up got no further by the engine's stages",
    "quality_restored": "a failing quality check now passes beyond its interval, no met target lost",
    "quality_failed": "a quality check fails on the change",
    "gain": "a speed figure improved beyond the noise bar",
    "trade": "a figure improved beyond the bar and another got worse but still meets its target",
    "loss": "a figure got worse beyond the bar and would miss its target",
    "no_gain": "no figure improved beyond the noise bar",
    "asked": "the agent asked for the revert",
}


@dataclass
class Attempt(Record):
    """One kept or reverted change, as the timeline, the report and the PR drafts show it."""

    step: int
    summary: str
    outcome: str  # "kept" or "reverted"
    evidence: str
    rule: str | None = None
    fingerprint: str | None = None
    commits: dict[str, str] = field(default_factory=dict)
    flags: dict[str, FlagValue] = field(default_factory=dict)
    crash_class: str | None = None
    cost_usd: float = 0.0
    tokens: int = 0
    metrics: dict[str, float | None] = field(default_factory=dict)
    comparisons: list[Comparison] = field(default_factory=list)
    moves: list[str] = field(default_factory=list)
    stack: bool = False
    reverted_diffs: dict[str, str] = field(default_factory=dict)

    @property
    def kept(self) -> bool:
        return self.outcome == "kept"

    def to_dict(self) -> dict:
        return {**asdict(self), "comparisons": [c.to_dict() for c in self.comparisons]}

    @classmethod
    def from_dict(cls, data: dict) -> Attempt:
        return read_record(cls, data, comparisons=lambda compared: [read_record(Comparison, c) for c in compared])
