"""Provider-neutral conversation types, the Model protocol and reply validation.

Covers what the loop sees of any model: `Message`, `ToolCall`, `ToolSpec`, `Usage`, `Reply` (each
with `to_dict()` / `from_dict()` for the transcript), the `Model` protocol, `ModelError`, the check
that turns raw tool calls into either valid `ToolCall`s or a format error the model is told about, and the
facts a tool result carries beside its text as the rule-based models read them, parsed once into records: a
launch (`ServeFacts`, its triage `Finding`s), the run's status (`StatusFacts`, its `Target` rows). Reading them
never fails on a key a result lacks and keeps each value as written, so what replay digests is what was recorded.
Does not cover any provider's wire format (anthropic.py, openai.py), retries
(retry.py) or prices (prices.py).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

from porter.ledger.records import Record, read_record

Role = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")


class ModelError(Exception):
    """A provider error that retrying will not fix; the message says what to change."""


@dataclass
class ToolCall(Record):
    id: str
    name: str
    arguments: dict = field(default_factory=dict)


@dataclass
class ToolSpec(Record):
    name: str
    description: str = ""
    parameters: dict = field(default_factory=dict)  # JSON schema of the arguments object


@dataclass
class Message(Record):
    role: Role
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None  # role "tool": the call this result answers
    name: str | None = None  # role "tool": the tool that produced it
    # role "assistant": the provider's opaque reasoning blocks (Anthropic thinking with a signature),
    # copied from Reply.thinking; the API refuses tool results whose turn lost them.
    thinking: list[dict] = field(default_factory=list)
    # role "assistant": reasoning_content of an OpenAI-compatible provider; sent back, as those providers ask
    reasoning: str = ""
    # role "tool": the result's facts for programs (playbook, replay, transcript); never sent to a provider
    facts: dict | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"message role must be one of {ROLES}, got {self.role!r}")

    def to_dict(self) -> dict:
        """The role and content, and each other field only when set (a tool result's facts even when empty)."""
        data = {key: value for key, value in asdict(self).items() if value not in (None, [], "")}
        return {"role": self.role, "content": self.content, **data}

    @classmethod
    def from_dict(cls, data: dict) -> Message:
        return read_record(cls, data, tool_calls=_tool_calls)


@dataclass(frozen=True)
class Finding:
    """One class triage saw in a launch's log, with the facts its remedies read."""

    category: str = ""
    facts: dict = field(default_factory=dict)  # the class's own: file, header, macro, parameter, module prefixes...
    text: str = "{}"  # the whole finding as lower-case JSON, where a rule looks for the flags it names

    @classmethod
    def from_dict(cls, data: dict) -> Finding:
        return read_record(cls, {**data, "text": json.dumps(data).lower()})


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
        return read_record(cls, data, findings=lambda findings: tuple(map(Finding.from_dict, findings)))

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
    target: str = ""  # its label
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
        return read_record(
            cls, data, targets=lambda rows: tuple(read_record(Target, row) for row in rows), accepted_checks=frozenset
        )

    def unmet(self) -> set[str]:
        """The goals of the targets not met yet, or open, as the search names goals: each label's first word."""
        return {target.target.split(" ")[0] for target in self.targets if not target.met or target.open}

    def all_met(self) -> bool:
        return bool(self.targets) and all(target.met and not target.open for target in self.targets)


@dataclass
class Usage(Record):
    """Tokens of one call. `input_tokens` are those billed at the full input rate: cache reads and
    cache writes are counted apart, so the prompt size is the sum of the three."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float | None = None  # None: the price of this model is unknown


@dataclass
class Reply(Record):
    """One model turn. With `format_error` set, `tool_calls` holds only the well-formed calls and the
    error text is what the loop should tell the model. `thinking` goes into the assistant Message."""

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    format_error: str | None = None
    thinking: list[dict] = field(default_factory=list)
    reasoning: str = ""  # an OpenAI-compatible provider's reasoning_content (GLM, Kimi, DeepSeek)
    stop: str | None = None  # why the turn ended, when it matters: "truncated", "refusal" or "pause"

    def to_message(self) -> Message:
        """The assistant turn to append to the conversation."""
        return Message(
            "assistant",
            self.text,
            tool_calls=list(self.tool_calls),
            thinking=list(self.thinking),
            reasoning=self.reasoning,
        )

    def to_dict(self) -> dict:
        """Every field; `reasoning` and `stop` only when set."""
        return {key: value for key, value in asdict(self).items() if value or key not in ("reasoning", "stop")}

    @classmethod
    def from_dict(cls, data: dict) -> Reply:
        return read_record(cls, data, tool_calls=_tool_calls, usage=Usage.from_dict)


def _tool_calls(calls: list[dict]) -> list[ToolCall]:
    return [ToolCall.from_dict(call) for call in calls]


class Model(Protocol):
    name: str

    def step(self, messages: list[Message], tools: list[ToolSpec]) -> Reply: ...


# ---------------------------------------------------------------- reply validation


@dataclass
class RawToolCall:
    """A tool call as the provider sent it: arguments may be a JSON string, a dict, or garbage."""

    id: str
    name: str
    arguments: Any


def validate_reply(
    text: str,
    raw_calls: list[RawToolCall],
    tools: list[ToolSpec],
    usage: Usage,
    truncated: bool = False,
    thinking: list[dict] | None = None,
    reasoning: str = "",
) -> Reply:
    """A Reply whose tool calls are parsed and checked against `tools`; problems become `format_error`.

    A reply cut off at the output limit runs none of its calls: the last one may be cut mid-argument and
    the others were written without the end of the plan; the model is told to be shorter."""
    known = [tool.name for tool in tools]
    calls: list[ToolCall] = []
    problems: list[str] = []
    for raw in raw_calls:
        arguments = _arguments(raw, known)
        if isinstance(arguments, str):
            problems.append(arguments)
        else:
            calls.append(ToolCall(id=raw.id, name=raw.name, arguments=arguments))
    if truncated:
        problems = [
            f"your reply was cut off at the output token limit, so none of its {len(raw_calls)} tool call(s) ran. "
            "Make the next reply shorter: less text, one tool call, a smaller patch (edit_file with a few lines)."
        ]
        calls = []
    elif not text.strip() and not raw_calls:
        problems.append(f"the reply was empty: answer with text or call one of the tools ({', '.join(known)}).")
    if problems and calls:
        accepted = ", ".join(f"`{call.name}` ({call.id})" for call in calls)
        problems.append(f"the other calls ({accepted}) were well-formed and are being run; do not resend them.")
    error = "\n".join(problems) or None
    return Reply(
        text=text,
        tool_calls=calls,
        usage=usage,
        format_error=error,
        thinking=list(thinking or []),
        reasoning=reasoning,
        stop="truncated" if truncated else None,
    )


def written_reply(data: dict, tools: list[ToolSpec], id_prefix: str) -> Reply:
    """A reply as a script or a responder writes one, `{"text", "tool_calls": [{"name", "arguments", "id"?}],
    "usage"?}`, validated as a provider's is; a call without an id is named `{id_prefix}-{index}`."""
    calls = [call if isinstance(call, dict) else {"arguments": call} for call in data.get("tool_calls") or []]
    raw = [
        RawToolCall(str(call.get("id") or f"{id_prefix}-{index}"), str(call.get("name", "")), call.get("arguments", {}))
        for index, call in enumerate(calls)
    ]
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    return validate_reply(str(data.get("text") or ""), raw, tools, Usage.from_dict({"cost_usd": 0.0, **usage}))


def _arguments(raw: RawToolCall, known: list[str]) -> dict | str:
    """The call's arguments as an object, or what is wrong with the call."""
    if raw.name not in known:
        return f"unknown tool `{raw.name}` (call {raw.id}); the tools are: {', '.join(known)}."
    arguments = raw.arguments
    if isinstance(arguments, str):
        if not arguments.strip():
            return {}  # an empty string is how some servers spell "no arguments"
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as error:
            excerpt = raw.arguments[:200]
            return (
                f"the arguments of `{raw.name}` (call {raw.id}) are not valid JSON ({error.msg} at character "
                f"{error.pos}): {excerpt!r}. Send them again as one JSON object matching the tool's schema."
            )
    if arguments is not None and not isinstance(arguments, dict):
        return (
            f"the arguments of `{raw.name}` (call {raw.id}) must be a JSON object, got {type(arguments).__name__}: "
            f"{str(arguments)[:200]!r}."
        )
    return dict(arguments or {})
