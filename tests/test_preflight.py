"""`porter preflight` on the twin: it passes as shipped, and each kind of mistake fails it, named.

Runs the real CLI against the twin's image (built by its own script), so the engine's own argument
parser is the one asked; the local-sandbox variant lays the twin out without Docker.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
import yaml
from helpers import free_port
from twin_tasks import ROOT, build_twin, task_data

TWIN_TASK = ROOT / "tasks" / "twin_glm52.yaml"


def preflight(tmp_path, *extra: str, **changes) -> subprocess.CompletedProcess:
    """`porter preflight` on twin_glm52.yaml with dotted-path `changes` (a value of None deletes the key)."""
    data = task_data(TWIN_TASK)
    data["serve"]["port"] = free_port()  # --sandbox local serves on the host: test workers run side by side
    for dotted, value in changes.items():
        *parents, last = dotted.split(".")
        node = data
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        node[last] = value
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    command = [sys.executable, "-m", "porter", "preflight", str(path), *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=dict(os.environ))


def failed_lines(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stdout.splitlines() if " FAILED " in line]


@pytest.fixture(scope="module")
def twin_image():
    return build_twin()


@pytest.mark.docker
def test_the_twin_task_passes(twin_image, tmp_path):
    result = preflight(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not failed_lines(result)
    table = result.stdout
    # the twin's launcher is not an sglang package: no release to read, the task's spellings are checked
    assert "serve flags" in table and "accepted by the parser of no release read" in table
    assert "tune moe-fp4   ok" in table and "sha256 " in table
    assert "devices        skipped" in table  # the twin simulates its GPUs; said, not hidden


@pytest.mark.docker
@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"serve.flags.mem-fraction-statik": 0.8}, "unrecognized arguments: --mem-fraction-statik 0.8"),
        ({"serve.tunables.kv-cache-dtype": ["auto", "fp8_e4m3", "fp8_e4m3x"]}, "tunable kv-cache-dtype=fp8_e4m3x"),
        ({"serve.flags.mem-fraction": 0.8}, "--mem-fraction is not one of the engine's option names"),
        ({"checks.quality.0.dataset": "/nonexistent/evals/gsm8k/test.jsonl"}, "/nonexistent/evals/gsm8k/test.jsonl"),
        (
            {"tune.0.command": "python3 -m twin.tune_moe_v2 --model-dim 6144"},
            "module twin.tune_moe_v2 not found in the sandbox",
        ),
        (
            {"sandbox.image": "porter-twin:no-such-scenario"},
            "image porter-twin:no-such-scenario not found locally; porter never pulls",
        ),
        ({"model.path": "/models/no-such-checkpoint"}, "/models/no-such-checkpoint/config.json or its first shard"),
        ({"sandbox.devices": ["/dev/null"]}, "neither amd-smi nor rocm-smi is in the image"),
        (
            {"sandbox.mounts": [{"host": "/nonexistent/porter-cache", "container": "/root/.cache"}]},
            "/nonexistent/porter-cache does not exist on this host",
        ),
        (
            {"agent.provider": "anthropic", "agent.model": "m", "agent.api_key_env": "PORTER_TEST_UNSET_KEY"},
            "set the environment variable PORTER_TEST_UNSET_KEY",
        ),
    ],
    ids=[
        "typo-flag",
        "bad-tunable-value",
        "abbreviated-flag",
        "missing-dataset",
        "missing-tuner",
        "missing-image",
        "missing-weights",
        "no-gpu-tools",
        "missing-mount",
        "unset-api-key",
    ],
)
def test_each_mistake_fails_preflight_naming_it(twin_image, tmp_path, changes, named):
    result = preflight(tmp_path, **changes)
    assert result.returncode == 2, result.stdout + result.stderr
    assert any(named in line for line in failed_lines(result)), result.stdout
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.docker
def test_a_missing_dataset_says_how_to_get_it(twin_image, tmp_path):
    result = preflight(tmp_path, **{"checks.quality.0.dataset": str(tmp_path / "evals" / "gsm8k.jsonl")})
    assert f"fix: porter data get gsm8k --out {tmp_path / 'evals'}" in result.stdout


def test_the_local_sandbox_passes_and_asks_the_same_parser(tmp_path):
    result = preflight(tmp_path, "--sandbox", "local")
    assert result.returncode == 0, result.stdout + result.stderr
    result = preflight(tmp_path, "--sandbox", "local", **{"serve.flags.tp-sise": 8})
    assert result.returncode == 2, result.stdout + result.stderr
    (flag_failure,) = [line for line in failed_lines(result) if "serve flags" in line]  # said once, not per variant
    assert "baseline flags" in flag_failure and "unrecognized arguments: --tp-sise 8" in flag_failure


@pytest.mark.docker
def test_a_busy_host_port_fails_and_a_set_key_is_not_shown(twin_image, tmp_path):
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        changes = {"sandbox.network": "host", "serve.port": port, "agent.provider": "anthropic", "agent.model": "m"}
        changes["agent.api_key_env"] = "PORTER_TEST_SET_KEY"
        os.environ["PORTER_TEST_SET_KEY"] = "sk-test-value-never-shown"
        try:
            result = preflight(tmp_path, **changes)
        finally:
            del os.environ["PORTER_TEST_SET_KEY"]
    assert any(f"port {port} is in use on this host" in line for line in failed_lines(result)), result.stdout
    assert "PORTER_TEST_SET_KEY is set (value not shown)" in result.stdout
    assert "sk-test-value-never-shown" not in result.stdout + result.stderr
