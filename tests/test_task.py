"""Task files: the shipped ones validate, malformed ones fail with file, line, field and expectation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from porter.task import Task, TaskError, load_task, render_flags

ROOT = Path(__file__).resolve().parents[1]

MINIMAL = """\
name: demo
model:
  id: org/demo
  path: /models/demo
hardware: {gpu: MI355X, count: 8}
sandbox:
  kind: docker
  image: porter-base:bookworm
repos:
  - {name: engine, path: /src/engine}
serve:
  command: python3 -m engine.serve --model-path {model_path} --port {port} {flags}
  port: 30000
  flags: {tp: 8, kv-cache-dtype: auto}
  tunables: {tp: [8, 4]}
checks:
  throughput:
    workload: {input_tokens: 2000, output_tokens: 100, cache_hit_rate: 0.6, duration_s: 10}
    rps: [1, 2]
    slo: {ttft_s: 5}
    metric: output_throughput
    target_tok_s_per_node: 100
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "task.yaml"
    path.write_text(text)
    return path


def test_minimal_task_loads_with_defaults(tmp_path):
    task = load_task(write(tmp_path, MINIMAL))
    assert task.sandbox.network == "none"
    assert task.agent.provider == "playbook"
    assert task.checks.throughput.slo.percentile == 99
    assert task.repo("engine").path == "/src/engine"


@pytest.mark.parametrize("path", sorted((ROOT / "tasks").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_tasks_validate(path):
    task = load_task(path, environ={})
    assert task.name


def test_glm52_task_is_the_story():
    task = load_task(ROOT / "tasks" / "glm52_mi355x.yaml", environ={})
    assert task.hardware.gpu == "MI355X" and task.hardware.count == 8
    assert "/dev/kfd" in task.sandbox.devices and "/dev/dri" in task.sandbox.devices
    assert task.serve.flags["tp-size"] == 8
    assert set(task.serve.tunables["kv-cache-dtype"]) == {"auto", "fp8_e4m3"}
    assert 5 in task.serve.tunables["speculative-num-steps"]
    assert 6 in task.serve.tunables["speculative-num-draft-tokens"]
    workload = task.checks.throughput.workload
    assert (workload.input_tokens, workload.output_tokens, workload.cache_hit_rate) == (20000, 1000, 0.6)
    assert task.checks.throughput.slo.ttft_s == 5
    assert task.checks.throughput.target_tok_s_per_node == 2626
    assert task.checks.throughput.metric == "output_throughput"
    assert task.checks.single_stream.target_output_tok_s == 213
    assert {check.name for check in task.checks.quality} == {"gsm8k", "gpqa-diamond"}
    # aiter looks a tuned config up per padded M (every power of two to 32768), keyed by the expert width one TP rank
    # holds and the fused shared expert (E=257, topk=9): the untuned list names them all
    tune = task.tune[0].command
    assert all(part in tune for part in ("6144", "256 512 1024", ",257,9,", " 1 2 4 8 ", " 16384 32768"))
    assert "--last" not in tune


def test_render_flags():
    words = render_flags({"tp": 4, "dp": 2, "enable-aiter-allreduce-fusion": True, "x": False, "y": None})
    assert words == ["--tp", "4", "--dp", "2", "--enable-aiter-allreduce-fusion"]


def test_interpolation_uses_environment_and_defaults(tmp_path):
    text = MINIMAL.replace("/models/demo", "${WEIGHTS}/demo").replace("porter-base:bookworm", "${IMG:-base:1}")
    task = load_task(write(tmp_path, text), environ={"WEIGHTS": "/data"})
    assert task.model.path == "/data/demo"
    assert task.sandbox.image == "base:1"


def test_relative_dockerfile_resolves_against_the_task_file(tmp_path):
    text = MINIMAL.replace("image: porter-base:bookworm", "dockerfile: docker/Dockerfile")
    task = load_task(write(tmp_path, text))
    assert task.sandbox.dockerfile == str(tmp_path / "docker" / "Dockerfile")


AT, NEXT = "at", "next"  # the line the bad text starts on, or the line after it; "key:" = that top-level key

# Each case: (what to change in MINIMAL, expected line, expected field path, words the message must contain).
MALFORMED = {
    "yaml_syntax": (("  port: 30000", "  port: [30000"), None, "", "YAML syntax error"),
    "unknown_key": (("  port: 30000", "  prot: 1\n  port: 30000"), AT, "serve.prot", "unknown field"),
    "wrong_type": (("count: 8", "count: eight"), AT, "hardware.count", "integer"),
    "missing_required": (("hardware: {gpu: MI355X, count: 8}\n", ""), 1, "hardware", "required field is missing"),
    "bad_enum": (("kind: docker", "kind: podman"), AT, "sandbox.kind", "'docker' or 'local'"),
    "unset_var": (
        ("/models/demo", "${PORTER_TEST_UNSET_VAR}"),
        AT,
        "model.path",
        "${PORTER_TEST_UNSET_VAR} is not set",
    ),
    "port_out_of_range": (("port: 30000", "port: 70000"), AT, "serve.port", "less than or equal to 65535"),
    "negative_target": (
        ("target_tok_s_per_node: 100", "target_tok_s_per_node: -5"),
        AT,
        "checks.throughput.target_tok_s_per_node",
        "greater than 0",
    ),
    "empty_serve_command": (
        ("command: python3 -m engine.serve --model-path {model_path} --port {port} {flags}", 'command: "  "'),
        AT,
        "serve.command",
        "serve command is empty",
    ),
    "duplicate_repo": (
        (
            "  - {name: engine, path: /src/engine}",
            "  - {name: engine, path: /src/engine}\n  - {name: engine, path: /src/other}",
        ),
        "repos:",
        "repos",
        "duplicate repo name 'engine'",
    ),
    "tunable_not_a_flag": (
        ("tunables: {tp: [8, 4]}", "tunables: {tp: [8, 4], dp: [1, 2]}"),
        "serve:",
        "serve",
        "tunables ['dp'] are not flags",
    ),
    "cache_hit_rate_one": (
        ("cache_hit_rate: 0.6", "cache_hit_rate: 1.0"),
        AT,
        "checks.throughput.workload.cache_hit_rate",
        "less than 1",
    ),
    "cache_hit_rate_negative": (
        ("cache_hit_rate: 0.6", "cache_hit_rate: -0.1"),
        AT,
        "checks.throughput.workload.cache_hit_rate",
        "greater than or equal to 0",
    ),
    "duplicate_key": (("  port: 30000", "  port: 30001\n  port: 30000"), NEXT, "serve.port", "duplicate key"),
    "image_and_dockerfile": (
        ("  image: porter-base:bookworm", "  image: a\n  dockerfile: b"),
        "sandbox:",
        "sandbox",
        "exactly one of `image` or `dockerfile`",
    ),
    "top_level_list": (("name: demo", "- name: demo"), None, "", ""),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_task_names_file_line_field(tmp_path, case):
    (old, new), line, field_path, words = MALFORMED[case]
    assert old in MINIMAL, f"test case {case} does not apply to MINIMAL"
    text = MINIMAL.replace(old, new, 1)
    path = write(tmp_path, text)
    if line in (AT, NEXT):
        line = text[: text.index(new)].count("\n") + (1 if line == AT else 2)
    elif isinstance(line, str):
        line = text.split("\n").index(line) + 1
    with pytest.raises(TaskError) as caught:
        load_task(path, environ={})
    message = str(caught.value)
    assert message.startswith(str(path))
    assert words in message
    if line is not None:
        assert f"{path}:{line}: {field_path}:" in message, message


def test_cli_validate_ok_and_bad_exit_codes(tmp_path):
    ok = subprocess.run(
        [sys.executable, "-m", "porter", "validate", str(ROOT / "tasks" / "glm52_mi355x.yaml")],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stderr
    assert yaml.safe_load(ok.stdout)["name"] == "glm52-mi355x"
    # the engine is given the checkpoint's path inside the container (the overlay's mount), never the host's
    serve_line = next(line for line in ok.stdout.splitlines() if line.startswith("# serve command: "))
    assert "python3 -m sglang.launch_server --model-path /models/GLM-5.2-MXFP4 " in serve_line
    assert "--tp-size 8" in serve_line and "/data/models" not in serve_line
    assert "-v RUN_DIR/repos/model:/models/GLM-5.2-MXFP4" in ok.stdout
    assert "-v /data/models/GLM-5.2-MXFP4:/porter/weights:ro" in ok.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "porter", "validate", str(write(tmp_path, "name: [unclosed"))],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr and "YAML syntax error" in bad.stderr
    missing = subprocess.run(
        [sys.executable, "-m", "porter", "validate", str(tmp_path / "nope.yaml")],
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2 and "cannot read the task file" in missing.stderr


def test_task_models_forbid_extra_fields():
    data = yaml.safe_load(MINIMAL)
    data["agent"] = {"provider": "openai", "limits": {"max_steps": 3, "max_dollars": 1}}
    with pytest.raises(Exception, match="max_dollars"):
        Task.model_validate(data)


@pytest.mark.parametrize(
    ("content", "line"),
    [
        (b"name: caf\xe9\n", 1),  # Latin-1 text
        (b"name: demo\nmodel: {id: m}\n\xff\xfe\x00\x01binary", 3),
        (bytes(range(256)) * 4, 2),  # NUL..DEL are valid UTF-8; byte 10 is a newline, 0x80 is not
    ],
)
def test_non_utf8_task_file_gets_one_line(tmp_path, content, line):
    path = tmp_path / "task.yaml"
    path.write_bytes(content)
    result = subprocess.run(
        [sys.executable, "-m", "porter", "validate", str(path)],
        capture_output=True,
        text=True,
        errors="replace",
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert f"{path}:{line}: not UTF-8 text" in result.stderr
