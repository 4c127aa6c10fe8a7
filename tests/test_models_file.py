"""Anyone can be the model: `file:DIR` driven by a responder thread (through the real `porter run` command on
the local sandbox), and `human` driven through its input and output streams."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from local_tasks import local_task

from porter.models import ModelError, ToolSpec
from porter.models.file import FileModel, HumanModel

TOOLS = [ToolSpec("bash", "run", {"type": "object", "properties": {"command": {"type": "string"}}})]


class Responder(threading.Thread):
    """Another program in the model's seat: answers request-N.json with the next scripted reply."""

    def __init__(self, directory: Path, replies: list[dict]):
        super().__init__(daemon=True)
        self.directory, self.replies = directory, replies
        self.requests: list[dict] = []
        self.closed: dict | None = None

    def run(self) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and self.closed is None:
            closed = self.directory / "closed.json"
            request = self.directory / f"request-{len(self.requests) + 1}.json"
            if request.is_file():
                self.requests.append(json.loads(request.read_text()))
                reply = self.replies[len(self.requests) - 1]
                scratch = self.directory / "reply.tmp"
                scratch.write_text(json.dumps(reply))
                os.replace(scratch, self.directory / request.name.replace("request", "reply"))
            elif closed.is_file():
                self.closed = json.loads(closed.read_text())
            time.sleep(0.05)


def test_porter_run_with_a_file_provider_end_to_end(tmp_path):
    exchange = tmp_path / "exchange"
    responder = Responder(
        exchange,
        [
            {"text": "look around", "tool_calls": [{"name": "bash", "arguments": {"command": "echo hello-from-bash"}}]},
            {"tool_calls": [{"name": "set_flags", "arguments": {"flags": [["tp", 1]]}}]},
            {"tool_calls": [{"name": "finish", "arguments": {"reason": "done looking"}}]},
        ],
    )
    responder.start()
    task = local_task(tmp_path)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "porter.commands.cli",
            "run",
            str(task),
            "--skip-preflight",
            "--provider",
            f"file:{exchange}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    responder.join(timeout=30)
    assert done.returncode == 1, done.stderr[-2000:]  # ended without meeting targets: the task declares none
    first, second, third = responder.requests
    assert first["messages"][0]["role"] == "system" and {t["function"]["name"] for t in first["tools"]} >= {"bash"}
    assert first["reply_to"] == "reply-1.json"
    assert "hello-from-bash" in second["messages"][-1]["content"]
    assert second["messages"][-2]["tool_calls"][0]["function"]["name"] == "bash"
    assert "bad arguments for set_flags" in third["messages"][-1]["content"]
    assert responder.closed["finished"] == "done looking" and responder.closed["solved"] is False
    assert responder.closed["messages"][-1]["content"].startswith("finishing: done looking")


def test_a_missing_reply_ends_in_a_model_error_after_the_bounded_wait(tmp_path):
    model = FileModel(tmp_path, timeout_s=0.3, poll_s=0.05)
    with pytest.raises(ModelError, match=r"no reply-1.json .* within 0 s .*--resume"):
        model.step([], TOOLS)
    assert (tmp_path / "request-1.json").is_file()
    resumed = FileModel(tmp_path, timeout_s=0.3, poll_s=0.05)
    (tmp_path / "reply-2.json").write_text('{"text": "hi", "tool_calls": "nope"}')
    reply = resumed.step([], TOOLS)
    assert "the reply must be" in reply.format_error and resumed.number == 2


def test_a_reply_that_stays_broken_is_a_format_error(tmp_path):
    (tmp_path / "reply-1.json").write_text('{"text": "half')
    reply = FileModel(tmp_path, timeout_s=0.3, poll_s=0.05).step([], TOOLS)
    assert "reply-1.json is not valid JSON" in reply.format_error and not reply.tool_calls


def test_a_human_at_the_terminal():
    typed = io.StringIO('\nbash {"command": "ls"}\n')
    shown = io.StringIO()
    reply = HumanModel(typed, shown).step([], TOOLS)
    assert reply.tool_calls[0].name == "bash" and reply.tool_calls[0].arguments == {"command": "ls"}
    assert "Tools: bash" in shown.getvalue() and "e.g. bash" in shown.getvalue()
    assert HumanModel(io.StringIO("say thinking aloud\n"), io.StringIO()).step([], TOOLS).text == "thinking aloud"
    with pytest.raises(ModelError, match="end of input"):
        HumanModel(io.StringIO(""), io.StringIO()).step([], TOOLS)
