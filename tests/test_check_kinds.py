"""A check kind is one declaration: a toy kind added as one module and one registry line reaches every reader.

The test copies the porter package, writes a kind module of its own (the latency of GET /v1/models against a
real HTTP server on 127.0.0.1) and adds its name to the registry's KIND_MODULES line, nothing else; then, in a
fresh interpreter, a task declaring that check validates, `run_check` offers it, the prompt states its
workload and cost, `porter check task` runs it and prints it as its kind renders it, and the target report
has its row. The built-in kinds are held to the same contract.
"""

from __future__ import annotations

import http.server
import json
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from porter.checks import registry
from porter.schema import Spec

ROOT = Path(__file__).resolve().parent.parent

TOY_KIND = '''
"""A toy check kind: how long GET /v1/models takes, in ms (lower is better)."""

import time
import urllib.request

from pydantic import Field

from porter.checks.kind import CheckKind
from porter.schema import PositiveFloat, Spec


class ToySpec(Spec):
    requests: int = Field(3, ge=1, description="GETs to time.")
    target_ms: PositiveFloat = Field(description="The slowest median the target allows.")


def run(base_url, spec, task, progress=None):
    times = []
    for _ in range(spec.requests):
        started = time.monotonic()
        urllib.request.urlopen(base_url + "/v1/models", timeout=5).read()
        times.append((time.monotonic() - started) * 1000)
    return {"median_ms": sorted(times)[len(times) // 2], "target_ms": spec.target_ms}


KIND = CheckKind(
    name="toy",
    description="the latency of GET /v1/models",
    spec=ToySpec,
    many=False,
    direction="lower",
    min_samples=1,
    run=run,
    headline=lambda spec: "median_ms",
    goal=lambda spec: spec.target_ms,
    met=lambda result, spec: result["median_ms"] <= spec.target_ms,
    label=lambda spec: "toy listing latency (ms)",
    render=lambda key, result: f"toy: GET /v1/models took {result['median_ms']:.1f} ms (median)",
    brief=lambda result: f"{result['median_ms']:.1f} ms",
    workload=lambda spec: f"toy: {spec.requests} GETs of /v1/models",
    cost=lambda spec, task: f"run_check toy: {spec.requests} GETs, milliseconds",
)
'''

PROBE = """
import json, subprocess, sys
from porter.checks import registry
from porter.schema import Spec
from porter.ledger.state import RunState, target_report
from porter.loop.prompt import cost_lines, workload_lines
from porter.loop.tools import tool_specs
from porter.task import load_task

task = load_task(sys.argv[1])
[run_check] = [spec for spec in tool_specs() if spec.name == "run_check"]
state = RunState("r", sys.argv[1], {}, {})
rows = target_report(task, state)
cli = subprocess.run(
    [sys.executable, "-m", "porter", "check", "task", sys.argv[1], sys.argv[2], "--kind", "toy"],
    capture_output=True, text=True,
)
print(json.dumps({
    "kinds": list(registry.KINDS),
    "enum": run_check.parameters["properties"]["kind"]["enum"],
    "description": run_check.description,
    "prompt": workload_lines(task) + cost_lines(task),
    "rows": [row.target for row in rows],
    "cli": [cli.returncode, cli.stdout, cli.stderr],
}))
"""


class Listing(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - the standard library's name
        body = json.dumps({"data": [{"id": "toy-model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Listing)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_a_toy_kind_added_as_one_module_and_one_registry_line_reaches_every_reader(tmp_path, server):
    package = tmp_path / "porter"
    shutil.copytree(ROOT / "porter", package, ignore=shutil.ignore_patterns("__pycache__"))
    (package / "checks" / "toy_kind.py").write_text(textwrap.dedent(TOY_KIND))
    registry_file = package / "checks" / "registry.py"
    before = registry_file.read_text()
    line = 'KIND_MODULES = ("quality_kind", "single_stream_kind", "throughput_kind")'
    assert before.count(line) == 1
    registry_file.write_text(before.replace(line, line.replace(")", ', "toy_kind")')))
    task = yaml_task(tmp_path)
    probe = subprocess.run(
        [sys.executable, "-c", PROBE, str(task), server], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert probe.returncode == 0, probe.stderr
    seen = json.loads(probe.stdout.splitlines()[-1])
    assert seen["kinds"][-1] == "toy" and "toy" in seen["enum"] and "GET /v1/models" in seen["description"]
    assert "  toy: 2 GETs of /v1/models" in seen["prompt"] and "- run_check toy: 2 GETs, milliseconds" in seen["prompt"]
    assert "toy listing latency (ms)" in seen["rows"]
    code, out, err = seen["cli"]
    assert code == 0 and "toy: GET /v1/models took" in out, err


def yaml_task(folder: Path) -> Path:
    text = (ROOT / "tasks" / "twin_glm52.yaml").read_text()
    data = __import__("yaml").safe_load(text)
    data["checks"] = {"toy": {"requests": 2, "target_ms": 5000}}
    data["tune"] = []
    path = folder / "toy.yaml"
    path.write_text(__import__("yaml").safe_dump(data))
    return path


@pytest.mark.parametrize("name", list(registry.KINDS))
def test_each_built_in_kind_renders_a_result_that_lacks_its_figures(name):
    """A check that failed part-way has few fields: its kind still renders it for the model, never a KeyError."""
    kind = registry.KINDS[name]
    key = f"{name}:set" if kind.many else name
    text = kind.render(key, {})
    assert text.strip() and (name.replace("_", " ") in text or key in text)
    assert issubclass(kind.spec, Spec) and kind.direction in ("higher", "lower")
