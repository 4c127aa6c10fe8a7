"""Issue 41's third hostile pass, the sandbox side: what a hostile model, checkpoint or user config reaches on the
host. Each test's input is the attack:
- a ~/.gitconfig whose filter, textconv and external diff write a marker file: porter's git never runs them;
- a checkpoint whose files link to /etc/passwd or to /etc: the model overlay refuses them, a hub cache snapshot
  (links into its blobs/, as huggingface_hub makes them) still builds;
- a server that prints 70 MiB (a `$BASH_ENV` hook, `set -x`, a loop): the log keeps its head and its last part
  with a line saying how much was not kept, on the local sandbox and in a real container, and the server runs on;
- a command that writes 2 GiB into the scratch and a detached one into the container's /tmp, over a cap of 64 MiB:
  each is killed, one line says so, the container runs on;
- `kill` of a `porter run` on the twin: the run's container is stopped, not left running with the devices mapped;
- serve variables that reach what no fingerprint covers (`$PYTHONPATH` to the scratch, `$LD_PRELOAD` from /tmp,
  `$BASH_ENV`): set_flags refuses them, and figures measured with one (here a sitecustomize.py the agent wrote in
  the scratch) never reach the measurement cache, so a later clean run measures anew.
"""

from __future__ import annotations

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
from test_measure_cache import baseline_run, cache, engine_task  # noqa: F401 - cache is a fixture
from test_sandbox_docker import small_task
from twin_tasks import QUICK_SCALE, build_twin, call, fast_twin_task, run_with, tool_results

from porter.models import ScriptedModel
from porter.sandbox import DockerSandbox, LocalSandbox, SandboxError
from porter.sandbox.interface import SPOOL_LIMIT, SPOOL_TAIL
from porter.sandbox.trees import safe_git
from porter.sandbox.trees.baseline import ensure_baseline
from porter.sandbox.trees.overlay import build_from_dir
from porter.task import Task

FLOOD = f"head -c {SPOOL_LIMIT + 6 * SPOOL_TAIL} /dev/zero | tr '\\0' x; echo; echo the-last-line; sleep 30"


def test_the_users_global_git_config_never_runs_on_the_host(tmp_path, monkeypatch):
    home, marker = tmp_path / "home", tmp_path / "ran"
    home.mkdir()
    hook = home / "hook.sh"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\ncat\n")
    hook.chmod(0o755)
    (home / "attributes").write_text("* filter=mark diff=mark\n")
    (home / ".gitconfig").write_text(
        f'[core]\n\tattributesFile = {home / "attributes"}\n[filter "mark"]\n\tclean = {hook}\n\tsmudge = {hook}\n'
        f'[diff "mark"]\n\ttextconv = {hook}\n[diff]\n\texternal = {hook}\n'
    )
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.py").write_text("one\n")
    ensure_baseline(tree)  # git add and commit
    (tree / "a.py").write_text("two\n")
    diff = safe_git.run(tree, ["diff", "HEAD"])
    assert "+two" in diff.stdout and not marker.exists()
    (tree / "cfg").mkdir()
    (tree / "cfg" / "config.json").write_text("{}\n")
    build_from_dir(tree / "cfg", tmp_path / "overlay", link_base="/weights")  # its own git init and commit
    assert not marker.exists()


def checkpoint(tmp_path: Path) -> Path:
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "x"}\n')
    return folder


@pytest.mark.parametrize(("name", "target"), [("tokenizer.model", "/etc/passwd"), ("extra", "/etc")])
def test_a_checkpoint_link_out_of_its_folder_is_refused(tmp_path, name, target):
    folder = checkpoint(tmp_path)
    (folder / name).symlink_to(target)
    with pytest.raises(SandboxError, match=rf"'{name}' is a link out of the checkpoint's folder") as refused:
        build_from_dir(folder, tmp_path / "overlay", link_base="/porter/weights")
    assert target not in str(refused.value) and not (tmp_path / "overlay").exists()


def test_a_hub_cache_snapshot_and_a_looping_link_still_build(tmp_path):
    storage = tmp_path / "models--org--name"
    (storage / "blobs").mkdir(parents=True)
    (storage / "blobs" / "abc123").write_text('{"model_type": "x"}\n')
    snapshot = storage / "snapshots" / "rev1"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").symlink_to("../../blobs/abc123")
    (snapshot / "sub").mkdir()
    (snapshot / "sub" / "again").symlink_to("..")  # a loop, walked once
    build_from_dir(snapshot, tmp_path / "overlay", link_base="/porter/weights")
    assert (tmp_path / "overlay" / "config.json").read_text() == '{"model_type": "x"}\n'
    assert not (tmp_path / "overlay" / "sub" / "again").exists()


def assert_capped(log: Path) -> None:
    size = log.stat().st_size
    assert size <= SPOOL_LIMIT + 2 * SPOOL_TAIL + 200, size
    with open(log, "rb") as text:
        head = text.read(SPOOL_LIMIT)
        rest = text.read()
    assert head == b"x" * SPOOL_LIMIT
    lost = re.search(rb"\n\[porter: (\d+) bytes of output not kept: over \d+ bytes\]\n", rest)
    assert lost and int(lost.group(1)) >= 4 * SPOOL_TAIL, rest[:200]
    assert b"x\nthe-last-line\n" in rest[-100:]  # a "Terminated" may follow


def wait_for_line(log: Path, process) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not log.read_bytes().endswith(b"the-last-line\n"):
        time.sleep(0.2)
    assert process.alive()  # the server runs on


def test_a_flooding_server_log_is_capped_on_the_local_sandbox(tmp_path):
    task = Task.model_validate(
        {
            "name": "flood",
            "model": {"id": "test/model", "path": "/models/test", "in_image": True, "overlay": False},
            "hardware": {"gpu": "none", "count": 1},
            "sandbox": {"kind": "local"},
            "serve": {"command": "true", "port": 8123},
        }
    )
    sandbox = LocalSandbox(task, tmp_path / "run", "run-flood")
    sandbox.start()
    try:
        process = sandbox.spawn(FLOOD, tmp_path / "server.log")
        wait_for_line(tmp_path / "server.log", process)
    finally:
        sandbox.stop()
    assert_capped(tmp_path / "server.log")


@pytest.mark.docker
def test_a_flooding_server_log_is_capped_in_a_container(docker_client, tmp_path):
    sandbox = DockerSandbox(small_task("flood"), tmp_path / "run", f"test-flood-{os.getpid()}", docker_client)
    sandbox.start()
    try:
        process = sandbox.spawn(FLOOD, tmp_path / "server.log")
        wait_for_line(tmp_path / "server.log", process)
        process.stop(grace_s=1)
    finally:
        sandbox.stop(remove=True)
    assert_capped(tmp_path / "server.log")


@pytest.mark.docker
def test_writes_past_the_cap_are_stopped_with_one_line(docker_client, tmp_path):
    task = small_task("writes").model_copy(deep=True)
    task.sandbox.max_written = "64m"
    sandbox = DockerSandbox(task, tmp_path / "run", f"test-writes-{os.getpid()}", docker_client)
    sandbox.start()
    try:
        flood = sandbox.exec("head -c 2G /dev/zero > /porter/scratch/big; echo finished", timeout=120)
        detached = sandbox.exec("setsid sh -c 'head -c 2G /dev/zero > /tmp/big' > /dev/null 2>&1 &", timeout=30)
        waited = sandbox.exec("sleep 10", timeout=60)  # killed with the writer, or not if it was slower
        later = sandbox.exec("stat -c %s /tmp/big; echo alive", timeout=60)
    finally:
        sandbox.stop(remove=True)
    notice = r"\[porter: the sandbox wrote [\d,]+ bytes to its writable places, over sandbox.max_written \(67,108,864\)"
    assert re.search(notice, flood.output) and "finished" not in flood.output, flood.output
    assert flood.exit_code == 137 and (tmp_path / "run" / "scratch" / "big").stat().st_size < 2 << 30
    assert detached.exit_code == 0 and len(re.findall(notice, waited.output + later.output)) == 1, waited.output
    assert int(later.output.split()[0]) < 2 << 30 and "alive" in later.output, later.output


@pytest.mark.docker
def test_a_killed_run_stops_its_container(docker_client, tmp_path):
    build_twin()
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump([call("bash", command="sleep 600")]))
    task = fast_twin_task(tmp_path, QUICK_SCALE, **{"agent.provider": f"scripted:{script}"})
    run = subprocess.Popen([sys.executable, "-m", "porter", "run", str(task)], stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and run.poll() is None:
        logs = list((tmp_path / "runs").glob("*/progress.log"))
        if logs and "  bash sleep 600  still running" in logs[0].read_text():
            break
        time.sleep(0.5)
    run.send_signal(signal.SIGTERM)  # `kill`
    out, _ = run.communicate(timeout=300)
    assert run.returncode == 130, out[-2000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    found = docker_client.containers.list(all=True, filters={"label": f"porter.run_dir={run_dir}"})
    try:
        assert found and all(container.status == "exited" for container in found), [c.status for c in found]
    finally:
        for container in found:
            container.remove(force=True)


def test_the_agent_cannot_point_the_server_at_files_no_fingerprint_covers(tmp_path, cache):  # noqa: F811
    refused = [
        {"$PYTHONPATH": "/porter/scratch"},
        {"$LD_PRELOAD": "/usr/lib/libc.so.6:/tmp/fast.so"},
        {"$BASH_ENV": "/etc/profile"},
        {"$NODE_OPTIONS": "--require=../porter/scratch/hook.js"},  # relative to the workdir, /
    ]
    script = [call("set_flags", flags=flags) for flags in [*refused, {"$OMP_NUM_THREADS": "4"}]]
    ctx = run_with(engine_task(tmp_path, free_port()), ScriptedModel(script))
    results = tool_results(ctx.run_dir)
    assert all("refused: $" in result["content"] for result in results[:4]), [r["content"] for r in results]
    assert "/porter/scratch, where the agent writes" in results[0]["content"]
    assert "shell code" in results[2]["content"] and results[4]["facts"]["ok"]
    assert ctx.state.flags == {"$OMP_NUM_THREADS": "4"}


def test_figures_measured_on_a_scratch_sitecustomize_never_reach_a_clean_run(tmp_path, cache):  # noqa: F811
    task_path = engine_task(tmp_path, free_port())
    data = yaml.safe_load(task_path.read_text())
    data["serve"]["flags"] = {"$PYTHONPATH": "/porter/scratch"}  # declared by the task: the agent could not
    task_path.write_text(yaml.safe_dump(data))
    poison = 'echo "import sys" > "$PORTER_SANDBOX_ROOT/porter/scratch/sitecustomize.py"'
    script = [call("bash", command=poison), call("serve"), call("run_check", kind="single_stream")]
    poisoned = run_with(task_path, ScriptedModel(script))
    clean = baseline_run(task_path, fresh=False)
    assert [s.cached for s in poisoned.state.samples] == [False, False]
    assert clean.state.samples and not any(s.cached for s in clean.state.samples)
