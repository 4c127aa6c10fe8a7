"""A check that cannot finish reaches the agent as a tool error it can read, and the run goes on.

A real local sandbox serves a real HTTP server that looks healthy but is no LLM server (/health answers
200 and /v1/models lists a model; every POST answers 501), so the serve tool succeeds and each check then
fails for a real reason: a dataset that is not there, a server that refuses the client's requests, a
server that has died.
"""

from __future__ import annotations

import pytest
from helpers import free_port

from porter.evaluate import runs
from porter.loop import tools
from porter.task import Task

STAND_IN = """
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

class Handler(BaseHTTPRequestHandler):
    def answer(self, status, body):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        listing = json.dumps({"object": "list", "data": [{"id": "stand-in", "object": "model"}]}).encode()
        self.answer(200, listing if self.path == "/v1/models" else b"ok")

    def do_POST(self):
        self.answer(501, b"not an LLM server")

HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""


def plain_http_task(tmp_path, dataset: str) -> Task:
    script = tmp_path / "stand_in_server.py"
    script.write_text(STAND_IN)
    return Task.model_validate(
        {
            "name": "check-errors",
            "model": {"id": "m", "path": "/m", "in_image": True, "overlay": False},
            "hardware": {"gpu": "MI355X", "count": 8},
            "sandbox": {"kind": "local"},
            "serve": {
                "command": f"exec python3 {script} {{port}}",
                "port": free_port(),
                "health_path": "/health",
                "startup_timeout_s": 30,
            },
            "checks": {
                "quality": [{"name": "gsm8k", "kind": "gsm8k", "dataset": dataset, "minimum": 0.5, "samples": 20}],
                "single_stream": {"input_tokens": 8, "output_tokens": 4, "num_requests": 1, "target_output_tok_s": 1},
            },
            "outputs": {"runs_dir": str(tmp_path / "runs")},
        }
    )


@pytest.fixture
def served(tmp_path):
    def start(dataset: str):
        ctx = runs.open_run(plain_http_task(tmp_path, dataset), "task.yaml")
        result = tools.dispatch(ctx, "serve", {})
        assert result.ok and "healthy" in result.text, result.text
        return ctx

    made = []
    yield lambda dataset="builtin:twin-gsm8k": made.append(start(dataset)) or made[-1]
    for ctx in made:
        ctx.stop_server()
        ctx.transcript.close()


def test_a_missing_dataset_is_named_to_the_agent(served, tmp_path):
    ctx = served(str(tmp_path / "evals" / "gsm8k.jsonl"))
    result = tools.dispatch(ctx, "run_check", {"kind": "quality"})
    assert not result.ok
    assert f"dataset file {tmp_path / 'evals' / 'gsm8k.jsonl'} does not exist" in result.text
    assert not (ctx.run_dir / "metrics.jsonl").exists()  # nothing half-measured is recorded


def test_a_server_refusing_the_client_is_a_tool_error(served):
    ctx = served()
    result = tools.dispatch(ctx, "run_check", {"kind": "quality"})
    assert not result.ok and "the quality check did not complete" in result.text and "501" in result.text
    assert "Traceback" not in result.text and "internal error" not in result.text.lower()


def test_a_server_that_died_says_serve_again(served):
    ctx = served()
    ctx.server.process.stop(grace_s=1)
    result = tools.dispatch(ctx, "run_check", {"kind": "quality"})
    assert not result.ok and "call serve again" in result.text
    result = tools.dispatch(ctx, "serve", {})  # the run goes on: the next tool call works
    assert result.ok, result.text
