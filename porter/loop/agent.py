"""The loop: observe -> model -> tool calls -> execute -> record, until the targets are met or a limit is hit.

Control flow travels in small exceptions (`Finished`, `LimitsExceeded`); the state and the conversation
are saved in a `finally` after every step, so a kill loses at most the step in flight and `--resume`
continues from there. Limits are checked in one place, before every model call; the conversation is
fitted to the context budget before every model call (conversation.py). What the model is told when its
reply cannot be used as it is (cut off, malformed, no call, the same failing call again) is decided
here. Setting a run up is in runs.py; the prompt in prompt.py; what the tools do in tools.py.
"""

from __future__ import annotations

import itertools
import json
import re
import time
from collections.abc import Callable

from porter.ledger.state import all_targets_met
from porter.ledger.transcript import write_state
from porter.loop import accepting
from porter.loop import conversation as context
from porter.loop.prompt import first_messages
from porter.loop.run_context import RunContext, resume_command
from porter.loop.tools import Finished, ToolResult, dispatch, tool_specs
from porter.models import (
    Message,
    Model,
    ToolCall,
    Usage,
    messages_since_last_reply,
    observation_digest,
    observation_excerpt,
)
from porter.redaction import redact as redact_secrets
from porter.redaction import redact_conversation

MAX_TOOL_RESULT_CHARS = 24_000  # what one observation may cost in context; triage keeps the cause inside it
# The marker sandbox/interface.py's OutputCapture puts where it cut a command's output (its bytes and a host log path)
SANDBOX_CUT = re.compile(r"\n\[\.\.\. (\d+) bytes elided; full output in [^\n]* \.\.\.\]\n")
READ_ON_LINES = 300  # the window a hint to read on from a cut proposes
REPEATS_NUDGED, REPEATS_STOPPED = 3, 4  # identical failing calls in a row: told once, then the run stops
# a tool call starts (no result yet), then ends with its result (an interruption reads as a failed one)
OnAction = Callable[[RunContext, ToolCall, ToolResult | None], None]


class LimitsExceeded(Exception):
    """A budget of the task ran out; the run stops cleanly with what it has kept."""


def check_limits(ctx: RunContext, session_start: float) -> None:
    limits, state = ctx.task.agent.limits, ctx.state
    wall_s = state.wall_s + (time.monotonic() - session_start)
    if state.step >= limits.max_steps:
        raise LimitsExceeded(f"max_steps ({limits.max_steps}) reached")
    if wall_s >= limits.max_wall_hours * 3600:
        raise LimitsExceeded(f"max_wall_hours ({limits.max_wall_hours}) reached")
    if state.relaunches >= limits.max_relaunches:
        raise LimitsExceeded(f"max_relaunches ({limits.max_relaunches}) reached")
    if state.cost_known and state.cost_usd >= limits.max_cost_usd:
        raise LimitsExceeded(f"max_cost_usd (${limits.max_cost_usd:.2f}) reached: ${state.cost_usd:.2f} spent")


def run_loop(
    ctx: RunContext,
    model: Model,
    redact: Callable[[str], str],
    on_step: Callable[[RunContext], None] | None = None,
    on_action: OnAction | None = None,
) -> RunContext:
    messages = [Message.from_dict(m) for m in ctx.state.messages] or first_messages(ctx)
    session_start = time.monotonic()
    try:
        while True:
            check_limits(ctx, session_start)
            step(ctx, model, messages, on_action)
            ctx.state.messages = [m.to_dict() for m in messages]
            write_state(ctx.run_dir, ctx.state.to_dict(), redact)
            if on_step:
                on_step(ctx)
            ended = accepting.confirm_targets(ctx)  # targets met (stale ones re-measured first), or a plateau
            if ended:
                raise Finished(ended)
    except Finished as finished:
        ctx.state.finished = finished.reason
    except LimitsExceeded as exceeded:
        ctx.state.finished = f"limit: {exceeded}"
    except KeyboardInterrupt:
        ctx.state.finished = f"interrupted (Ctrl-C or a kill); continue with: {resume_command(ctx)}"
        raise
    finally:
        ctx.state.solved = all_targets_met(ctx.task, ctx.state) and not ctx.is_pending()
        ctx.state.wall_s += time.monotonic() - session_start
        ctx.state.messages = [m.to_dict() for m in close_dangling_calls(messages)]
        ctx.stop_server()
        ctx.transcript.record("run_end", step=ctx.state.step, finished=ctx.state.finished, solved=ctx.state.solved)
        write_state(ctx.run_dir, ctx.state.to_dict(), redact)
        close = getattr(model, "close", None)  # a responder outside porter learns the run is over
        if close is not None:
            close(redact_conversation(messages), ctx.state.finished, ctx.state.solved, ctx.state.step)
    return ctx


def step(ctx: RunContext, model: Model, messages: list[Message], on_action: OnAction | None = None) -> None:
    state = ctx.state
    state.step += 1
    tools = tool_specs()
    messages[:] = context.fit(messages, tools, ctx.task.agent.context_budget_tokens)
    new = messages_since_last_reply(messages)
    ctx.transcript.record(
        "model_request",
        step=state.step,
        digest=observation_digest(new),
        excerpt=observation_excerpt(new),
        messages=len(messages),
        tokens_estimate=context.request_tokens(messages, tools),
    )
    messages[:] = redact_conversation(messages)  # the model's own calls and text too, before every request
    reply = model.step(messages, tools)
    account(ctx, reply.usage)
    ctx.transcript.record("model_reply", step=state.step, reply=reply.to_dict())
    messages.append(reply.to_message())
    if reply.stop == "refusal":
        raise Finished(f"the model refused to go on: {reply.text.strip()[:300]}")
    try:
        for call in reply.tool_calls:  # with a format error, these are the well-formed calls only
            run_call(ctx, messages, call, on_action)
    finally:
        if reply.format_error:
            messages.append(Message("user", f"Your last reply could not be used as it was: {reply.format_error}"))
        elif not reply.tool_calls and reply.stop != "pause":  # a paused turn is sent back as it is to continue
            messages.append(Message("user", "Call a tool to make progress; call finish when you are done."))
    check_repetition(messages)


def run_call(ctx: RunContext, messages: list[Message], call: ToolCall, on_action: OnAction | None) -> None:
    ctx.transcript.record("tool_call", step=ctx.state.step, id=call.id, name=call.name, arguments=call.arguments)
    if on_action:
        on_action(ctx, call, None)
    result = ToolResult(False, "interrupted before it finished", {"ok": False, "interrupted": True})
    try:
        result = dispatch(ctx, call.name, call.arguments)
    except Finished as finished:
        result = ToolResult(True, f"finishing: {finished.reason}", None)
        _record_result(ctx, messages, call, result)
        raise
    finally:
        if on_action:
            on_action(ctx, call, result)
    _record_result(ctx, messages, call, result)


def check_repetition(messages: list[Message]) -> None:
    """The same failing call again and again: told once at REPEATS_NUDGED, stopped at REPEATS_STOPPED."""
    count, call = repeated_failures(messages)
    if count >= REPEATS_STOPPED:
        raise Finished(f"stopped: the same failing call {count} times in a row ({call})")
    if count == REPEATS_NUDGED:
        messages.append(
            Message(
                "user",
                f"You made the same failing call {count} times in a row ({call}); it fails the same way each time. "
                "Read the error, then change the arguments or do something else. One more identical failing call "
                "ends the run.",
            )
        )


def repeated_failures(messages: list[Message]) -> tuple[int, str]:
    """How many of the latest tool calls failed with the very same name and arguments, and which call."""
    calls = {call.id: call for message in messages if message.role == "assistant" for call in message.tool_calls}
    results = [message for message in messages if message.role == "tool" and message.tool_call_id in calls]
    count, last = 0, ""
    for result in reversed(results):
        call = calls[result.tool_call_id]
        key = f"{call.name} {json.dumps(call.arguments, sort_keys=True)[:200]}"
        if (result.facts or {}).get("ok") is not False or (last and key != last):
            break
        count, last = count + 1, key
    return count, last


def _record_result(ctx: RunContext, messages: list[Message], call: ToolCall, result: ToolResult) -> None:
    text = cap_text(
        redact_secrets(result.text), call=call, facts=result.facts
    )  # redacted whole first: a cut must not leave half a secret
    ctx.transcript.record(
        "tool_result", step=ctx.state.step, id=call.id, name=call.name, ok=result.ok, content=text, facts=result.facts
    )
    messages.append(Message("tool", text, tool_call_id=call.id, name=call.name, facts=result.facts))


def account(ctx: RunContext, usage: Usage) -> None:
    tokens = ctx.state.tokens
    tokens.input += usage.input_tokens
    tokens.output += usage.output_tokens
    tokens.cache_read += usage.cache_read_tokens
    tokens.cache_write += usage.cache_write_tokens
    if usage.cost_usd is None:
        if (usage.input_tokens or usage.output_tokens) and ctx.state.cost_known:
            ctx.state.cost_known = False
            note = "no price is known for this model: max_cost_usd cannot be enforced (tokens are still counted)"
            ctx.transcript.record("note", step=ctx.state.step, text=note)
    else:
        ctx.state.cost_usd += usage.cost_usd


def close_dangling_calls(messages: list[Message]) -> list[Message]:
    """After an interruption every tool call still needs a result, or providers reject the conversation."""
    answered = {m.tool_call_id for m in messages if m.role == "tool"}
    assistants = [m for m in messages if m.role == "assistant"]
    for call in assistants[-1].tool_calls if assistants else []:
        if call.id not in answered:
            messages.append(
                Message(
                    "tool",
                    "interrupted before this call finished; it had no effect that was kept",
                    tool_call_id=call.id,
                    name=call.name,
                    facts={"ok": False, "interrupted": True},
                )
            )
    return messages


def cap_text(
    text: str, limit: int = MAX_TOOL_RESULT_CHARS, call: ToolCall | None = None, facts: dict | None = None
) -> str:
    """A long observation cut to whole lines of its head and tail; the cut says which lines went and the call
    that reads them (conversation.how_to_read_again). A line longer than a quarter of the limit is cut itself
    first, and says so, so one minified line cannot take the whole result. A command output the sandbox
    already cut (head and tail bytes) is cut back to whole lines and said the same way."""
    text = _explain_sandbox_cut(text, call, facts)
    if len(text) <= limit:
        return text
    lines = [_cut_line(line, limit // 4) for line in text.splitlines()]
    if sum(len(line) + 1 for line in lines) <= limit:
        return "\n".join(lines)
    head = _lines_within(lines, limit // 2)
    tail = _lines_within(lines[len(head) :][::-1], limit // 2)[::-1]
    left_out = list(enumerate(lines, start=1))[len(head) : len(lines) - len(tail)]
    chars = sum(len(line) + 1 for _, line in left_out)
    note = (
        f"[porter left out lines {left_out[0][0]}-{left_out[-1][0]} of {len(lines)} ({chars} characters): one "
        f"result is capped at {limit} characters. To read them: {context.how_to_read_again(call, facts, left_out)}]"
    )
    return "\n".join([*head, note, *tail])


def _explain_sandbox_cut(text: str, call: ToolCall | None, facts: dict | None) -> str:
    """The sandbox keeps a command's first and last bytes (sandbox/interface.py OutputCapture) and names a log on the
    host the model cannot read: cut both parts to whole lines and say where the output goes on and how to read
    on from there (the count of lines left out is unknown: only bytes were counted)."""
    match = SANDBOX_CUT.search(text)
    if match is None:
        return text
    head = text[: match.start()].split("\n")[:-1]  # the last line of the head was cut mid-line
    tail = text[match.end() :].split("\n")[1:]  # and the first of the tail
    cut_bytes = (
        int(match.group(1)) + len(text[: match.start()].split("\n")[-1]) + len(text[match.end() :].split("\n")[0])
    )
    next_lines = [(len(head) + 1, ""), (len(head) + READ_ON_LINES, "")]  # the next lines, by the result's numbering
    note = (
        f"[porter left out about {cut_bytes} bytes of this output after line {len(head)} of this result (the sandbox "
        f"keeps the head and the tail of a command's output); the last {len(tail)} lines follow. To read on: "
        f"{context.how_to_read_again(call, facts, next_lines)}]"
    )
    return "\n".join([*head, note, *tail])


def _cut_line(line: str, limit: int) -> str:
    return (
        line if len(line) <= limit else f"{line[:limit]} [porter cut {len(line) - limit} more characters of this line]"
    )


def _lines_within(lines: list[str], chars: int) -> list[str]:
    """The first of `lines` that fit in `chars` characters, newlines counted."""
    totals = itertools.accumulate(len(line) + 1 for line in lines)  # only grows: the first that fit
    return [line for line, total in zip(lines, totals, strict=True) if total <= chars]
