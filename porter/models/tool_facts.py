"""The conversation as the rule-based models read it: tool calls with their results' facts, typed.

A tool result carries its facts as a JSON object beside the text (porter/loop/tools.py writes them, the transcript
keeps them as written); they are read here once, into records the playbook and replay read by attribute: a launch
(`ServeFacts`, with its triage `Finding`s), the run's status (`StatusFacts`, with its `Target` rows), and `Event`,
one tool call with its result. Reading never fails on a key a result lacks (a failed or interrupted call carries
few), and keeps each value as written, so what replay digests is what was recorded. Does not cover writing facts
(porter/loop/) or deciding anything (playbook.py, replay.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import InitVar, dataclass, field, replace

from porter.models.base import Message, fields_in

TAG = re.compile(r"\[playbook:([a-z_]+):([a-z_]+)\]")


@dataclass(frozen=True)
class Finding:
    """One class triage saw in a launch's log, with the facts its remedies read."""

    category: str = ""
    facts: dict = field(default_factory=dict)  # the class's own: file, header, macro, parameter, module prefixes...
    text: str = "{}"  # the whole finding as lower-case JSON, where a rule looks for the flags it names

    @classmethod
    def from_dict(cls, data: dict) -> Finding:
        return cls(str(data.get("category") or ""), dict(data.get("facts") or {}), json.dumps(data).lower())


@dataclass(frozen=True)
class ServeFacts:
    """A launch: healthy, or the crash's class, signature and findings (the primary first), and the log lines
    that name each tunable."""

    healthy: bool = False
    crash_class: str | None = None
    signature: str | None = None
    findings: tuple[Finding, ...] = ()
    flag_mentions: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict) -> ServeFacts:
        findings = tuple(Finding.from_dict(finding) for finding in data.get("findings") or [])
        mentions = dict(data.get("flag_mentions") or {})
        return cls(bool(data.get("healthy")), data.get("crash_class"), data.get("signature"), findings, mentions)

    @property
    def finding(self) -> Finding:
        """The primary finding, or an empty one."""
        return self.findings[0] if self.findings else Finding()

    def untuned_shapes(self) -> list[dict]:
        """The shapes a healthy start's slow-fallback findings name."""
        return [f.facts.get("shape") or {} for f in self.findings if f.category == "slow_fallback_perf"]


@dataclass(frozen=True)
class Target:
    """One row of the run's targets (porter/ledger/state.target_report)."""

    key: str | None = None
    label: str = ""
    met: bool | None = None
    open: bool = False  # no goal to reach: improved while the budget lasts


@dataclass(frozen=True)
class StatusFacts:
    """The run's status a result carries: the phase, a change pending, the flags, the server, the targets and the
    checks measured on the accepted configuration."""

    phase: str | None = None
    pending: bool | None = None
    server: str | None = None
    flags: dict = field(default_factory=dict)
    flags_changed: dict | None = None
    targets: tuple[Target, ...] = ()
    accepted_checks: frozenset[str] = frozenset()

    @classmethod
    def from_dict(cls, data: dict) -> StatusFacts:
        known = fields_in(cls, data)
        rows = known.get("targets", [])
        targets = tuple(
            Target(row.get("key"), row.get("target") or "", row.get("met"), bool(row.get("open"))) for row in rows
        )
        return cls(**{**known, "targets": targets, "accepted_checks": frozenset(known.get("accepted_checks", []))})

    def unmet(self) -> set[str]:
        """The goals of the targets not met yet, or open, as the search names goals: each label's first word."""
        return {target.label.split(" ")[0] for target in self.targets if not target.met or target.open}

    def all_met(self) -> bool:
        return bool(self.targets) and all(target.met and not target.open for target in self.targets)


@dataclass
class Event:
    """One tool call of the conversation with its result; the result's facts are read once, into records."""

    name: str
    arguments: dict
    tag: tuple[str, str] | None
    why: str = ""  # the reply text that came with the call (the playbook's reason)
    ok: bool = False
    facts: InitVar[dict | None] = None
    text: str = ""
    serve: ServeFacts = field(init=False)
    status: StatusFacts | None = field(init=False)  # None: the result carries no status
    kept: bool = field(init=False)  # accept kept the change
    interrupted: bool = field(init=False)  # the run was stopped mid-call and resumed

    def __post_init__(self, facts: dict | None) -> None:
        facts = facts or {}
        self.serve = ServeFacts.from_dict(facts)
        self.status = StatusFacts.from_dict(facts["status"]) if facts.get("status") else None
        self.kept, self.interrupted = bool(facts.get("kept")), bool(facts.get("interrupted"))


def parse_history(messages: list[Message]) -> list[Event]:
    """The tool calls of the conversation in order, each with its result (a call cut by an interruption has none)."""
    events: dict[str, Event] = {}
    for message in messages:
        if message.role == "assistant":
            match = TAG.search(message.content or "")
            why = TAG.sub("", message.content or "").strip()
            for call in message.tool_calls:
                events[call.id] = Event(call.name, call.arguments, match.groups() if match else None, why)
        elif message.role == "tool" and message.tool_call_id in events:
            facts = dict(message.facts or {})
            ok, text = bool(facts.get("ok", False)), message.content
            events[message.tool_call_id] = replace(events[message.tool_call_id], ok=ok, facts=facts, text=text)
    return list(events.values())
