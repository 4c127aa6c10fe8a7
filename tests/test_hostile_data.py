"""What a run reads and writes, attacked as a hostile server, model or recording would (issue #41's data side).

A server answering 302 to a second 127.0.0.1 port (standing in for an address only the host can reach) never gets
that address's answer to porter's probes or checks; text from the model lands escaped in what reviewers read; a
recording is data (never a command run on the host) and a malformed one ends in one line; a task's timeout that
is not a finite positive number is refused with its field path.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import re
import shutil
import subprocess
import sys
import threading

import pytest
import yaml
from local_tasks import open_local_run, run_local
from prepared_run import PreparedRun

from porter.checks import loadgen, quality
from porter.engines import serve
from porter.evaluate import corpus_eval
from porter.models import Message, ModelError, RetryPolicy
from porter.models.anthropic import AnthropicModel
from porter.models.openai import OpenAIModel
from porter.report.pr_draft import write_prs
from porter.report.run_report import write_report
from porter.sandbox.trees.tracked import commit_message

HOST_ONLY_SECRET = "host-only-7f3c9a1b2d4e"
PROVIDER_ANSWER = {  # both APIs' replies in one object: each SDK reads its own fields
    "id": "x",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": HOST_ONLY_SECRET}, "finish_reason": "stop"}],
    "type": "message",
    "role": "assistant",
    "content": [{"type": "text", "text": HOST_ONLY_SECRET}],
    "stop_reason": "end_turn",
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "input_tokens": 1, "output_tokens": 1},
}


class _Handler(http.server.BaseHTTPRequestHandler):
    """One behaviour per server: `redirect_to` set answers 302 there (same path); unset answers the secret."""

    redirect_to: str | None = None

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        if self.redirect_to:
            self.send_response(302)
            self.send_header("Location", self.redirect_to + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = json.dumps({"data": [{"id": HOST_ONLY_SECRET}], "choices": [{"text": HOST_ONLY_SECRET}]}).encode()
        if self.path.endswith(("/chat/completions", "/messages")):  # a provider's answer, OpenAI's and Anthropic's
            body = json.dumps(PROVIDER_ANSWER).encode()
        elif self.path.endswith("/completions"):
            body = b"data: " + json.dumps({"choices": [{"text": HOST_ONLY_SECRET}]}).encode() + b"\n\ndata: [DONE]\n\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


def _start(redirect_to: str | None) -> http.server.ThreadingHTTPServer:
    handler = type("Handler", (_Handler,), {"redirect_to": redirect_to})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def redirecting():
    """The server porter talks to (answering 302 to the other) and the host-only one; yields their URLs."""
    host_only = _start(None)
    host_only_url = f"http://127.0.0.1:{host_only.server_address[1]}"
    server = _start(host_only_url)
    yield f"http://127.0.0.1:{server.server_address[1]}", host_only_url
    for running in (server, host_only):
        running.shutdown()
        running.server_close()


def _loadgen(call):
    async def go():
        async with loadgen.make_session(2) as session:
            return await call(session)

    return asyncio.run(go())


def test_the_serve_probe_does_not_follow_a_redirect_off_the_servers_origin(redirecting):
    url, host_only_url = redirecting
    assert serve.served_ids(host_only_url) == [HOST_ONLY_SECRET]  # the stand-in answers whoever asks directly
    assert serve.served_ids(url) is None


def test_the_checks_do_not_follow_a_redirect_off_the_servers_origin(redirecting):
    url, _ = redirecting
    with pytest.raises(loadgen.CheckError) as refused:
        _loadgen(lambda session: loadgen.resolve_model(session, url, None))
    assert HOST_ONLY_SECRET not in str(refused.value)
    planned = loadgen.Planned(0, 0.0, "/v1/completions", json.dumps({"prompt": "hi", "stream": True}).encode())
    record = _loadgen(lambda session: loadgen.send_one(session, url, planned, 0.0))
    assert not record.ok and "porter follows no redirect" in record.error
    assert HOST_ONLY_SECRET not in json.dumps(record.__dict__, default=str)
    with pytest.raises(loadgen.CheckError) as refused:
        _loadgen(lambda session: quality.ask(session, url + "/v1/completions", {"prompt": "hi"}))
    assert HOST_ONLY_SECRET not in str(refused.value)


@pytest.mark.parametrize("provider", [OpenAIModel, AnthropicModel])
def test_the_model_clients_do_not_follow_a_redirect(redirecting, provider):
    url, _ = redirecting
    quick = RetryPolicy(max_attempts=1, initial_wait_s=0.01, max_wait_s=0.01)
    model = provider("m", "key", base_url=url + ("/v1" if provider is OpenAIModel else ""), retry=quick)
    with pytest.raises(ModelError) as refused:
        model.step([Message("user", "hi")], [])
    assert HOST_ONLY_SECRET not in str(refused.value)


def _porter(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "porter", *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def _one_line(done: subprocess.CompletedProcess, *expected: str) -> None:
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stdout + done.stderr
    assert done.stderr.startswith("porter: ") and done.stderr.count("\n") == 1, done.stderr
    for text in expected:
        assert text in done.stderr, done.stderr


RECORDED_STEPS = [
    {"seq": 1, "t": 0, "kind": "model_request", "step": 1, "digest": "d1", "excerpt": "start"},
    {"seq": 2, "t": 1, "kind": "model_reply", "reply": {"text": "", "tool_calls": [], "usage": {}}},
]


def _recording(folder, sandbox: dict, records: list | None = None, model: dict | None = None, **fields):
    """A crafted recording: its task is docker-run (an image no engine holds) plus `sandbox`'s host side."""
    folder.mkdir(parents=True)
    task = {
        "name": "crafted",
        "description": "A recording someone sent.",
        "model": model or {"id": "x/y", "path": "/models/y", "in_image": True, "overlay": False},
        "hardware": {"gpu": "none", "count": 1},
        "sandbox": {"image": "porter-no-such-image:crafted", **sandbox},
        "repos": [{"name": "engine", "path": "/engine"}],
        "serve": {"command": "serve {port}", "port": 18000},
        **fields,
    }
    (folder / "task.yaml").write_text(yaml.safe_dump(task))
    lines = [json.dumps(record) if not isinstance(record, str) else record for record in records or RECORDED_STEPS]
    (folder / "transcript.jsonl").write_text("\n".join(lines) + "\n")
    return folder


@pytest.mark.parametrize(
    ("sandbox", "field"),
    [
        ({"image_build": ["/bin/sh", "-c", "touch {marker}"]}, "sandbox.image_build"),
        ({"services": [{"name": "d", "command": ["/bin/sh", "-c", "touch {marker}"], "mount": "/d"}]}, "services"),
        ({"kind": "local", "local_setup": ["/bin/sh", "-c", "touch {marker}"]}, "sandbox.local_setup"),
        ({"mounts": [{"host": "/", "container": "/host"}]}, "sandbox.mounts"),
    ],
)
def test_a_recording_runs_nothing_on_the_host_under_replay_or_eval(tmp_path, sandbox, field):
    marker = tmp_path / "ran-on-the-host"
    sandbox = json.loads(json.dumps(sandbox).replace("{marker}", str(marker)))
    corpus = tmp_path / "corpus"
    recording = _recording(corpus / "sent", sandbox)
    _one_line(_porter("replay", str(recording), cwd=tmp_path), field, "--task")
    _one_line(_porter("eval", str(corpus), "--out", str(tmp_path / "evals"), cwd=tmp_path), field)
    assert not marker.exists()
    assert not (tmp_path / "runs").exists()  # refused before a run directory or a sandbox


def test_a_recording_reads_no_host_file_as_a_dataset(tmp_path):
    quality = {"name": "leak", "kind": "gsm8k", "dataset": "/etc/hostname", "few_shot": 0, "minimum": 0.5}
    recording = _recording(tmp_path / "sent", {}, checks={"quality": [quality]})
    _one_line(_porter("replay", str(recording), cwd=tmp_path), "checks.quality (/etc/hostname: a file porter reads)")


@pytest.mark.parametrize(
    ("records", "expected"),
    [
        ([RECORDED_STEPS[0], {"kind": "model_reply", "reply": "rm -rf /"}], "record 2 is not one porter writes"),
        ([{"kind": "model_request", "excerpt": "no digest"}], "record 1 is not one porter writes"),
        ([RECORDED_STEPS[0], {"kind": "model_reply", "reply": {"tool_calls": ["bash"]}}], "record 2"),
        ([RECORDED_STEPS[0], {"kind": "model_reply", "reply": {"text": 7}}], "record 2"),
    ],
)
def test_a_malformed_recording_ends_in_one_line(tmp_path, records, expected):
    recording = _recording(tmp_path / "sent", {}, records)
    _one_line(_porter("replay", str(recording), cwd=tmp_path), expected)


def test_a_huge_recording_is_refused_without_reading_it(tmp_path):
    recording = _recording(tmp_path / "sent", {})
    with open(recording / "transcript.jsonl", "r+b") as transcript:
        transcript.truncate(1 << 40)  # sparse: a terabyte on paper, nothing on disk
    _one_line(_porter("replay", str(recording), cwd=tmp_path), "larger than 256 MiB")


HOSTILE = (
    "done\n\n## Approved by the maintainers\n<!-- the rest is hidden --> [details](http://evil.example/x) "
    "| a | cell | <img src=x onerror=alert(1)> ![](http://evil.example/p.png) `open code"
)


class HostileRun(PreparedRun):
    """The prepared run, with the model's words (replies, accept summaries and reasons, the finish) made hostile."""

    def say(self, step: int, text: str, tool: str, **arguments) -> None:
        said = {
            name: f"{value} {HOSTILE}" if name in ("summary", "why") else value for name, value in arguments.items()
        }
        super().say(step, f"{text} {HOSTILE}", tool, **said)

    def finish(self) -> None:
        self.state.finished = HOSTILE
        self.save()


def test_the_models_words_land_escaped_in_the_report_the_page_and_the_pr_drafts(tmp_path):
    run = HostileRun(tmp_path).build()
    run.finish()
    write_report(run.run_dir)
    drafts = [path.read_text() for path in write_prs(run.run_dir)]
    for text in [(run.run_dir / "report.md").read_text(), *drafts]:
        # no Markdown of the model's acts: no heading, comment, HTML, link, image or table row of its own
        assert not re.search(r"^#+ Approved|(?<!\\)<(!--|img)|(?<!\\)\]\(http|^\| a \| cell", text, re.MULTILINE)
        assert "\\#\\# Approved by the maintainers \\<!--" in text  # shown as written, on one line
    rows = [line for line in (run.run_dir / "report.md").read_text().splitlines() if line.startswith("| 8 |")]
    assert rows and all(len(re.findall(r"(?<!\\)\|", row)) == 8 for row in rows)  # 7 cells: no pipe of the model's
    page = (run.run_dir / "report.html").read_text()
    assert "evil.example" not in re.sub(r">[^<]*<", "><", page)  # in no tag or attribute, only as text
    assert "<h2>Approved" not in page and "<!-- the rest" not in page


def test_the_models_reason_cannot_forge_a_section_of_a_commit_message():
    message = commit_message("Fix it", "the load", f"{HOSTILE}\n\nEvidence:\nthroughput +900%", "a.py", "none")
    assert [line for line in message.splitlines() if line.endswith(":") and not line.startswith(" ")] == [
        "What failed:",
        "Why:",
        "What changed:",
        "Evidence:",
    ]
    assert "\n    ## Approved by the maintainers\n" in message  # an indented block: as written, where it renders


def test_a_timeout_that_is_not_a_finite_positive_number_is_refused_with_its_field(tmp_path):
    _recording(tmp_path / "sent", {})
    task = yaml.safe_load((tmp_path / "sent" / "task.yaml").read_text())
    task["serve"]["startup_timeout_s"] = float("inf")
    task["tune"] = [{"name": "t", "command": "true", "timeout_s": float("nan")}]
    task["agent"] = {"limits": {"max_wall_hours": -1}}
    (tmp_path / "task.yaml").write_text(yaml.safe_dump(task))
    done = _porter("validate", "task.yaml", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    for field in (
        "serve.startup_timeout_s: Input should be a finite number",
        "tune[0].timeout_s",
        "agent.limits.max_wall_hours",
    ):
        assert field in done.stderr, done.stderr
    assert str(tmp_path) not in done.stderr  # the file as the user named it, no host path of porter's making


def test_a_recorders_name_lands_escaped_in_the_leaderboard(tmp_path, monkeypatch):
    (tmp_path / "recorder").mkdir()
    ctx = open_local_run(tmp_path / "recorder", model=f"seat {HOSTILE}")
    run_local(ctx, [{"tool_calls": [{"name": "finish", "arguments": {"reason": HOSTILE}}]}])
    (tmp_path / "corpus" / "sent").mkdir(parents=True)
    for name in ("task.yaml", "transcript.jsonl"):
        shutil.copy(ctx.run_dir / name, tmp_path / "corpus" / "sent" / name)
    monkeypatch.chdir(tmp_path)
    board = (corpus_eval.evaluate(tmp_path / "corpus", None, trusted=True) / "leaderboard.md").read_text()
    assert "seat done" in board  # the recorder's name is there, as text
    assert not re.search(r"^#+ Approved|(?<!\\)<(!--|img)|(?<!\\)\]\(http|^\| a \| cell", board, re.MULTILINE)
