"""The loop's faults on the twin in a real Docker sandbox, driven by a scripted agent: each test drives a short
run into one failure: provider errors, bad patches and paths, a killed container, porter SIGKILLed and resumed,
a server that hangs at start-up. (The story itself: test_loop.py. Separate files so pytest-xdist can run the
story and the faults on different workers.)
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from fake_provider import Action, FakeProvider
from twin_tasks import (
    SPEC_314,
    build_twin,
    call,
    facts,
    fast_twin_task,
    fix,
    resume_scripted,
    run_scripted,
    run_with,
    tool_results,
)

from porter.ledger.transcript import read_state, read_transcript

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def twin_image(docker_client) -> str:
    return build_twin()


QUANT_CONFIG = "/models/glm-5.2-mxfp4-overlay/config.json"  # the checkpoint's config.json in the model overlay


def test_the_server_that_was_accepted_is_measured_without_a_restart(twin_image, tmp_path):
    script = [
        call("serve"),
        call("run_check", kind="single_stream"),
        call("set_flags", flags=SPEC_314),
        fix("a-quark-exclude-mtp.patch"),  # a commit when kept: HEAD moves, the running tree does not
        call("serve"),
        call("run_check", kind="single_stream"),
        call("accept", summary="Speculative decoding, with the MTP shared expert excluded under the engine's name"),
        call("run_check", kind="single_stream"),  # the accepted server as it runs: no restart needed
    ]
    ctx = run_scripted(fast_twin_task(tmp_path), script)
    results = tool_results(ctx.run_dir)
    assert results[6]["content"].startswith("kept by rule"), results[6]["content"]
    assert results[7]["ok"] and results[7]["content"].startswith("single stream:"), results[7]["content"]
    assert ctx.state.relaunches == 2


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_provider_errors_mid_run_are_retried_and_the_key_never_leaks(twin_image, tmp_path, monkeypatch, provider):
    secret = "sk-test-" + "k" * 24
    monkeypatch.setenv("PORTER_TEST_KEY", secret)
    with FakeProvider() as fake:
        fake.reply(tool_calls=[("serve", {})], input=900, output=40)
        fake.push(Action(status=429, headers={"retry-after": "0.1"}), Action(status=500))
        fake.reply(tool_calls=[("finish", {"reason": "healthy is enough here"})], input=1200, output=30)
        task_path = fast_twin_task(
            tmp_path,
            **{
                "agent.provider": provider,
                "agent.model": "claude-sonnet-4-5" if provider == "anthropic" else "gpt-5.5",
                "agent.base_url": fake.url + ("" if provider == "anthropic" else "/v1"),
                "agent.api_key_env": "PORTER_TEST_KEY",
            },
        )
        ctx = run_with(task_path)
        assert len(fake.requests) == 4  # the 429 and the 500 were retried, then the run went on
    assert ctx.state.finished == "healthy is enough here"
    assert facts(tool_results(ctx.run_dir)[0])["healthy"] is True
    assert ctx.state.tokens.input == 2100 and ctx.state.cost_known
    for path in ctx.run_dir.rglob("*"):
        if path.is_file() and path.suffix in (".jsonl", ".json", ".log", ".yaml"):
            assert secret not in path.read_text(errors="replace"), path


def test_bad_patches_and_paths_are_refused_and_change_nothing(twin_image, tmp_path):
    quant = QUANT_CONFIG
    script = [
        call("apply_patch", repo="twin", patch="--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-x\n+y\n"),
        call("edit_file", path="/etc/passwd", old="root", new="toor"),
        call("edit_file", path=quant, old='"model.layers.78.mlp.shared_experts"', new="x"),
        call("edit_file", path="/sgl-workspace/twin/../../etc/passwd", old="root", new="toor"),
        call("set_flags", flags={"tp": 3}),
        {"tool_calls": [{"name": "no_such_tool", "arguments": {}}]},
    ]
    ctx = run_scripted(fast_twin_task(tmp_path), script)
    results = [r["content"] for r in tool_results(ctx.run_dir)]
    assert "the patch does not apply to repo 'twin'; nothing was changed" in results[0]
    assert "outside the repos porter may change" in results[1]
    # the nearest lines of the checkpoint's exact-name exclude list (as Quark's export writes it)
    assert "was not found" in results[2] and '"model.layers.78.mlp.shared_experts.up_proj",' in results[2]
    assert "not allowed in paths" in results[3] or "outside the repos" in results[3]
    assert "tp=3, dp=1 use 3 GPUs; this node has 8" in results[4]
    assert not ctx.repos["twin"].is_dirty()
    assert ctx.state.finished == "script ended"


def test_a_killed_container_is_recreated_and_the_pending_change_survives(twin_image, docker_client, tmp_path):
    entry = '"model.layers.78.eh_proj",'
    edit = call("edit_file", path=QUANT_CONFIG, old=entry, new=f'{entry}\n      "model.decoder.eh_proj",')
    script = [edit, {"sleep_s": 3, **call("bash", command="echo still here")}, call("serve")]
    task_path = fast_twin_task(tmp_path)
    killer = threading.Thread(target=_kill_when_recorded, args=(tmp_path / "runs", docker_client), daemon=True)
    killer.start()
    ctx = run_scripted(task_path, script)
    results = tool_results(ctx.run_dir)
    assert "the sandbox died" in results[1]["content"] and "porter recreated it" in results[1]["content"]
    assert facts(results[2])["healthy"] is True
    assert ctx.repos["model"].changed_files() == ["config.json"]


def _kill_when_recorded(runs_dir: Path, docker_client) -> None:
    """Kill the run's container once the first tool result (the edit) is on disk."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for transcript in runs_dir.glob("*/transcript.jsonl"):
            if '"kind": "tool_result"' in transcript.read_text():
                run_id = transcript.parent.name
                for container in docker_client.containers.list(filters={"label": f"porter.run={run_id}"}):
                    container.kill()
                return
        time.sleep(0.1)


def test_sigkill_mid_run_then_resume_keeps_every_accepted_commit(twin_image, tmp_path):
    first = [
        call("serve"),
        call("run_check", kind="single_stream"),
        call("set_flags", flags=SPEC_314),
        fix("a-quark-exclude-mtp.patch"),
        call("serve"),
        call("run_check", kind="single_stream"),
        call("accept", summary="Exclude the MTP shared expert under the engine's name"),
        {"sleep_s": 120, **call("finish", reason="never reached")},
    ]
    second = [
        call("bash", command="git -C /models/glm-5.2-mxfp4-overlay log --format=%s -1"),
        call("finish", reason="resumed and done"),
    ]
    (tmp_path / "first.yaml").write_text(yaml.safe_dump(first))
    (tmp_path / "second.yaml").write_text(yaml.safe_dump(second))
    task_path = fast_twin_task(tmp_path)
    porter = [sys.executable, "-m", "porter", "run", str(task_path)]
    process = subprocess.Popen(
        [*porter, "--provider", f"scripted:{tmp_path / 'first.yaml'}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    run_dir = _wait_for_state(tmp_path / "runs", lambda state: state["repos"]["model"]["accepted"], process)
    process.send_signal(signal.SIGKILL)
    process.wait()
    killed_state = read_state(run_dir)
    assert killed_state["finished"] is None and len(killed_state["repos"]["model"]["accepted"]) == 1
    state = resume_scripted(porter, run_dir, tmp_path / "second.yaml")
    assert state["step"] > killed_state["step"]
    assert state["repos"]["model"]["accepted"] == killed_state["repos"]["model"]["accepted"]
    log_result = tool_results(run_dir)[-2]["content"]
    assert "Exclude the MTP shared expert under the engine's name" in log_result
    kinds = [r["kind"] for r in read_transcript(run_dir / "transcript.jsonl")]
    assert kinds.count("run_start") == 1 and "note" in kinds
    subprocess.run(["docker", "rm", "-f", f"porter-{state['run_id']}"], capture_output=True)


def _wait_for_state(runs_dir: Path, condition, process: subprocess.Popen) -> Path:
    """The run directory once its state.json satisfies `condition` (porter saves it after every step)."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        for state_file in runs_dir.glob("*/state.json"):
            if condition(json.loads(state_file.read_text())):
                return state_file.parent
        if process.poll() is not None:
            pytest.fail(f"porter exited early ({process.returncode}): {process.stderr.read()[-2000:]}")
        time.sleep(0.2)
    process.kill()
    pytest.fail("the run never reached the expected state within 240 s")


def test_a_server_that_hangs_at_startup_is_killed_and_reported(twin_image, tmp_path):
    task_path = fast_twin_task(
        tmp_path, **{"serve.command": "sleep 600 # {model_path} {host} {port} {flags}", "serve.startup_timeout_s": 3}
    )
    ctx = run_scripted(task_path, [call("serve")])
    result = facts(tool_results(ctx.run_dir)[0])
    assert result["healthy"] is False and result["crash_class"] == "startup_timeout"
    assert "startup timeout" in (ctx.run_dir / "logs" / "serve-001.log").read_text()
