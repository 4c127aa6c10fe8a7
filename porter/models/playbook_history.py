"""The conversation as the playbook reads it: each tool call in order with its result, the result's facts read once
into base.py's records (`Event`), and the rule's stage the playbook wrote in its reply (`[playbook:rule:stage]`).
Does not decide anything (playbook.py)."""

from __future__ import annotations

import re
from dataclasses import InitVar, dataclass, field, replace

from porter.models.base import Message, ServeFacts, StatusFacts

TAG = re.compile(r"\[playbook:([a-z_]+):([a-z_]+)\]")


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
    reduced: str | None = field(init=False)  # a reduced start-up's outcome (healthy or its crash); no server after

    def __post_init__(self, facts: dict | None) -> None:
        facts = facts or {}
        self.reduced = facts.get("outcome") if facts.get("reduced") else None
        self.serve = ServeFacts.from_dict({**facts, "healthy": facts.get("healthy") and not self.reduced})
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
