"""Fault injection on the server's lifecycle: orphans of a SIGKILLed porter, a taken port, a lying server.

The served "engine" is tests/sse_server.py launched by a local-sandbox task (its --itl-ms flag sets its
speed, so figures tell which server was measured); porter runs as a real subprocess and is SIGKILLed
mid-check, then resumed. No Docker needed: the local sandbox's process groups are host process groups.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from helpers import free_port
from sse_server import SseServer
from twin_tasks import run_with

from porter.engines import serve
from porter.evaluate import runs
from porter.ledger.transcript import read_state, read_transcript
from porter.models.scripted import ScriptedModel
from porter.sandbox import DockerSandbox
from porter.sandbox.local import LocalSandbox, kill_group_record
from porter.task import Task, load_task

ROOT = Path(__file__).resolve().parents[1]
SERVER = ROOT / "tests" / "sse_server.py"


def fake_engine_task(tmp_path: Path, port: int, command: str | None = None, itl_ms: int = 10) -> Path:
    data = {
        "name": "fault-serve",
        "model": {"id": "test/fake", "path": "/models/fake", "in_image": True, "overlay": False},
        "hardware": {"gpu": "none", "count": 1},
        "sandbox": {"kind": "local"},
        "serve": {
            "command": command
            or f"{sys.executable} {SERVER} --port {{port}} --served-model-name {{model_path}} {{flags}}",
            "port": port,
            "startup_timeout_s": 30,
            "flags": {"itl-ms": itl_ms},
            "tunables": {"itl-ms": [10, 40]},
        },
        "checks": {
            "single_stream": {"input_tokens": 8, "output_tokens": 300, "num_requests": 3, "target_output_tok_s": 1e6}
        },
        "outputs": {"runs_dir": str(tmp_path / "runs")},
    }
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def call(tool: str, **arguments) -> dict:
    return {"tool_calls": [{"name": tool, "arguments": arguments}]}


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pgid}/stat")
    return not stat.exists() or stat.read_text().rpartition(")")[2].split()[0] != "Z"


def wait_for(condition, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


def test_sigkill_mid_check_then_resume_kills_the_orphan_and_measures_the_new_server(tmp_path):
    port = free_port()
    task_path = fake_engine_task(tmp_path, port)
    first = [call("serve"), call("run_check", kind="single_stream"), {"sleep_s": 120, **call("finish", reason="no")}]
    second = [
        call("set_flags", flags={"itl-ms": 40}),
        call("serve"),
        call("run_check", kind="single_stream"),
        call("finish", reason="resumed and done"),
    ]
    (tmp_path / "first.yaml").write_text(yaml.safe_dump(first))
    (tmp_path / "second.yaml").write_text(yaml.safe_dump(second))
    # the stand-in engine is no real engine: preflight (image, parser, weights) has nothing to check on it
    porter = [sys.executable, "-m", "porter", "run", str(task_path), "--skip-preflight"]
    process = subprocess.Popen([*porter, "--provider", f"scripted:{tmp_path / 'first.yaml'}"], stderr=subprocess.PIPE)

    def serving_state():
        for state_file in (tmp_path / "runs").glob("*/state.json"):
            state = json.loads(state_file.read_text())
            if state["step"] >= 1 and state["server_process"]:
                return state_file.parent
        assert process.poll() is None, process.stderr.read()[-2000:]
        return None

    records: list[dict] = []
    try:
        run_dir = wait_for(serving_state, 60, "the first run to spawn its server")  # recorded before it is healthy
        wait_for(lambda: serve.port_taken(f"http://127.0.0.1:{port}"), 60, "the server to listen")
        time.sleep(2.5)  # into the single-stream check (3 requests of ~3 s each)
        process.send_signal(signal.SIGKILL)
        process.wait()
        records.append(read_state(run_dir)["server_process"])
        orphan = records[0]["pgid"]
        assert group_alive(orphan) and serve.port_taken(f"http://127.0.0.1:{port}")

        resumed = subprocess.run(
            [*porter, "--resume", str(run_dir), "--provider", f"scripted:{tmp_path / 'second.yaml'}"],
            capture_output=True,
            text=True,
            timeout=180,
        )
        state = read_state(run_dir)
        assert state["finished"] == "resumed and done", resumed.stdout[-2000:] + resumed.stderr[-2000:]
        assert not group_alive(orphan)
        assert not serve.port_taken(f"http://127.0.0.1:{port}")  # the resumed run's own server is gone too
        assert state["server_process"] is None
        notes = [r["text"] for r in read_transcript(run_dir / "transcript.jsonl") if r["kind"] == "note"]
        assert any("killed a server porter left running" in note for note in notes)
        # 40 ms between tokens is 25 tok/s; the orphan (10 ms) would have read ~100
        speeds = [sample["value"] for sample in state["samples"] if sample["key"] == "single_stream"]
        assert speeds and all(15 < speed < 30 for speed in speeds)
    finally:  # a failing run of this test must not leave its own orphans behind either
        if process.poll() is None:
            process.kill()
            process.wait()
        for state_file in (tmp_path / "runs").glob("*/state.json"):
            records.append(json.loads(state_file.read_text()).get("server_process") or {})
        for record in records:
            kill_group_record(record)


def test_a_taken_port_is_refused_before_launch(tmp_path):
    squatter = SseServer()
    try:
        port = int(squatter.url.rsplit(":", 1)[1])
        task = load_task(fake_engine_task(tmp_path, port))
        sandbox = LocalSandbox(task, tmp_path / "run", "fault-run")
        sandbox.start()
        spawned = []
        with pytest.raises(serve.ServerConflict, match="already taken"):
            serve.launch(sandbox, task, task.serve.flags, tmp_path / "serve.log", on_spawn=spawned.append)
        assert spawned == []  # nothing was started onto the taken port
    finally:
        squatter.stop()


def test_a_server_answering_under_another_name_is_not_healthy(tmp_path):
    port = free_port()
    foreign_pid = tmp_path / "foreign.pid"
    # the spawned command starts a foreign server in its own session, then idles: health answers, the id lies
    command = (
        f"setsid {sys.executable} {SERVER} --port {{port}} & "
        f"echo $! > {foreign_pid}; exec sleep 60 # --model-path {{model_path}} {{flags}}"
    )
    task = load_task(fake_engine_task(tmp_path, port, command=command))
    sandbox = LocalSandbox(task, tmp_path / "run", "fault-run")
    sandbox.start()
    spawned = []
    try:
        with pytest.raises(serve.ServerConflict, match="sse-test"):
            serve.launch(sandbox, task, task.serve.flags, tmp_path / "serve.log", on_spawn=spawned.append)
        assert not spawned[0].alive()  # porter stopped what it spawned
    finally:
        if foreign_pid.exists():
            os.kill(int(foreign_pid.read_text()), signal.SIGKILL)


def test_a_recorded_group_whose_pid_was_reused_is_left_alone(tmp_path):
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        record = {"sandbox": "local", "pgid": bystander.pid, "start_ticks": "1"}  # not the bystander's start
        sandbox = LocalSandbox(load_task(fake_engine_task(tmp_path, free_port())), tmp_path / "run", "fault-run")
        assert serve.kill_leftover(sandbox, record) is False
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def sleepers(sandbox) -> str:
    return sandbox.exec("ps -eo args | grep -c '^sleep 600$'", timeout=10).output.strip()


@pytest.mark.docker
def test_a_resumed_porter_kills_the_server_group_left_in_its_container(docker_client, tmp_path):
    task = Task.model_validate(
        {
            "name": "fault-orphan",
            "model": {"id": "test/model", "path": "/models/test", "in_image": True, "overlay": False},
            "hardware": {"gpu": "none", "count": 1},
            "sandbox": {"kind": "docker", "image": "porter-base:bookworm"},
            "serve": {"command": "true", "port": 8123},
        }
    )
    run_id = f"fault-orphan-{os.getpid()}"
    first = DockerSandbox(task, tmp_path / "run", run_id, client=docker_client)
    try:
        first.start()
        orphan = first.spawn("sleep 600 & sleep 600", tmp_path / "serve.log")
        wait_for(lambda: sleepers(first) == "2", 20, "the server group")
        record = orphan.record()
        # a new porter process: a new sandbox object for the same run finds the running container
        second = DockerSandbox(task, tmp_path / "run", run_id, client=docker_client)
        assert serve.kill_leftover(second, json.loads(json.dumps(record))) is True
        assert sleepers(second) == "0"
        assert serve.kill_leftover(second, record) is False  # already gone: nothing else is touched
    finally:
        first.stop(remove=True)


def test_a_server_that_dies_mid_check_leaves_no_sample(tmp_path):
    """The check ends (the requests after the death fail), but a dying server's figures are not evidence."""
    path = fake_engine_task(tmp_path, free_port())
    data = yaml.safe_load(path.read_text())
    data["serve"]["flags"]["exit-after"] = 1
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    ctx = run_with(path, ScriptedModel([call("serve"), call("run_check", kind="single_stream")]))
    check = [r for r in read_transcript(ctx.run_dir / "transcript.jsonl") if r["kind"] == "tool_result"][1]
    assert "the server exited" in check["content"] and "discarded" in check["content"], check["content"]
    assert ctx.state.samples == []


def test_runs_started_in_the_same_second_get_distinct_ids(tmp_path):
    task = load_task(fake_engine_task(tmp_path, free_port()))
    ids = [runs.new_run_dir(task)[1] for _ in range(20)]
    assert len(set(ids)) == 20
    assert all(re.fullmatch(r"fault-serve-\d{8}T\d{6}Z-playbook-[0-9a-f]{6}", run_id) for run_id in ids)


@pytest.mark.docker
def test_on_the_twin_a_sigkilled_porters_server_is_gone_after_resume(docker_client, tmp_path):
    """The row as reported: porter SIGKILLed mid-check in a Docker sandbox, resumed: one server, not two.

    The container of a dead porter is recreated on resume (porter/sandbox/docker.py), which ends the orphan
    with it; kill_recorded is the second line (its own test above) for a container that is kept.
    """
    from twin_tasks import build_twin, fast_twin_task, resume_scripted, tool_results

    build_twin()
    first = [call("serve"), call("run_check", kind="single_stream"), {"sleep_s": 120, **call("finish", reason="no")}]
    second = [
        call("serve"),
        call("bash", command="ps -eo args= | grep -c '^python3 -m twin.launch_server'"),
        call("finish", reason="resumed and done"),
    ]
    (tmp_path / "first.yaml").write_text(yaml.safe_dump(first))
    (tmp_path / "second.yaml").write_text(yaml.safe_dump(second))
    task_path = fast_twin_task(tmp_path)
    porter = [sys.executable, "-m", "porter", "run", str(task_path), "--skip-preflight"]
    process = subprocess.Popen([*porter, "--provider", f"scripted:{tmp_path / 'first.yaml'}"], stderr=subprocess.PIPE)

    def measuring():
        for transcript in (tmp_path / "runs").glob("*/transcript.jsonl"):
            if any(r["name"] == "serve" for r in tool_results(transcript.parent)):
                return transcript.parent
        assert process.poll() is None, process.stderr.read()[-2000:]
        return None

    run_dir = wait_for(measuring, 240, "the first run to be healthy and measuring")
    time.sleep(2)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert read_state(run_dir)["server_process"]["sandbox"] == "docker"
    try:
        resume_scripted(porter, run_dir, tmp_path / "second.yaml")
        results = tool_results(run_dir)
        assert results[-3]["name"] == "serve" and results[-3]["facts"]["healthy"] is True
        assert results[-2]["content"].split("\n", 1)[1].strip() == "1"  # the resumed run's server, no orphan
    finally:
        subprocess.run(["docker", "rm", "-f", f"porter-{read_state(run_dir)['run_id']}"], capture_output=True)
