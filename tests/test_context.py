"""The conversation sent to a model stays bounded: old results elided under the token budget, the latest
result, the system prompt and the task always whole, and a resumed run continues from the same view.
Runs the real loop on the local sandbox with a scripted model."""

from __future__ import annotations

import json

import yaml
from local_tasks import open_local_run

from porter.ledger.transcript import read_state
from porter.loop import agent
from porter.loop import conversation as context
from porter.loop.tools import tool_specs
from porter.models import Message, ScriptedModel, ToolCall
from porter.models.openai import to_openai_message, to_openai_tool
from porter.ops import runs
from porter.redaction import redact
from porter.task import load_task

BIG = "python3 -c \"print(('x' * 99 + chr(10)) * 300)\"; echo END "  # ~30k characters, then END n


def request_chars(messages: list[Message]) -> int:
    """What goes over the wire, in the OpenAI chat format (JSON, escapes included)."""
    body = {"messages": [to_openai_message(m) for m in messages], "tools": [to_openai_tool(t) for t in tool_specs()]}
    return len(json.dumps(body))


def big_steps(count: int, start: int = 1) -> list[dict]:
    return [{"tool_calls": [{"name": "bash", "arguments": {"command": f"{BIG}{n}"}}]} for n in range(start, count)]


def run(ctx, script, remove: bool = True):
    model = ScriptedModel(script)
    try:
        agent.run_loop(ctx, model, redact)
    finally:
        ctx.transcript.close()
        ctx.sandbox.stop(remove=remove)
    return model


def test_sixty_steps_of_30k_results_never_send_more_than_200k_characters(tmp_path):
    ctx = open_local_run(tmp_path)
    model = run(ctx, big_steps(61))
    assert ctx.state.step == 61 and len(model.requests) == 61
    system, task = model.requests[0][0], model.requests[0][1]
    for number, request in enumerate(model.requests[1:], start=1):
        assert request_chars(request) < 200_000, number
        assert request[0] == system and request[1] == task
        latest = request[-1]
        assert latest.role == "tool" and f"END {number}\n" in latest.content  # the latest result, whole
        assert len(latest.content) > 20_000  # capped at agent.MAX_TOOL_RESULT_CHARS, head and tail
    last = model.requests[-1]
    elided = [m for m in last if m.role == "tool" and m.content.splitlines()[-1].startswith(context.ELIDED)]
    assert len(elided) >= 50 and all(m.facts["exit_code"] == 0 for m in elided)  # the facts stay for programs


def test_a_tight_budget_drops_old_turns_but_never_the_latest(tmp_path):
    messages = [Message("system", "s" * 1000), Message("user", "task " * 200)]
    for n in range(30):
        call = ToolCall(f"c{n}", "apply_patch", {"patch": "+" * 5000})
        result = Message("tool", f"r{n}\n" + "y" * 20000, tool_call_id=f"c{n}")
        messages += [Message("assistant", "why " * 300, [call]), result]
    kept = context.fit(messages, tool_specs(), budget_tokens=12_000)
    assert context.request_tokens(kept, tool_specs()) <= 12_000
    assert kept[:2] == messages[:2] and kept[-2:] == messages[-2:]
    assert "older turn(s)" in kept[2].content and kept[3].role == "assistant"
    assert [m.role for m in kept].count("user") == 2  # one note for every dropped turn


def test_resume_continues_from_the_elided_view(tmp_path):
    ctx = open_local_run(tmp_path, limits={"max_steps": 12})
    run(ctx, big_steps(20), remove=False)  # kept for the resume, as `porter run` keeps it
    state = read_state(ctx.run_dir)
    saved = [Message.from_dict(m) for m in state["messages"]]
    elided = [m for m in saved if m.role == "tool" and context.ELIDED in m.content]
    assert len(elided) == 11 - context.KEEP_WHOLE  # fitted before the 12th call, then the 12th result came
    assert sum(len(m.content) for m in saved) < 200_000
    task_file = ctx.run_dir / "task.yaml"
    data = yaml.safe_load(task_file.read_text())
    data["agent"]["limits"]["max_steps"] = 14
    task_file.write_text(yaml.safe_dump(data))
    resumed = runs.open_run(load_task(task_file), str(task_file), resume_dir=str(ctx.run_dir))
    model = run(resumed, big_steps(3, start=13))
    first = model.requests[0]
    assert "resumed" in first[len(saved)].content and len(first) == len(saved) + 1
    expected = context.fit([*saved, first[-1]], tool_specs(), resumed.task.agent.context_budget_tokens)
    assert [m.content for m in first] == [m.content for m in expected]  # the saved view, fitted as the next step
