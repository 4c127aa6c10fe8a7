"""The loop: observe -> model -> tool calls -> execute -> record, until the targets are met or a limit is hit.

Control flow travels in small exceptions (`Finished`, `LimitsExceeded`); the state and the conversation
are saved in a `finally` after every step, so a kill loses at most the step in flight and `--resume`
continues from there. Limits are checked in one place, before every model call. Setting a run up
(run directory, sandbox, repos) is in runs.py; what the tools do is in tools.py and accepting.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from porter.models import Message, Model, Usage, messages_since_last_reply, observation_digest, observation_excerpt
from porter.redaction import redact as redact_secrets
from porter.run_context import RunContext
from porter.state import all_targets_met, target_report
from porter.tools import Finished, ToolResult, dispatch, tool_specs
from porter.transcript import write_state

MAX_TOOL_RESULT_CHARS = 24_000  # what one observation may cost in context; triage keeps the cause inside it


class LimitsExceeded(Exception):
    """A budget of the task ran out; the run stops cleanly with what it has kept."""


SYSTEM_PROMPT = """\
You are porter, an inference engineer porting {model_id} to {gpu_count}x {gpu} serving. You work in a sandbox
built from the serving image through tools. Goal: a healthy server that meets every target below, with
quality no worse than the reference. Targets:
{targets}
Repos you may patch (paths inside the sandbox): {repos}
Serve command (flags are yours to change within the tunables): {command}
Tunables (flag: allowed values; null = off): {tunables}
Tuning commands: {tune}
Rules porter enforces: a pending change (diffs + flags) is kept by `accept` only when it removes the crash of
the accepted configuration, or improves throughput / single-stream speed beyond noise with quality within
tolerance; otherwise it is reverted and you are told why. Measure the baseline before changing anything.
Serve after every change before measuring. Prefer the smallest fix that upstream would merge. When every
target is met, or nothing sensible is left to try, call finish.
"""


def system_prompt(ctx: RunContext) -> str:
    task = ctx.task
    targets = "\n".join(f"- {row['target']}: {row['goal']}" for row in target_report(task, {}))
    return SYSTEM_PROMPT.format(
        model_id=task.model.id,
        gpu_count=task.hardware.count * task.hardware.nodes,
        gpu=task.hardware.gpu,
        targets=targets,
        repos=", ".join(f"{r.name} at {r.path}" for r in task.patchable_repos()) or "none",
        command=task.serve.command,
        tunables=task.serve.tunables or "none",
        tune="; ".join(f"{t.name}: {t.description.strip()}" for t in task.tune) or "none",
    )


def first_messages(ctx: RunContext) -> list[Message]:
    return [
        Message("system", system_prompt(ctx)),
        Message(
            "user",
            f"Task {ctx.task.name}: {ctx.task.description.strip()}\nPhase: bring-up. Start by serving "
            f"with the baseline flags {ctx.state.flags}.",
        ),
    ]


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
    ctx: RunContext, model: Model, redact: Callable[[str], str], on_step: Callable[[RunContext], None] | None = None
) -> RunContext:
    messages = [Message.from_dict(m) for m in ctx.state.messages] or first_messages(ctx)
    session_start = time.monotonic()
    try:
        while True:
            check_limits(ctx, session_start)
            step(ctx, model, messages)
            ctx.state.messages = [m.to_dict() for m in messages]
            write_state(ctx.run_dir, ctx.state.to_dict(), redact)
            if on_step:
                on_step(ctx)
            if all_targets_met(ctx.task, ctx.state.accepted.checks) and not ctx.is_pending():
                raise Finished("every target is met by the accepted configuration")
    except Finished as finished:
        ctx.state.finished = finished.reason
    except LimitsExceeded as exceeded:
        ctx.state.finished = f"limit: {exceeded}"
    except KeyboardInterrupt:
        ctx.state.finished = "interrupted (Ctrl-C); continue with --resume"
        raise
    finally:
        ctx.state.solved = all_targets_met(ctx.task, ctx.state.accepted.checks)
        ctx.state.wall_s += time.monotonic() - session_start
        ctx.state.messages = [m.to_dict() for m in close_dangling_calls(messages)]
        ctx.stop_server()
        ctx.transcript.record("run_end", step=ctx.state.step, finished=ctx.state.finished, solved=ctx.state.solved)
        write_state(ctx.run_dir, ctx.state.to_dict(), redact)
    return ctx


def step(ctx: RunContext, model: Model, messages: list[Message]) -> None:
    state = ctx.state
    state.step += 1
    new = messages_since_last_reply(messages)
    ctx.transcript.record(
        "model_request",
        step=state.step,
        digest=observation_digest(new),
        excerpt=observation_excerpt(new),
        messages=len(messages),
    )
    reply = model.step(messages, tool_specs())
    account(ctx, reply.usage)
    ctx.transcript.record("model_reply", step=state.step, reply=reply.to_dict())
    messages.append(reply.to_message())
    try:
        for call in reply.tool_calls:  # with a format error, these are the well-formed calls only
            ctx.transcript.record("tool_call", step=state.step, id=call.id, name=call.name, arguments=call.arguments)
            try:
                result = dispatch(ctx, call.name, call.arguments)
            except Finished as finished:
                _record_result(ctx, messages, call, ToolResult(True, f"finishing: {finished.reason}", None))
                raise
            _record_result(ctx, messages, call, result)
    finally:
        if reply.format_error:
            messages.append(Message("user", f"Your last reply could not be used as it was: {reply.format_error}"))
        elif not reply.tool_calls:
            messages.append(Message("user", "Call a tool to make progress; call finish when you are done."))


def _record_result(ctx: RunContext, messages: list[Message], call, result: ToolResult) -> None:
    text = cap_text(redact_secrets(result.text))  # redacted whole first: a cut must not leave half a secret
    ctx.transcript.record(
        "tool_result", step=ctx.state.step, id=call.id, name=call.name, ok=result.ok, content=text, facts=result.facts
    )
    messages.append(Message("tool", text, tool_call_id=call.id, name=call.name, facts=result.facts))


def account(ctx: RunContext, usage: Usage) -> None:
    tokens = ctx.state.tokens
    tokens["input"] += usage.input_tokens
    tokens["output"] += usage.output_tokens
    tokens["cache_read"] += usage.cache_read_tokens
    tokens["cache_write"] += usage.cache_write_tokens
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
                )
            )
    return messages


def cap_text(text: str, limit: int = MAX_TOOL_RESULT_CHARS) -> str:
    """Head and tail of a long observation, with a count of what was left out."""
    if len(text) <= limit:
        return text
    head, tail = text[: limit // 2], text[-limit // 2 :]
    return f"{head}\n[... {len(text) - len(head) - len(tail)} characters left out ...]\n{tail}"
