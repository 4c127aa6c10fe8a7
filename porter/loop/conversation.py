"""The conversation a model is sent, kept bounded: old tool results elided under a token budget.

Covers estimating a request's size and fitting the conversation the run keeps under
`agent.context_budget_tokens`. The system prompt, the task and the latest tool result always stay
whole. In order, until the request fits: tool results older than the last few are cut to their first
line and a note (always, when long: the model re-reads what it needs, and every later request is
cheaper); then every tool result but the latest; then long arguments of old tool calls (patches,
file contents) and long old assistant texts; then whole old turns, oldest first. The elided
conversation is the one the run keeps in state.json, so `--resume` continues from the same bounded
view; the transcript keeps every result whole. A message's `facts` are never elided: the playbook
reads them and they are never sent. Does not cap one result (agent.cap_text) or render results.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

from porter.models import Message, ToolCall, ToolSpec

# Conservative: English is ~4 characters per token, code, JSON and logs nearer 3.
CHARS_PER_TOKEN = 3
KEEP_WHOLE = 4  # the latest tool results the model always reads in full
SHORT = 600  # results and arguments this short are kept as they are: eliding them saves little
ELIDED = "[porter elided"
DROPPED = re.compile(re.escape(ELIDED) + r" (\d+) older turn")


def message_chars(message: Message) -> int:
    arguments = sum(len(json.dumps(call.arguments, ensure_ascii=False)) + len(call.name) for call in message.tool_calls)
    thinking = len(json.dumps(message.thinking, ensure_ascii=False)) if message.thinking else 0
    return len(message.content) + arguments + thinking + 16  # role and framing


def request_tokens(messages: list[Message], tools: list[ToolSpec]) -> int:
    """An upper estimate of the prompt tokens of one request."""
    chars = sum(message_chars(message) for message in messages)
    chars += len(json.dumps([tool.to_dict() for tool in tools], ensure_ascii=False))
    return chars // CHARS_PER_TOKEN + 1


def fit(messages: list[Message], tools: list[ToolSpec], budget_tokens: int) -> list[Message]:
    """`messages` elided (see the module docstring) so the request fits `budget_tokens` when it can."""
    results = [index for index, message in enumerate(messages) if message.role == "tool"]
    kept = list(messages)
    for index in results[:-KEEP_WHOLE]:
        kept[index] = elide_result(kept[index])
    steps = (
        lambda: [(index, elide_result) for index in results[:-1]],
        lambda: [(index, shorten_turn) for index in _assistants(kept)[:-1]],
    )
    for candidates in steps:
        for index, elide in candidates():
            if request_tokens(kept, tools) <= budget_tokens:
                return kept
            kept[index] = elide(kept[index])
    while request_tokens(kept, tools) > budget_tokens and drop_oldest_turn(kept):
        pass
    return kept


def elide_result(message: Message) -> Message:
    if len(message.content) <= SHORT or message.content.startswith(ELIDED) or ELIDED in message.content[-200:]:
        return message
    first = message.content.splitlines()[0][:300] if message.content.strip() else ""
    note = (
        f"{ELIDED} {len(message.content)} characters of this older result to keep the conversation short; "
        "call the tool again if you need them]"
    )
    return replace(message, content=f"{first}\n{note}")


def shorten_turn(message: Message) -> Message:
    """An old assistant turn with long texts and long string arguments cut (the calls stay valid JSON)."""
    calls = [ToolCall(call.id, call.name, _short_arguments(call.arguments)) for call in message.tool_calls]
    content = message.content
    if len(content) > SHORT:
        content = f"{content[: SHORT // 2]}\n{ELIDED} {len(content) - SHORT // 2} characters of an older turn]"
    return replace(message, content=content, tool_calls=calls)


def _short_arguments(arguments: dict) -> dict:
    short = {}
    for key, value in arguments.items():
        if isinstance(value, str) and len(value) > SHORT:
            value = f"{value[: SHORT // 2]}\n{ELIDED} {len(value) - SHORT // 2} characters of an older call]"
        short[key] = value
    return short


def drop_oldest_turn(messages: list[Message]) -> bool:
    """Replace the oldest assistant turn and its results (after the system prompt and the task) by a note
    counting the dropped turns; never the latest turn. Returns False when nothing more can go."""
    turns = _assistants(messages)
    if len(turns) < 2:
        return False
    start, end = turns[0], turns[1]
    dropped = 1
    previous = DROPPED.match(messages[start - 1].content) if start > 0 and messages[start - 1].role == "user" else None
    if previous:
        start, dropped = start - 1, int(previous.group(1)) + 1
    note = f"{ELIDED} {dropped} older turn(s) to keep the conversation short; the run's transcript has them]"
    messages[start:end] = [Message("user", note)]
    return True


def _assistants(messages: list[Message]) -> list[int]:
    return [index for index, message in enumerate(messages) if message.role == "assistant"]
