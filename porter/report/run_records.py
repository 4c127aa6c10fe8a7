"""The files a run directory holds, read as typed records: metrics.jsonl (Measurement), the transcript (Recording:
the run's start and end, the agent's turns, the tools' outcomes and the serve tool's start-ups) and environment.json
(Environment). What they say for people (configurations, labels, figures) is run_reading.py's; this reads only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from porter.errors import RunDirError
from porter.ledger.records import StartUp
from porter.ledger.transcript import iter_records
from porter.models.base import Record, Reply, ToolCall, Usage
from porter.schema import FlagValue


@dataclass(frozen=True)
class Measurement:
    """One line of metrics.jsonl: a check's result at a step, on the configuration it was measured on."""

    step: int
    check: str  # the check's key: "throughput", "single_stream", "quality:<name>"
    result: dict  # the check's own result document (only its check kind reads inside it)
    config: str | None  # the configuration's fingerprint (a line of an older porter names it in its result only)
    pending: bool  # evidence for a change not decided yet
    flags: dict[str, FlagValue] | None  # the serve flags it was measured with


@dataclass
class StartUpAt(StartUp):
    """A start-up as the serve tool reported it, at the step of the call."""

    step: int = 0


@dataclass(frozen=True)
class ToolOutcome:
    """A tool's result as the transcript recorded it: the first line the agent read and the facts for programs."""

    step: int
    tool: str
    said: str  # the first line of what the agent read (400 characters at most)
    ok: bool | None  # False: the tool refused or failed
    changed: dict  # what the call changed: files per repo (tune), flags (set_flags)
    facts: dict  # everything the tool returned for programs
    startup: StartUpAt | None = None  # the serve tool's start-up (log, fingerprint, healthy, crash_class, ...)
    reduced: bool = False  # the start-up was reduced (serve reduced): it starts no configuration of the run

    @classmethod
    def parse(cls, record: dict) -> ToolOutcome:
        facts, step, tool = record.get("facts"), record.get("step"), record.get("name")
        content = str(record.get("content") or "")
        if not isinstance(facts, dict):  # recorded before facts became a field: its content's last line holds them
            facts = _json_object(content.rstrip().rsplit("\n", 1)[-1])
        started = tool == "serve" and "log" in facts
        startup = StartUpAt.from_dict({**facts, "step": step}) if started else None
        said = content.split("\n", 1)[0][:400]
        return cls(
            step, tool, said, facts.get("ok"), facts.get("changed") or {}, facts, startup, bool(facts.get("reduced"))
        )


@dataclass(frozen=True)
class Turn:
    """One reply of the agent: its words, the tool calls it made and what they cost, at a step."""

    step: int
    text: str
    calls: list[ToolCall]
    usage: Usage


@dataclass
class RunStart(Record):
    """The transcript's run_start record: when the run started and in what (environment.json's content)."""

    t: float = 0.0
    environment: dict = field(default_factory=dict)


@dataclass
class RunEnd(Record):
    """The transcript's run_end record: when and at which step the run ended, and whether it solved the task."""

    t: float = 0.0
    step: int = 0
    solved: bool = False


@dataclass
class Recording:
    """A transcript read back: its start and end, the agent's replies and the tools' outcomes, in order, the serve
    calls made and porter's estimate of the requests' tokens (for a seat whose provider reports none)."""

    start: RunStart | None = None
    end: RunEnd | None = None
    turns: list[Turn] = field(default_factory=list)
    outcomes: list[ToolOutcome] = field(default_factory=list)
    launches: int = 0
    tokens_estimate: int = 0


def read_recording(path: Path) -> Recording:
    """The transcript at `path`; a record of a kind it does not know is skipped."""
    recording = Recording()
    for record in iter_records(path):
        kind = record.get("kind")
        if kind == "run_start" and recording.start is None:
            recording.start = RunStart.from_dict(record)
        elif kind == "run_end":
            recording.end = RunEnd.from_dict(record)
        elif kind == "model_reply" and isinstance(record.get("reply"), dict):
            reply = Reply.from_dict(record["reply"])
            recording.turns.append(Turn(record.get("step"), reply.text, reply.tool_calls, reply.usage))
        elif kind == "tool_result":
            recording.outcomes.append(ToolOutcome.parse(record))
        elif kind == "tool_call" and record.get("name") == "serve":
            recording.launches += 1
        elif kind == "model_request":
            recording.tokens_estimate += record.get("tokens_estimate") or 0
    return recording


def _json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


@dataclass
class Environment(Record):
    """environment.json as a report reads it (runs.describe_environment writes it): the image the run used and what
    the probe found in it (the ROCm release, aiter's commit or version, the GPU); "" for what it does not say."""

    image: str = ""
    image_id: str = ""
    rocm: str = ""
    aiter_commit: str = ""
    aiter_version: str = ""
    gpu: str = ""

    @classmethod
    def read(cls, path: Path) -> Environment:
        """The file's sandbox and stack parts, whose names do not overlap (all "" when the run wrote none)."""
        document = json.loads(path.read_text()) if path.exists() else {}
        return cls.from_dict({**(document.get("sandbox") or {}), **(document.get("stack") or {})})


def read_metrics(run_dir: Path) -> list[Measurement]:
    """metrics.jsonl (torn last line skipped); a record without its step, check or result is a RunDirError."""
    path = run_dir / "metrics.jsonl"
    measurements = []
    for number, record in enumerate(iter_records(path) if path.exists() else (), start=1):
        step, check, result = record.get("step"), record.get("check"), record.get("result")
        if not (isinstance(step, int) and isinstance(check, str) and isinstance(result, dict)):
            raise RunDirError(f"{path}: record {number} lacks its step, check or result; not a porter measurement")
        config = record.get("config") or result.get("fingerprint")
        measurements.append(Measurement(step, check, result, config, bool(record.get("pending")), record.get("flags")))
    return measurements
