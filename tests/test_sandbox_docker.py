"""DockerSandbox specifics: create options from a task, host checks, networks, a dead container, reuse, prune, CLI.

The options of the real GLM-5.2 task are checked without starting anything (this host has no
/dev/kfd). Everything else runs against the real engine with porter-base:bookworm.
"""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import git
import pytest
import yaml

from porter.commands.sandbox_commands import sandbox_exec_main
from porter.sandbox import DockerSandbox, SandboxDied, SandboxError
from porter.sandbox.docker_options import check_host_resources, container_options, process_start
from porter.task import Mount, Task, load_task

REPO_ROOT = Path(__file__).resolve().parent.parent
BASE_IMAGE = "porter-base:bookworm"


def small_task(name: str, network: str = "none", image: str = BASE_IMAGE, repos: list | None = None) -> Task:
    return Task.model_validate(
        {
            "name": name,
            "model": {"id": "test/model", "path": "/models/test", "in_image": True, "overlay": False},
            "hardware": {"gpu": "none", "count": 1},
            "sandbox": {"kind": "docker", "image": image, "network": network, "env": {"ONLY": "this"}},
            "repos": repos or [],
            "serve": {"command": "true", "port": 8123},
        }
    )


@pytest.fixture
def run_id(request) -> str:
    return re.sub(r"[^a-z0-9]+", "-", f"test-{request.node.name}-{os.getpid()}".lower())


def test_glm52_task_gives_the_rocm_options(tmp_path):
    task = load_task(REPO_ROOT / "tasks/glm52_mi355x.yaml", environ={})
    options = container_options(task, "run-7", tmp_path)
    assert options["image"] == "lmsysorg/sglang-rocm:v0.5.20-rocm720-mi35x-20260919"
    assert options["devices"] == ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"]
    assert options["group_add"] == ["video", "render"]
    assert (options["ipc_mode"], options["shm_size"]) == ("host", "64g")
    assert options["security_opt"] == ["seccomp=unconfined"] and options["cap_add"] == ["SYS_PTRACE"]
    assert options["network"] == "porter-internal" and "network_mode" not in options
    assert (options["mem_limit"], options["memswap_limit"], options["pids_limit"]) == ("1536g", "1536g", 32768)
    assert [(u["Name"], u["Soft"], u["Hard"]) for u in options["ulimits"]] == [("fsize", 256 << 30, 256 << 30)]
    assert options["environment"] == task.sandbox.env
    assert options["working_dir"] == "/sgl-workspace"
    assert options["labels"] == {
        "porter.run": "run-7",
        "porter.task": "glm52-mi355x",
        "porter.run_dir": str(tmp_path),
        "porter.managed": "1",
        "porter.owner_host": os.uname().nodename,
        "porter.owner_pid": str(os.getpid()),
        "porter.owner_start": process_start(os.getpid()),
    }
    mounts = {mount["Target"]: (mount["Source"], mount["ReadOnly"]) for mount in options["mounts"]}
    assert mounts == {
        "/porter/weights": ("/data/models/GLM-5.2-MXFP4", True),
        "/models/GLM-5.2-MXFP4": (str(tmp_path / "repos/model"), False),
        "/root/.cache": ("/data/porter-cache", False),
        "/sgl-workspace/sglang": (str(tmp_path / "repos/sglang"), False),
        "/sgl-workspace/aiter": (str(tmp_path / "repos/aiter"), False),
        "/sgl-workspace/sglang/.git": (str(tmp_path / "repos/sglang/.git"), True),
        "/sgl-workspace/aiter/.git": (str(tmp_path / "repos/aiter/.git"), True),
        "/models/GLM-5.2-MXFP4/.git": (str(tmp_path / "repos/model/.git"), True),
        "/porter/scratch": (str(tmp_path / "scratch"), False),
    }


@pytest.mark.parametrize(
    ("network", "expected"),
    [
        ("none", {"network": "porter-internal"}),
        ("bridge", {"network_mode": "bridge", "ports": {"8123/tcp": ("127.0.0.1", None)}}),
        ("host", {"network_mode": "host"}),
    ],
)
def test_network_options(tmp_path, network, expected):
    options = container_options(small_task("net", network), "r", tmp_path)
    assert {key: options[key] for key in ("network", "network_mode", "ports") if key in options} == expected


def test_a_mount_that_holds_porters_state_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("PORTER_STATE", str(tmp_path / "cache" / "porter"))
    task = small_task("state")
    for host in (tmp_path / "cache", tmp_path / "cache" / "porter", tmp_path / "cache" / "porter" / "samples"):
        task.sandbox.mounts = [Mount(host=str(host), container="/root/.cache", read_only=True)]
        with pytest.raises(SandboxError, match="would give it porter's own state folder"):
            container_options(task, "r", tmp_path / "run")
    task.sandbox.mounts = [Mount(host=str(tmp_path / "sandbox-cache"), container="/root/.cache", read_only=False)]
    assert container_options(task, "r", tmp_path / "run")["mounts"][0]["Target"] == "/root/.cache"


def test_missing_device_is_named_before_docker_sees_it(docker_client, tmp_path):
    task = load_task(REPO_ROOT / "tasks/glm52_mi355x.yaml", environ={})
    with pytest.raises(SandboxError, match=r"device /dev/kfd does not exist on this host"):
        check_host_resources(task)
    with pytest.raises(SandboxError, match=r"device /dev/kfd does not exist"):
        DockerSandbox(task, tmp_path, "glm", client=docker_client).start()


def test_missing_image_says_how_to_get_it(docker_client, tmp_path):
    box = DockerSandbox(small_task("noimage", image="porter-absent:never"), tmp_path, "noimage", client=docker_client)
    with pytest.raises(SandboxError, match=r"image porter-absent:never not found locally; porter never pulls"):
        box.start()


def test_missing_repo_path_in_image_is_named(docker_client, tmp_path):
    task = small_task("norepo", repos=[{"name": "ghost", "path": "/opt/ghost"}])
    with pytest.raises(SandboxError, match=r"repo 'ghost': /opt/ghost does not exist in image"):
        DockerSandbox(task, tmp_path, "norepo", client=docker_client).start()


@pytest.fixture
def sandbox_factory(docker_client, tmp_path):
    made: list[DockerSandbox] = []

    def make(task: Task, run_id: str) -> DockerSandbox:
        box = DockerSandbox(task, tmp_path / run_id, run_id, client=docker_client)
        made.append(box)
        return box

    yield make
    for box in made:
        box.stop(remove=True)


def test_network_none_has_no_route_out_and_the_host_reaches_it(sandbox_factory, run_id):
    box = sandbox_factory(small_task("isolated", "none"), run_id)
    box.start()
    routes = box.exec("cat /proc/net/route", timeout=30).output.splitlines()[1:]
    destinations = {line.split()[1] for line in routes}
    assert destinations and "00000000" not in destinations, routes
    assert "default" not in box.exec("ip route", timeout=30).output
    assert box.endpoint(8123).startswith("http://172.") or box.endpoint(8123).startswith("http://192.")
    assert_serves(box, 8123)


def test_network_bridge_publishes_the_serve_port_on_loopback(sandbox_factory, run_id):
    box = sandbox_factory(small_task("bridged", "bridge"), run_id)
    box.start()
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", box.endpoint(8123))
    assert_serves(box, 8123)


def assert_serves(box: DockerSandbox, port: int) -> None:
    box.exec(f"echo served > /tmp/page; cd /tmp && (python3 -m http.server {port} >/dev/null 2>&1 &)", timeout=30)
    process = box.spawn(f"cd /tmp && exec python3 -m http.server {port}", Path(box.run_dir) / "logs/http.log")
    try:
        for _ in range(100):
            try:
                assert urllib.request.urlopen(box.endpoint(port) + "/page", timeout=2).read() == b"served\n"
                return
            except OSError:
                box.exec("sleep 0.1", timeout=30)
        pytest.fail(f"{box.endpoint(port)} never answered")
    finally:
        process.stop(grace_s=2)


def test_killed_container_raises_died_and_restart_keeps_the_patch(sandbox_factory, run_id, docker_client):
    task = small_task("phoenix", repos=[{"name": "etc-apt", "path": "/etc/apt"}])
    box = sandbox_factory(task, run_id)
    box.start()
    (box.repo_dir("etc-apt") / "porter-patch.conf").write_text("patched\n")
    first_id = box.container.id
    docker_client.containers.get(first_id).kill()
    with pytest.raises(SandboxDied, match=r"not running.*the repos and the pending change live on the host") as died:
        box.exec("true", timeout=30)
    assert "\nlast log lines:\n" in str(died.value)
    box.restart()
    assert box.container.id != first_id
    assert box.exec("cat /etc/apt/porter-patch.conf", timeout=30).output == "patched\n"
    assert "porter-patch.conf" in git.Repo(box.repo_dir("etc-apt")).git.status("--porcelain")
    docker_client.containers.get(box.container.id).remove(force=True)
    box.start()
    assert box.exec("cat /etc/apt/porter-patch.conf", timeout=30).output == "patched\n"


def test_start_reuses_the_runs_container(sandbox_factory, run_id):
    first = sandbox_factory(small_task("reuse"), run_id)
    first.start()
    first.stop()
    again = sandbox_factory(small_task("reuse"), run_id)
    again.start()
    assert again.container.id == first.container.id and again.container.status == "running"


def test_sandbox_exec_main_prints_output_and_returns_the_code(docker_client, tmp_path, capsys):
    task_file = tmp_path / "task.yaml"
    spec = small_task("cli-exec").model_dump(mode="json")
    spec["outputs"] = {"runs_dir": str(tmp_path / "runs")}
    task_file.write_text(yaml.safe_dump(spec))
    try:
        assert sandbox_exec_main(str(task_file), ["sh", "-c", "echo $ONLY; exit 7"], timeout=30) == 7
        assert capsys.readouterr().out == "this\n"
        assert sandbox_exec_main(str(task_file), ["echo one | wc -l"], timeout=30) == 0
        assert capsys.readouterr().out.strip() == "1"
        (run_dir,) = (tmp_path / "runs").glob("cli-exec-manual-*")
        assert (run_dir / "logs/exec.log").exists()
    finally:
        for container in docker_client.containers.list(all=True, filters={"name": "porter-manual-cli-exec-"}):
            container.remove(force=True)
    assert sandbox_exec_main(str(tmp_path / "absent.yaml"), ["true"], timeout=30) == 2


def test_sandbox_exec_shows_a_terminal_no_escape_and_a_pipe_every_byte(docker_client, tmp_path):
    """`porter sandbox exec` on a terminal (a real pty) prints what the container wrote without the sequences a
    terminal acts on (retitle, clipboard write); piped, it passes every byte on for the user's script."""
    task_file = tmp_path / "task.yaml"
    spec = small_task("cli-tty").model_dump(mode="json")
    spec["outputs"] = {"runs_dir": str(tmp_path / "runs")}
    task_file.write_text(yaml.safe_dump(spec))
    hostile = r"printf 'a\033]0;owned\007b\033]52;c;b3duZWQ=\007c\n'"
    command = [sys.executable, "-m", "porter", "sandbox", "exec", str(task_file), "--", hostile]
    try:
        piped = subprocess.run(command, capture_output=True, timeout=120)
        assert piped.returncode == 0 and piped.stdout == b"a\x1b]0;owned\x07b\x1b]52;c;b3duZWQ=\x07c\n"
        leader, follower = pty.openpty()
        shown = subprocess.run(command, stdout=follower, stderr=subprocess.PIPE, timeout=120)
        os.close(follower)
        with os.fdopen(leader, "rb") as terminal:
            output = terminal.read1(1 << 16)
        assert shown.returncode == 0 and output.replace(b"\r\n", b"\n") == b"abc\n"
    finally:
        for container in docker_client.containers.list(all=True, filters={"name": "porter-manual-cli-tty-"}):
            container.remove(force=True)
