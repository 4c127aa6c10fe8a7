"""The conversation sent to a model stays bounded: old results elided under the token budget, the latest
result, the system prompt and the task always whole, and a resumed run continues from the same view.
Runs the real loop on the local sandbox with a scripted model."""

from __future__ import annotations

import json

import git
import yaml
from local_tasks import local_task, open_local_run
from local_tasks import run_local as run

from porter.evaluate import runs
from porter.ledger.transcript import read_state, read_transcript
from porter.loop import conversation as context
from porter.loop import file_tools
from porter.loop.prompt import first_messages
from porter.loop.tools import tool_specs
from porter.models import Message, ToolCall
from porter.models.openai import to_openai_message, to_openai_tool
from porter.task import load_task

BIG = "python3 -c \"print(('x' * 99 + chr(10)) * 300)\"; echo END "  # ~30k characters, then END n


def request_chars(messages: list[Message]) -> int:
    """What goes over the wire, in the OpenAI chat format (JSON, escapes included)."""
    body = {"messages": [to_openai_message(m) for m in messages], "tools": [to_openai_tool(t) for t in tool_specs()]}
    return len(json.dumps(body))


def big_steps(count: int, start: int = 1) -> list[dict]:
    return [{"tool_calls": [{"name": "bash", "arguments": {"command": f"{BIG}{n}"}}]} for n in range(start, count)]


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
        assert len(latest.content) > 18_000  # what the sandbox keeps of a command's output, head and tail
    last = model.requests[-1]
    shortened = [m for m in last if m.role == "tool" and m.content.splitlines()[-1].startswith(context.SHORTENED)]
    assert len(shortened) >= 40 and all(m.facts["exit_code"] == 0 for m in shortened)  # the facts stay for programs
    results = [m for m in last if m.role == "tool"]
    assert results[: len(shortened)] == shortened  # oldest first: the newer results are whole
    assert "END 60\n" in results[-1].content and context.SHORTENED not in results[-2].content


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


def test_the_latest_turn_is_whole_at_any_budget():
    """Four results of one turn, 30k characters each, at the smallest budget: all sent whole, the older turns go."""
    messages = [Message("system", "s" * 1000), Message("user", "the task")]
    for turn in range(3):
        calls = [ToolCall(f"c{turn}-{n}", "read_file", {"path": f"/repo/f{n}.py"}) for n in range(4)]
        messages.append(Message("assistant", "", calls))
        messages += [
            Message("tool", f"f{n}.py\n" + "z\n" * 15_000, tool_call_id=call.id) for n, call in enumerate(calls)
        ]
    kept = context.fit(messages, tool_specs(), budget_tokens=4_000)
    assert kept[-5:] == messages[-5:]  # the latest reply and its four results, as they came
    assert all(
        context.ELIDED in m.content or context.SHORTENED in m.content for m in kept[2:-5] if m.role != "assistant"
    )


def test_resume_continues_from_the_fitted_view(tmp_path):
    ctx = open_local_run(tmp_path, limits={"max_steps": 12}, context_budget_tokens=40_000)
    run(ctx, big_steps(20), remove=False)  # kept for the resume, as `porter run` keeps it
    state = read_state(ctx.run_dir)
    saved = [Message.from_dict(m) for m in state["messages"]]
    shortened = [m for m in saved if m.role == "tool" and context.SHORTENED in m.content]
    assert 0 < len(shortened) < 11  # fitted before the 12th call, oldest first; then the 12th result came whole
    assert shortened == [m for m in saved if m.role == "tool"][: len(shortened)]
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


def engine_file(tmp_path, name: str, lines: int) -> str:
    """A committed file of the local task's engine tree, `lines` long; returns its sandbox path."""
    tree = tmp_path / "engine"
    (tree / name).write_text("".join(f"value_{n} = {n} * 3  # line {n}\n" for n in range(1, lines + 1)))
    repo = git.Repo(tree)
    repo.git.add(name)
    repo.git.execute(["git", "-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-qm", name])
    return str(tree / name)


def long_run_script(big: str, small: str) -> list[dict]:
    """Twelve turns of reads, several per turn, some large; later turns quote lines of earlier results."""
    script = []
    for turn in range(12):
        start = 1 + 150 * turn
        calls = [
            {"name": "read_file", "arguments": {"path": big, "start_line": start, "end_line": start + 149}},
            {"name": "bash", "arguments": {"command": f"seq {turn} 400"}},
            {"name": "read_file", "arguments": {"path": small}},
        ]
        text = ""
        if turn == 2:  # quotes a line of turn 0's read in its text, and one of turn 1's in an edit's argument
            text = "The value I need is on the line `value_77 = 77 * 3  # line 77`."
            calls.append(
                {"name": "edit_file", "arguments": {"path": big, "old": "value_222 = 222 * 3", "new": "v = 0"}}
            )
        script.append({"text": text, "tool_calls": calls})
    return script


def test_a_long_run_at_a_small_budget_shows_every_latest_result_whole_and_keeps_quoted_lines(tmp_path):
    task_path = local_task(tmp_path)
    big, small = engine_file(tmp_path, "big.py", 1800), engine_file(tmp_path, "small.py", 40)
    ctx = runs.open_run(load_task(task_path), str(task_path))
    # small: room for the prompt, the latest turn and a dozen shortened turns, not for their results whole
    budget = context.request_tokens(first_messages(ctx), tool_specs()) + 17_000
    ctx.task.agent.context_budget_tokens = budget
    model = run(ctx, long_run_script(big, small), remove=False)  # the trees stay for the reads again
    recorded = {
        r["id"]: r["content"] for r in read_transcript(ctx.run_dir / "transcript.jsonl") if r["kind"] == "tool_result"
    }
    shortened_seen = 0
    for number, request in enumerate(model.requests[1:], start=1):
        latest = context.latest_turn_start(request)
        for message in request[latest + 1 :]:
            if message.role == "tool":  # every result of the latest turn, as porter recorded it
                assert message.content == recorded[message.tool_call_id], number
        for index, message in enumerate(request[:latest]):
            if message.role != "tool" or message.content == recorded[message.tool_call_id]:
                continue
            shortened_seen += 1
            check_shortened(request, index, recorded[message.tool_call_id], ctx)
        tokens = context.request_tokens(request, tool_specs())
        protected = context.request_tokens(request[:2] + request[latest:], tool_specs())
        assert tokens <= budget or tokens <= protected + 400, number  # over budget only by the latest turn
    assert shortened_seen > 20 and not any(context.ELIDED in m.content for m in model.requests[-1])  # none dropped
    final = "\n".join(m.content for m in model.requests[-1])
    assert "value_77 = 77 * 3  # line 77" in final and "value_222 = 222 * 3  # line 222" in final  # quoted
    assert "value_78 = 78 * 3" not in final  # its neighbours were not


def check_shortened(request: list[Message], index: int, original: str, ctx) -> None:
    """A shortened result keeps the original's head and tail lines, every line quoted since, and names a call
    that shows what it left out."""
    shown, lines = request[index].content.splitlines(), original.splitlines()
    note = shown[-1]
    assert note.startswith(context.SHORTENED) and shown[0] == lines[0][: context.LINE_CHARS]
    assert shown[-2] == lines[-1][: context.LINE_CHARS]
    quoted = context.later_quotes(request, index)
    for line in lines:
        body = line.split("  ", 1)[-1].strip()
        if (len(body) >= context.MIN_QUOTE and body in quoted.words) or any(span in line for span in quoted.spans):
            assert line in shown
    call = context.call_of(request, request[index].tool_call_id)
    if call.name == "read_file":  # the named read_file brings back every line left out
        arguments = json.loads(note.split("read_file ", 1)[1].rstrip("]"))
        again = file_tools.read_file(ctx, **arguments)[0].splitlines()
        assert {line for line in lines[1:] if line not in shown} <= set(again)
