"""Secrets kept out of what porter writes or sends as it writes or sends it, not only when a run is swept at its
close: the internal-error log, the conversation sent to the model (its own calls and text included), a server
log streamed by porter, and lines read from a server log (bounded in memory, however long a line the server
writes); and a tuning command's huge output compared by digest, never held whole. A real run on the local
sandbox with a real git tree (and a real container for the streamed log); the model is scripted."""

from __future__ import annotations

import io
import json
import os
import re
import time
import tracemalloc

import pytest
from local_tasks import open_local_run

from porter import redaction
from porter.loop import agent, serve_tools, tools
from porter.models import ScriptedModel
from porter.redaction import RedactingWriter, Secrets, redact
from porter.sandbox import DockerSandbox
from porter.task import Task, TuneSpec

SECRET = "zai-7f3c9a1b2d4e6f8091a2b3c4d5e6f708"  # under a name that only the value collection knows


@pytest.fixture
def ctx(tmp_path, monkeypatch):
    monkeypatch.setenv("ZAI_APIKEY", SECRET)
    context = open_local_run(tmp_path)  # collects the secrets of this environment
    yield context
    context.transcript.close()
    context.sandbox.stop(remove=True)
    monkeypatch.undo()
    redaction.collect()


def test_the_internal_error_log_is_redacted_as_it_is_written(ctx):
    @tools.tool("broken_for_test", "A tool whose handler has a bug.", {"token": {"type": "string"}})
    def broken(ctx, token):
        raise RuntimeError(f"cannot use {token}")

    try:
        result = tools.dispatch(ctx, "broken_for_test", {"token": SECRET})
    finally:
        del tools.TOOLS["broken_for_test"]
    assert result.facts["internal_error"] == "RuntimeError"
    log = (ctx.run_dir / "logs" / "porter-errors.log").read_text()
    assert "Traceback" in log and "cannot use [REDACTED:ZAI_APIKEY]" in log
    assert SECRET not in log


def test_the_models_own_calls_and_text_are_redacted_before_every_request(ctx):
    script = [
        {
            "text": f"I will try the key {SECRET}.",
            "tool_calls": [{"name": "bash", "arguments": {"command": f"printf %s {SECRET} | wc -c"}}],
        },
        {"tool_calls": [{"name": "finish", "arguments": {"reason": "done"}}]},
    ]
    model = ScriptedModel(script)
    agent.run_loop(ctx, model, redact)
    sent = json.dumps([message.to_dict() for message in model.requests[1]])
    assert SECRET not in sent
    assert "I will try the key [REDACTED:ZAI_APIKEY]." in sent and "printf %s [REDACTED:ZAI_APIKEY] | wc -c" in sent
    # The call itself ran with the model's own arguments: only what goes back to the model is redacted.
    result = next(m for m in model.requests[1] if m.role == "tool")
    assert result.content.split()[-1] == str(len(SECRET))
    for name in ("transcript.jsonl", "state.json"):
        assert SECRET not in (ctx.run_dir / name).read_text()


class _Kept(io.BytesIO):
    def close(self) -> None:  # keep the bytes readable after the writer closes its target
        pass


def test_a_stream_is_redacted_as_it_is_written_whatever_its_chunks():
    secrets = Secrets({"ZAI_APIKEY": SECRET})
    stream = f"starting\nkey={SECRET}\nready\n{SECRET} at the end".encode()
    for size in (1, 3, 7, 50):
        target = _Kept()
        writer = RedactingWriter(target, secrets)
        written = []
        for start in range(0, len(stream), size):
            writer.write(stream[start : start + size])
            written.append(target.getvalue())
        assert all(SECRET.encode() not in seen for seen in written)
        assert b"key=[REDACTED:ZAI_APIKEY]\nready\n" in written[-1]  # whole lines go out as they end
        writer.close()
        assert target.getvalue() == secrets.redact(stream.decode()).encode()


@pytest.mark.docker
def test_a_server_log_is_redacted_while_the_server_runs(docker_client, tmp_path, monkeypatch):
    monkeypatch.setenv("ZAI_APIKEY", SECRET)
    redaction.collect()
    task = Task.model_validate(
        {
            "name": "loud",
            "model": {"id": "test/model", "path": "/models/test", "in_image": True, "overlay": False},
            "hardware": {"gpu": "none", "count": 1},
            "sandbox": {"kind": "docker", "image": "porter-base:bookworm", "network": "none"},
            "repos": [],
            "serve": {"command": "true", "port": 8123},
        }
    )
    run_id = re.sub(r"[^a-z0-9]+", "-", f"test-loud-log-{os.getpid()}")
    box = DockerSandbox(task, tmp_path / run_id, run_id, client=docker_client)
    log = tmp_path / "serve-000.log"
    head, tail = SECRET[:12], SECRET[12:]  # the server prints the secret in two writes, half a second apart
    try:
        box.start()
        process = box.spawn(f"printf %s {head}; sleep 0.5; printf '%s\\nup\\n' {tail}; sleep 60", log)
        for _ in range(200):
            if log.exists() and b"up" in log.read_bytes():
                break
            time.sleep(0.05)
        text = log.read_text()  # read while the server runs: porter killed now would leave this on disk
        assert text == "[REDACTED:ZAI_APIKEY]\nup\n"
        process.stop(grace_s=1)
    finally:
        box.stop(remove=True)
        monkeypatch.undo()
        redaction.collect()


def test_server_log_lines_reach_the_model_redacted_and_bounded(ctx):
    logs = ctx.run_dir / "logs"
    logs.mkdir(exist_ok=True)
    with open(logs / "serve-001.log", "w") as log:  # as a local server writes it: porter never saw these bytes
        log.write("a" * (64 << 20))  # one 64 MiB line: read whole, it alone would take 64 MiB of porter's memory
        log.write(f"\nERROR auth failed for key {SECRET}\nattention backend: triton\n")
    tracemalloc.start()
    try:
        found = tools.dispatch(ctx, "read_log", {"grep": "auth failed"})
        mentions = serve_tools.flag_mentions(logs / "serve-001.log", ["attention-backend"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"reading the log took {peak:,} bytes"
    assert "      2  ERROR auth failed" in found.text
    assert mentions == {"attention-backend": ["attention backend: triton"]}
    script = [
        {"tool_calls": [{"name": "read_log", "arguments": {"grep": "auth failed"}}]},
        {"tool_calls": [{"name": "finish", "arguments": {"reason": "done"}}]},
    ]
    model = ScriptedModel(script)
    agent.run_loop(ctx, model, redact)
    shown = next(m for m in model.requests[1] if m.role == "tool").content
    assert "ERROR auth failed for key [REDACTED:ZAI_APIKEY]" in shown and SECRET not in shown
    assert SECRET not in (ctx.run_dir / "transcript.jsonl").read_text()


def test_a_tuning_command_that_writes_a_huge_file_is_compared_without_holding_its_diff(ctx):
    # 32 MiB of text, one line: `git diff` of it, held whole (twice), would cost porter far more than the cap
    write = "head -c 33554432 /dev/zero | tr '\\0' a > big.txt"
    ctx.task.tune.append(TuneSpec(name="big", command=write, workdir=ctx.task.repos[0].path))
    tracemalloc.start()
    try:
        result = tools.dispatch(ctx, "tune", {"name": "big"})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.ok and 'it changed {"engine": ["big.txt"]}' in result.text
    assert peak < 8 << 20, f"comparing the tree took {peak:,} bytes"
    again = tools.dispatch(ctx, "tune", {"name": "big"})
    assert "it changed no file" in again.text
