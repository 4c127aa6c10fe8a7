"""Observation digests, ReplayModel against transcripts written the way the loop writes them, ScriptedModel."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from porter.models import (
    Message,
    ModelError,
    ReplayDivergence,
    ReplayModel,
    Reply,
    ScriptedModel,
    ToolCall,
    ToolSpec,
    Usage,
    messages_since_last_reply,
    observation_digest,
    observation_excerpt,
)

TOOLS = [ToolSpec("bash", "Run.", {"type": "object"}), ToolSpec("finish", "Stop.", {"type": "object"})]


def tool_result(text: str, call_id: str = "toolu_01") -> list[Message]:
    return [Message("tool", text, tool_call_id=call_id, name="bash")]


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("server up in 12.4s", "server up in 9.1s"),
        ("took 850 ms", "took 1200 ms"),
        ("at 2026-12-02T10:44:07.123Z done", "at 2026-12-03T01:02:03Z done"),
        ("log 10:44:07 start", "log 23:01:59 start"),
        ("wrote /tmp/pytest-of-root/pytest-7/run0/log.txt", "wrote /tmp/tmpab12cd/log.txt"),
        ("commit 3f9a1c27e1 applied", "commit 77be01d9aa applied"),
        ("container 0123456789abcdef0123", "container fedcba9876543210fedc"),
        ("listening on http://127.0.0.1:34567/v1", "listening on http://127.0.0.1:41234/v1"),
        ("--port 30001 ready", "--port 30417 ready"),
        ("server pid 4242 died", "server pid 977 died"),
        ("1461.3 tok/s", "1502.8 tok/s"),
        ("id 123e4567-e89b-12d3-a456-426614174000", "id 00000000-1111-2222-3333-444444444444"),
        ("trailing spaces   ", "trailing spaces"),
        ("-rw-r--r-- 1 root 4415 Dec  4 20:45 config.json", "-rw-r--r-- 1 root 4415 Dec 14 21:31 config.json"),
    ],
)
def test_volatile_parts_do_not_change_the_digest(first, second):
    assert observation_digest(tool_result(first)) == observation_digest(tool_result(second))


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("exit code 0", "exit code 1"),
        ("RuntimeError: shape mismatch", "ImportError: no module"),
        ("model.py:42: error", "model.py:43: error"),
        ("sglang 0.5.6", "sglang 0.5.7"),
        ("8 GPUs", "4 GPUs"),
    ],
)
def test_behaviour_changes_the_digest(first, second):
    assert observation_digest(tool_result(first)) != observation_digest(tool_result(second))


def read_log_result(total: int, shown: str, number: int = 19, goal: object = 0.93, matched: int = 1) -> list[Message]:
    text = f"serve-001.log (launch 1; launches [1]; {total} lines): {matched} lines match 'quant'\n{number:7d}  {shown}"
    target = {"target": "quality gsm8k", "goal": goal, "value": 0.76, "met": False}
    status = {"pending": False, "flags_changed": {}, "server": "healthy", "targets": [target]}
    facts = {"tool": "read_log", "ok": True, "launch": 1, "lines": total, "shown": 1, "status": status}
    return [Message("tool", text, tool_call_id="c1", name="read_log", facts=facts)]


def test_a_server_log_read_counts_what_it_found_not_which_lines_or_how_long():
    """The checks' traffic adds batch lines by timing and two streams interleave: a log read after them is 94 or
    96 lines long, a start-up line at 41 or 42, a progress line or a build line where the other was (a seat's
    replay of the same grep); what the read found is its header: the log, the launch, how many lines matched.
    porter's rendering of a goal is not the agent's doing either."""
    line = "Using Quark config from /models/glm/config.json (exclude: 7 patterns)"
    recorded = observation_digest(read_log_result(96, line))
    assert recorded == observation_digest(read_log_result(94, line, number=18, goal="0.96 - 0.03"))
    assert recorded == observation_digest(read_log_result(96, "[aiter] start build [mla_rope_and_cache]"))
    assert recorded != observation_digest(read_log_result(96, line, matched=2))
    met = read_log_result(96, line)
    met[0].facts["status"]["targets"][0]["met"] = True
    assert recorded != observation_digest(met)


def test_tool_call_ids_and_roles():
    assert observation_digest(tool_result("x", "toolu_A")) == observation_digest(tool_result("x", "call_B"))
    assert observation_digest([Message("user", "x")]) != observation_digest([Message("tool", "x")])


def test_messages_since_last_reply():
    history = [Message("system", "s"), Message("user", "u")]
    assert messages_since_last_reply(history) == history
    history += [Message("assistant", "a"), Message("tool", "t1"), Message("user", "u2")]
    assert [message.content for message in messages_since_last_reply(history)] == ["t1", "u2"]


def record_run(path: Path, observations: list[list[Message]], replies: list[Reply], torn_tail: bool = False) -> None:
    """A transcript as the loop writes it: request digest before each call, the reply after it."""
    lines = [{"seq": 1, "t": 0.0, "kind": "run_start"}]
    for step, (observed, reply) in enumerate(zip(observations, replies, strict=True), 1):
        lines.append({"kind": "model_request", "step": step, "digest": observation_digest(observed)})
        lines.append({"kind": "model_reply", "step": step, "reply": reply.to_dict()})
        lines.append({"kind": "tool_result", "step": step, "output": f"result of step {step}"})
    text = "\n".join(json.dumps(line) for line in lines) + "\n"
    path.write_text(text + ('{"kind": "model_req' if torn_tail else ""))


def recorded_session() -> tuple[list[list[Message]], list[Reply]]:
    call = ToolCall("toolu_1", "bash", {"command": "python3 -m sglang.launch_server"})
    observations = [
        [Message("system", "You port models."), Message("user", "Serve GLM-5.2.")],
        tool_result("RuntimeError: shape mismatch after 41.2 s", "toolu_1"),
    ]
    replies = [
        Reply("Launching.", [call], Usage(100, 20, cost_usd=0.001)),
        Reply("", [ToolCall("toolu_2", "finish", {"reason": "crash triaged"})], Usage(50, 5)),
    ]
    return observations, replies


@pytest.mark.parametrize("torn_tail", [False, True])
def test_replay_returns_recorded_replies_in_order(tmp_path, torn_tail):
    observations, replies = recorded_session()
    record_run(tmp_path / "transcript.jsonl", observations, replies, torn_tail)
    model = ReplayModel(tmp_path)  # a run directory works as well as the file
    conversation = list(observations[0])
    first = model.step(conversation, TOOLS)
    assert first == replies[0]
    conversation += [Message("assistant", first.text, tool_calls=first.tool_calls)]
    conversation += tool_result("RuntimeError: shape mismatch after 37.9 s", "toolu_other")  # timing differs
    assert model.step(conversation, TOOLS) == replies[1]


def test_replay_divergence_says_where_and_what(tmp_path):
    observations, replies = recorded_session()
    record_run(tmp_path / "t.jsonl", observations, replies)
    model = ReplayModel(tmp_path / "t.jsonl")
    conversation = observations[0] + [Message("assistant", "Launching.", tool_calls=replies[0].tool_calls)]
    model.step(observations[0], TOOLS)
    with pytest.raises(ReplayDivergence) as caught:
        model.step(conversation + tool_result("server healthy"), TOOLS)
    divergence = caught.value
    assert divergence.step == 2
    assert divergence.expected_digest == observation_digest(observations[1])
    assert divergence.actual_digest == observation_digest(tool_result("server healthy"))
    assert "result of step 1" in divergence.expected_excerpt  # from the recorded tool results
    assert "server healthy" in divergence.actual_excerpt
    assert "step 2" in str(divergence)


def test_replay_past_the_end_of_the_recording(tmp_path):
    observations, replies = recorded_session()
    record_run(tmp_path / "t.jsonl", observations[:1], replies[:1])
    model = ReplayModel(tmp_path / "t.jsonl")
    model.step(observations[0], TOOLS)
    with pytest.raises(ReplayDivergence, match="ends after 1 model calls"):
        model.step(observations[0] + [Message("assistant", "x")] + tool_result("more"), TOOLS)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("", "no model_request/model_reply pairs"),
        ('{"kind": "note"}\nnot json\n{"kind": "note"}\n', "t.jsonl:2: not a JSON record"),
    ],
)
def test_replay_rejects_unusable_transcripts(tmp_path, content, expected):
    path = tmp_path / "t.jsonl"
    path.write_text(content)
    with pytest.raises(ModelError, match=expected):
        ReplayModel(path)


def test_excerpt_is_short_and_normalised():
    excerpt = observation_excerpt(tool_result("took 3.5 s " + "x" * 1000))
    assert len(excerpt) <= 300 and "<duration>" in excerpt


def test_scripted_queue_faults_and_end(tmp_path):
    model = ScriptedModel(
        [
            {"text": "first", "tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}]},
            {"fault": "raise", "message": "provider exploded"},
            {"fault": "malformed"},
            {"fault": "empty"},
            {"tool_calls": [{"name": "bash", "arguments": "{not json"}]},
            {"text": "after a nap", "sleep_s": 0.01, "usage": {"input_tokens": 7}},
        ]
    )
    history = [Message("user", "go")]
    first = model.step(history, TOOLS)
    assert (first.text, first.tool_calls[0].arguments) == ("first", {"command": "ls"})
    with pytest.raises(ModelError, match="provider exploded"):
        model.step(history, TOOLS)
    assert "not valid JSON" in model.step(history, TOOLS).format_error
    assert "empty" in model.step(history, TOOLS).format_error
    assert "not valid JSON" in model.step(history, TOOLS).format_error
    napped = model.step(history, TOOLS)
    assert (napped.text, napped.usage.input_tokens) == ("after a nap", 7)
    ended = model.step(history, TOOLS)
    assert (ended.tool_calls[0].name, ended.tool_calls[0].arguments) == ("finish", {"reason": "script ended"})
    assert len(model.requests) == 7


@pytest.mark.parametrize(
    ("name", "content"),
    [("s.json", '[{"text": "from json"}]'), ("s.yaml", "replies:\n  - text: from yaml\n")],
)
def test_scripted_from_files(tmp_path, name, content):
    (tmp_path / name).write_text(content)
    assert ScriptedModel(tmp_path / name).step([Message("user", "go")], TOOLS).text.startswith("from")


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("- txt: typo\n", "unknown keys"),
        ("- fault: explode\n", "fault must be one of"),
        ("- tool_calls: [{arguments: {}}]\n", "needs a `name`"),
        ("text: not a list\n", "expected a list"),
        ("- [unclosed\n", "not valid YAML"),
    ],
)
def test_bad_scripts_name_the_problem(tmp_path, content, expected):
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    with pytest.raises(ModelError, match=expected):
        ScriptedModel(path)
