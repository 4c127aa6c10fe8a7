"""Replaying a recorded run: the observation digest and ReplayModel.

Covers the digest of what the agent observed before each model call, the normalisation that
makes it stable across runs of the same behaviour, and a model that answers with the recorded
replies in order and stops with a `ReplayDivergence` naming the step, both digests and both
observations when the live run saw something else. Does not cover writing transcripts
(porter/ledger/transcript.py) or driving the loop (porter/loop/agent.py).

Digest rule: take the messages appended since the last assistant message (`messages_since_last_reply`:
tool results and user text; the whole conversation but the system prompt before the first reply), keep each one's role,
tool name and content (not tool-call ids: providers mint new ones every run), normalise the
content with NORMALISATIONS below, in order, and hash the JSON with sha256 (first 16 hex digits).
Normalised away: temp paths, ISO timestamps and clock times, UUIDs and hex ids (7+ hex digits with
a letter and a digit: git shas, container ids, 0x addresses), ports after localhost, an IP or a
URL's host, or after the word `port`,
pids, durations (a number with a time unit), every number with decimals, trailing whitespace.
Integers without a unit are kept: exit codes, line numbers and counts are behaviour.
Results of porter's launching and measuring tools (serve, run_check, tune, accept, revert, set_flags) are
first reduced to what they decided (`behaviour()`): healthy or the crash class, targets met, kept or not; the
run's status other results carry is reduced the same way. A read_log result counts as its header (the log, the
launch, how many lines matched), without the log's length or the lines: the log grows with the checks' traffic and
interleaves two streams, by timing, so which lines a read shows is not behaviour. A file time as `ls -l` prints it is
a date.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import NamedTuple

from porter.errors import RunDirError
from porter.ledger.transcript import iter_records
from porter.models.base import Message, ModelError, Reply, StatusFacts, ToolSpec

NORMALISATIONS: list[tuple[re.Pattern, str]] = [
    (re.compile(r"(?:/private)?/(?:tmp|var/folders|var/tmp)/[^\s'\":,)\]}]*"), "<tmp>"),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"), "<time>"),
    (re.compile(r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b"), "<time>"),
    # a file's time as `ls -l` prints it (Dec  4 20:45, or the year for an old file)
    (
        re.compile(r"\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +\d{1,2} +(?:\d{1,2}:\d{2}|\d{4})\b"),
        "<date>",
    ),
    (re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"), "<id>"),
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "<hex>"),
    (re.compile(r"\b(?=[0-9a-fA-F]*[a-fA-F])(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{7,}\b"), "<hex>"),
    (re.compile(r"^[0-9a-f]{7,12}(?= \S)", re.MULTILINE), "<hex>"),  # `git log --oneline`'s hash, digits only too
    (re.compile(r"((?:localhost|\d{1,3}(?:\.\d{1,3}){3}|\[[0-9a-fA-F:]+\]|(?<=//)[\w.-]+):)\d{2,5}\b"), r"\1<port>"),
    (re.compile(r"\b(port[\s=:]+)\d{2,5}\b", re.IGNORECASE), r"\1<port>"),
    (re.compile(r"\b(pid[\s=:]+)\d+\b", re.IGNORECASE), r"\1<pid>"),
    (
        re.compile(r"\b\d+(?:\.\d+)?\s?(?:ns|us|µs|ms|s|sec|secs|seconds?|m|min|mins|minutes?|h|hours?)\b"),
        "<duration>",
    ),
    # not inside dotted quads or versions (127.0.0.1, 0.5.6): those are behaviour, not measurements
    (re.compile(r"(?<![\w.])[-+]?\d+\.\d+(?:[eE][-+]?\d+)?(?!\w|\.\d)"), "<float>"),
    (re.compile(r"[ \t]+$", re.MULTILINE), ""),
]
EXCERPT_CHARS = 300


def normalise(text: str) -> str:
    for pattern, replacement in NORMALISATIONS:
        text = pattern.sub(replacement, text)
    return text


def messages_since_last_reply(messages: list[Message]) -> list[Message]:
    """What the agent observed since the model last spoke (everything, before its first reply)."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "assistant":
            return messages[index + 1 :]
    return list(messages)


def _observation(messages: list[Message]) -> list[list[str]]:
    # The system prompt is porter's instructions, not something the agent observed: rewording it must not
    # make every recording diverge at step 1.
    kept = [message for message in messages if message.role != "system"]
    return [[message.role, message.name or "", normalise(behaviour(message))] for message in kept]


# Tools whose results are measurements or launches: only what they decided is behaviour, not their figures.
MEASURING_TOOLS = {"serve", "run_check", "tune", "accept", "revert", "set_flags"}
BEHAVIOUR_FACTS = ("tool", "ok", "exit_code", "timed_out", "healthy", "crash_class", "signature", "kept")
# A server log grows with the batch lines of the traffic the checks sent, by timing, and its lines come in the
# order two streams (stdout, stderr) were flushed: how long the log is and which lines a read shows are not
# behaviour; what the read found (its header: the log, the launch, the count of matching lines) is.
LOG_LENGTH = re.compile(r"^(serve-\d+\.log \(launch \d+; launches \[[\d, ]*\]; )\d+ lines\)")


def behaviour(message: Message) -> str:
    """A porter tool result reduced to its behaviour: a launch or a check changes the digest by what it
    found (healthy, crash class, target met, kept), never by how fast it was. Other results count whole, text
    and facts, the facts as one JSON line after the text (the form transcripts had before facts became a
    field of the message), with the run's status reduced as a measuring result's is: porter's own rendering of
    its targets is not something the agent did. A log read counts as its header, without the log's length."""
    facts = message.facts
    if message.role != "tool" or not isinstance(facts, dict):
        return message.content
    if message.name not in MEASURING_TOOLS or "status" not in facts:
        content = message.content
        if message.name == "read_log":  # what the read found, not which lines the timing put in the log
            content = LOG_LENGTH.sub(r"\1<n> lines)", content.split("\n", 1)[0], count=1)
            facts = {key: value for key, value in facts.items() if key != "lines"}
        if isinstance(facts.get("status"), dict):
            facts = {**facts, "status": _status_view(facts["status"])}
        return f"{content}\n{json.dumps(facts, default=str, sort_keys=True)}"
    view = {key: facts[key] for key in BEHAVIOUR_FACTS if key in facts}
    view["verdicts"] = {
        key: result.get("meets_target", result.get("passed")) for key, result in (facts.get("results") or {}).items()
    }
    view["status"] = _status_view(facts["status"])
    if not facts.get("ok"):
        view["error"] = message.content
    return json.dumps(view, sort_keys=True, default=str)


def _status_view(status: dict) -> dict:
    """What the run's status says that is behaviour: a change pending, the flags it changes, the server, each
    target met or not."""
    facts = StatusFacts.from_dict(status)
    met = [target.met for target in facts.targets]
    return {"pending": facts.pending, "flags_changed": facts.flags_changed, "server": facts.server, "met": met}


def observation_digest(messages: list[Message]) -> str:
    """Stable hash of `messages` (pass `messages_since_last_reply(...)`); see the module docstring."""
    payload = json.dumps(_observation(messages), ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


def observation_excerpt(messages: list[Message], limit: int = EXCERPT_CHARS) -> str:
    """Short normalised text of `messages`, for the transcript and for divergence reports."""
    text = " | ".join(
        f"{role}{f'[{name}]' if name else ''}: {content}" for role, name, content in _observation(messages)
    )
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class ReplayDivergence(ModelError):
    """The live run observed something the recording did not; says where and what."""

    def __init__(self, step: int, expected_digest: str, actual_digest: str, expected_excerpt: str, actual_excerpt: str):
        self.step = step
        self.expected_digest = expected_digest
        self.actual_digest = actual_digest
        self.expected_excerpt = expected_excerpt
        self.actual_excerpt = actual_excerpt
        super().__init__(
            f"replay diverged at step {step}: expected observation {expected_digest} ({expected_excerpt!r}), "
            f"got {actual_digest} ({actual_excerpt!r})"
        )


class RecordedStep(NamedTuple):
    """One recorded model call: its step, the digest and excerpt of what it had observed, and the reply it gave."""

    step: int
    digest: str
    excerpt: str
    reply: Reply


class ReplayModel:
    """Answers with a transcript's recorded replies, checking each observation against the recording."""

    def __init__(self, path: str | Path):
        path = Path(path)
        self.path = path / "transcript.jsonl" if path.is_dir() else path
        self.name = f"replay:{self.path}"
        self.steps = load_recorded_steps(self.path)
        self.position = 0

    def step(self, messages: list[Message], tools: list[ToolSpec]) -> Reply:
        observed = messages_since_last_reply(messages)
        actual_digest, actual_excerpt = observation_digest(observed), observation_excerpt(observed)
        if self.position >= len(self.steps):
            ended = f"<the recording ends after {len(self.steps)} model calls>"
            raise ReplayDivergence(self.position + 1, "<none>", actual_digest, ended, actual_excerpt)
        recorded = self.steps[self.position]
        self.position += 1
        if recorded.digest != actual_digest:
            raise ReplayDivergence(recorded.step, recorded.digest, actual_digest, recorded.excerpt, actual_excerpt)
        return recorded.reply


def load_recorded_steps(path: Path) -> list[RecordedStep]:
    """The recorded steps in order, from model_request / model_reply records. A recording is data from whoever
    wrote it: a record of another shape is a ModelError naming it, raised before anything runs."""
    steps: list[RecordedStep] = []
    pending: tuple | None = None  # (step, digest, excerpt) of a request awaiting its reply
    since_reply: list[dict] = []
    number = 0
    try:
        for number, record in enumerate(iter_records(path), start=1):  # noqa: B007 - the error below names it
            kind = record.get("kind")
            if kind == "model_request":
                excerpt = record.get("excerpt") or _excerpt_of_records(since_reply)
                pending = (record.get("step", len(steps) + 1), str(record["digest"]), excerpt)
            elif kind == "model_reply" and pending is not None:
                steps.append(RecordedStep(*pending, _reply(record["reply"])))
                pending, since_reply = None, []
            elif kind in ("tool_result", "note"):
                since_reply.append(record)
    except RunDirError as exc:
        raise ModelError(str(exc)) from None
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelError(f"{path}: record {number} is not one porter writes ({type(exc).__name__}: {exc})") from None
    if not steps:
        raise ModelError(f"{path}: no model_request/model_reply pairs to replay; is this a porter transcript?")
    return steps


def _reply(data: object) -> Reply:
    if not isinstance(data, dict) or not isinstance(data.get("text") or "", str):
        raise TypeError("a recorded reply is an object with a text")
    if not all(isinstance(call, dict) for call in data.get("tool_calls") or []):
        raise TypeError("a recorded tool call is an object")
    return Reply.from_dict(data)


def _excerpt_of_records(records: list[dict]) -> str:
    """Fallback excerpt from the tool results recorded before a request that stored none."""
    fields = [{key: value for key, value in record.items() if key not in ("seq", "t", "kind")} for record in records]
    text = " ".join(json.dumps(fields, ensure_ascii=False, default=str).split())
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 3] + "..."
