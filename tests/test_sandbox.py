"""The Sandbox protocol, run against both implementations: a real container and host subprocesses.

One sandbox per kind for the whole module (containers take a second to make). The docker one is
built from a Dockerfile FROM porter-base:bookworm holding two repos: /opt/demo (plain files) and
/opt/upstream (a git repo with an upstream commit). The local one gets the same trees placed
under its root. Docker-only behaviour (options, network, a dead container) is in test_sandbox_docker.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
import tracemalloc
import urllib.request
from pathlib import Path

import git
import pytest
from helpers import free_port

from porter import redaction
from porter.sandbox import SANDBOXES, LocalSandbox, Process, Sandbox, SandboxError, make_sandbox
from porter.sandbox.docker_options import container_options
from porter.sandbox.guard import PathGuard
from porter.sandbox.interface import SPOOL_LIMIT, SPOOL_TAIL, OutputCapture
from porter.task import Task

HOST_SECRET = "sk-porter-test-host-secret"

DOCKERFILE = """\
FROM porter-base:bookworm
RUN mkdir -p /opt/demo && printf 'print("hello")\\n' > /opt/demo/main.py && \\
    mkdir -p /opt/upstream && cd /opt/upstream && printf 'x = 1\\n' > lib.py && git init -q && git add -A && \\
    git -c user.name=up -c user.email=up@example.org commit -qm 'upstream release'
"""


def task_dict(kind: str, build_dir: Path, port: int = 30000) -> dict:
    sandbox: dict = {"kind": kind, "env": {"PORTER_TEST_VALUE": "visible"}, "workdir": "/opt/demo"}
    if kind == "docker":
        sandbox["dockerfile"] = str(build_dir / "Dockerfile")
    return {
        "name": f"sandbox-test-{kind}",
        "model": {"id": "test/model", "path": "/models/test", "in_image": True, "overlay": False},
        "hardware": {"gpu": "none", "count": 1},
        "sandbox": sandbox,
        "repos": [{"name": "demo", "path": "/opt/demo"}, {"name": "upstream", "path": "/opt/upstream"}],
        "serve": {"command": "python3 -m http.server {port}", "port": port},
        "agent": {"provider": "playbook", "api_key_env": "PORTER_TEST_API_KEY"},
    }


def place_local_trees(root: Path) -> None:
    """What the docker image holds, laid out under a local sandbox's root."""
    (root / "opt/demo").mkdir(parents=True)
    (root / "opt/demo/main.py").write_text('print("hello")\n')
    upstream = git.Repo.init(root / "opt/upstream")
    (root / "opt/upstream/lib.py").write_text("x = 1\n")
    upstream.git.add("--all")
    upstream.git.execute(
        ["git", "-c", "user.name=up", "-c", "user.email=up@example.org", "commit", "-qm", "upstream release"]
    )


@pytest.fixture(scope="module", params=sorted(SANDBOXES))
def sandbox(request, tmp_path_factory) -> Sandbox:
    kind = request.param
    if kind == "docker":
        request.getfixturevalue("docker_client")
    build_dir = tmp_path_factory.mktemp(f"build-{kind}")
    (build_dir / "Dockerfile").write_text(DOCKERFILE)
    run_dir = tmp_path_factory.mktemp(f"run-{kind}")
    if kind == "local":
        place_local_trees(run_dir / "root")
    task = Task.model_validate(task_dict(kind, build_dir, port=free_port()))
    os.environ["PORTER_TEST_API_KEY"] = HOST_SECRET  # must never reach the sandbox
    box = make_sandbox(task, run_dir, f"test-{kind}-{os.getpid()}")
    box.start()
    yield box
    box.stop(remove=True)
    os.environ.pop("PORTER_TEST_API_KEY", None)


def test_registry_and_protocol(sandbox):
    assert isinstance(sandbox, Sandbox)
    assert type(sandbox) in SANDBOXES.values()
    assert sandbox.describe()["kind"] == sandbox.task.sandbox.kind


def test_a_crashed_process_has_its_last_lines_logged_when_it_reads_as_dead(sandbox, tmp_path):
    # Polled without pause, as serve.py's triage reads the log the moment the server reads as dead.
    for attempt in range(8):
        log_path = tmp_path / f"crash-{attempt}.log"
        process = sandbox.spawn("seq 1 200000; echo 'Traceback: the last line'; exit 3", log_path)
        deadline = time.monotonic() + 30
        while process.alive() and time.monotonic() < deadline:
            pass
        assert log_path.read_text().endswith("Traceback: the last line\n")
        assert process.exit_code() == 3


def test_unknown_kind_lists_the_valid_ones(tmp_path):
    task = Task.model_validate(task_dict("local", tmp_path))
    odd = task.model_copy(update={"sandbox": task.sandbox.model_copy(update={"kind": "podman"})})
    with pytest.raises(ValueError, match=r"podman.*\['docker', 'local'\]"):
        make_sandbox(odd, tmp_path, "odd")


@pytest.mark.parametrize(
    ("command", "expected"), [("true", 0), ("exit 3", 3), ("false", 1), ("kill -TERM $$", 143), ("echo hi", 0)]
)
def test_exit_codes(sandbox, command, expected):
    result = sandbox.exec(command, timeout=30)
    assert (result.exit_code, result.timed_out) == (expected, False) and "elided" not in result.output


def test_workdir_and_default_workdir(sandbox):
    assert sandbox.exec("pwd", timeout=30).output.strip().endswith("/opt/demo")
    assert sandbox.exec("pwd", timeout=30, workdir="/opt/upstream").output.strip().endswith("/opt/upstream")


def test_environment_is_the_tasks_only(sandbox):
    output = sandbox.exec("env", timeout=30).output
    assert "PORTER_TEST_VALUE=visible" in output
    assert HOST_SECRET not in output
    assert "PORTER_TEST_API_KEY" not in output


def test_secrets_are_refused_in_the_task_and_in_spawn(sandbox, tmp_path):
    with pytest.raises(SandboxError, match="HF_TOKEN"):
        sandbox.spawn("true", tmp_path / "never.log", env={"HF_TOKEN": "x"})
    spec = task_dict("local", tmp_path)
    spec["sandbox"]["env"]["OPENAI_API_KEY"] = "sk-x"
    task = Task.model_validate(spec)
    with pytest.raises(SandboxError, match="OPENAI_API_KEY"):
        LocalSandbox(task, tmp_path, "secret")
    with pytest.raises(SandboxError, match="OPENAI_API_KEY"):
        container_options(task, "secret", tmp_path)


def test_timeout_kills_the_process_group_inside(sandbox):
    result = sandbox.exec("sleep 311.5 & echo started; sleep 312.5", timeout=1)
    assert result.timed_out and result.exit_code == 124
    assert "started" in result.output
    processes = sandbox.exec("ps -eo args", timeout=30).output
    assert "sleep 311.5" not in processes and "sleep 312.5" not in processes


def test_50_megabytes_of_output_are_capped_without_holding_them(sandbox):
    tracemalloc.start()
    result = sandbox.exec("head -c 50000000 /dev/zero | tr '\\0' a; echo; echo END", timeout=120)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert result.exit_code == 0
    assert result.output.startswith("aaaa") and result.output.endswith("END\n")
    assert "bytes elided" in result.output and len(result.output) < 25_000
    assert peak < 8_000_000, f"python held {peak} bytes while capturing"
    assert sandbox.exec_log.stat().st_size > 50_000_000


def test_binary_output_is_decoded_with_replacement(sandbox):
    result = sandbox.exec("printf 'abc\\377\\376\\000xyz'", timeout=30)
    assert result.output.startswith("abc\ufffd\ufffd") and result.output.endswith("xyz")


def wait_for(condition, timeout_s: float = 20) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_spawn_streams_its_log_and_stops(sandbox, tmp_path):
    log_path = tmp_path / "logs" / "loop.log"
    process = sandbox.spawn("for i in $(seq 100000); do echo line $i; sleep 0.05; done", log_path)
    assert isinstance(process, Process)
    assert wait_for(lambda: "line 3\n" in log_path.read_text())
    size = log_path.stat().st_size
    assert wait_for(lambda: log_path.stat().st_size > size), "the log does not grow while the process runs"
    assert process.alive() and process.exit_code() is None
    process.stop(grace_s=5)
    assert not process.alive() and process.exit_code() == 143
    size = log_path.stat().st_size
    time.sleep(0.3)
    assert log_path.stat().st_size == size


def test_stop_kills_a_group_that_ignores_term(sandbox, tmp_path):
    process = sandbox.spawn("trap '' TERM; while :; do sleep 0.05; done", tmp_path / "stubborn.log")
    assert wait_for(process.alive)
    process.stop(grace_s=0.5)
    assert not process.alive() and process.exit_code() is not None


def test_spawned_server_is_reachable_at_the_endpoint(sandbox, tmp_path):
    port = sandbox.task.serve.port
    process = sandbox.spawn(f"exec python3 -m http.server {port} --bind 0.0.0.0", tmp_path / "server.log")
    url = sandbox.endpoint(port) + "/main.py"

    def answers() -> bool:
        try:
            return urllib.request.urlopen(url, timeout=2).read() == b'print("hello")\n'
        except OSError:
            return False

    try:
        assert wait_for(answers), f"{url} did not answer"
    finally:
        process.stop(grace_s=2)


def test_edit_inside_shows_as_git_diff_on_the_host(sandbox):
    assert sandbox.exec("sed -i s/hello/bye/ main.py", timeout=30).exit_code == 0
    diff = git.Repo(sandbox.repo_dir("demo")).git.diff()
    assert '-print("hello")' in diff and '+print("bye")' in diff
    sandbox.exec("sed -i s/bye/hello/ main.py", timeout=30)
    assert git.Repo(sandbox.repo_dir("demo")).git.diff() == ""


def test_repos_keep_the_upstream_commit_or_get_a_baseline(sandbox):
    assert git.Repo(sandbox.repo_dir("upstream")).head.commit.message.strip() == "upstream release"
    assert git.Repo(sandbox.repo_dir("demo")).head.commit.message.startswith("porter baseline")
    with pytest.raises(SandboxError, match="no repo named 'nope'"):
        sandbox.repo_dir("nope")


def repo_guard(box: Sandbox) -> PathGuard:
    """The file tools' guard over the sandbox's repos, as the run builds it (RunContext.guard)."""
    return PathGuard({repo.path: box.repo_dir(repo.name) for repo in box.task.patchable_repos()})


def test_files_round_trip_through_the_repos(sandbox):
    repo_guard(sandbox).write_text("/opt/upstream/notes/a.txt", "notes ✓\n")
    assert repo_guard(sandbox).read_text("/opt/upstream/notes/a.txt") == "notes ✓\n"
    repo_guard(sandbox).write_text("/opt/upstream/lib.py", "x = 2\n")
    assert sandbox.exec("cat lib.py", timeout=30, workdir="/opt/upstream").output == "x = 2\n"
    repo_guard(sandbox).write_text("/opt/upstream/lib.py", "x = 1\n")
    sandbox.exec("rm -r notes", timeout=30, workdir="/opt/upstream")


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("/etc/passwd", "outside"),
        ("/opt/demo/../../etc/passwd", "`..` is not allowed"),
        ("main.py", "absolute"),
        ("/opt/demo/escape", "symbolic link"),
        ("/opt/demo/missing.py", "no such file"),
    ],
)
def test_file_access_is_confined(sandbox, path, problem):
    sandbox.exec("ln -sfn /etc/passwd escape", timeout=30)
    with pytest.raises(SandboxError, match=problem):
        repo_guard(sandbox).read_text(path)
    sandbox.exec("rm -f escape", timeout=30)


def test_local_copies_a_host_repo_and_leaves_it_untouched(tmp_path):
    origin = tmp_path / "origin"
    origin.mkdir()
    (origin / "a.txt").write_text("original\n")
    spec = task_dict("local", tmp_path)
    spec["repos"] = [{"name": "origin", "path": str(origin)}]
    box = LocalSandbox(Task.model_validate(spec), tmp_path / "run", "copy")
    box.start()
    repo_guard(box).write_text(f"{origin}/a.txt", "patched\n")
    assert (origin / "a.txt").read_text() == "original\n"
    assert git.Repo(box.repo_dir("origin")).git.diff().endswith("+patched")
    spec["repos"] = [{"name": "gone", "path": str(tmp_path / "gone")}]
    with pytest.raises(SandboxError, match="neither .* nor the host directory"):
        LocalSandbox(Task.model_validate(spec), tmp_path / "run2", "gone").start()


def test_local_exec_log_has_the_full_output(tmp_path):
    box = LocalSandbox(Task.model_validate(task_dict("local", tmp_path)), tmp_path, "log")
    box.host_path("/opt/demo").mkdir(parents=True)
    box.exec("seq 1 100000", timeout=30)
    text = box.exec_log.read_text()
    assert "exec (timeout 30s, workdir /opt/demo): seq 1 100000" in text and "\n100000\n" in text
    assert subprocess.run(["grep", "-c", "^=== ", str(box.exec_log)], capture_output=True, text=True).stdout == "2\n"


def test_a_command_that_prints_past_the_spool_limit_keeps_its_head_and_tail_only(sandbox):
    tracemalloc.start()
    before = sandbox.exec_log.stat().st_size if sandbox.exec_log.exists() else 0
    result = sandbox.exec("head -c 100000000 /dev/zero | tr '\\0' a; echo; echo END", timeout=300)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert result.exit_code == 0 and result.output.endswith("END\n")
    kept = sandbox.exec_log.stat().st_size - before
    assert SPOOL_LIMIT < kept < SPOOL_LIMIT + SPOOL_TAIL + 4096  # not the 100 MB the command printed
    assert peak < 8_000_000, f"python held {peak} bytes while capturing"
    with open(sandbox.exec_log, "rb") as log:
        log.seek(before + SPOOL_LIMIT - 4096)
        middle = log.read(8192).decode()
    assert re.search(r"\n\[porter: \d+ bytes of output not kept: over 67108864 bytes\]\naaaa", middle)


def test_a_secret_cut_by_the_spool_limit_is_never_half_kept(tmp_path, monkeypatch):
    secret = "sk-live-" + "0123456789abcdef" * 4
    monkeypatch.setenv("PORTER_TEST_API_KEY", secret)
    redaction.collect()
    try:
        for cut in range(1, len(secret)):  # the spool's end and the tail's start fall inside a secret, everywhere
            log = tmp_path / f"exec-{cut}.log"
            capture = OutputCapture(log, "t", limit=400, spool=(1000, 500))
            tail = secret[cut:] + "z" * (500 - len(secret) + cut)  # the last 500 bytes start inside the secret
            text = "x" * (1000 - cut) + secret + "y" * 5000 + secret[:cut] + tail
            for start in range(0, len(text), 333):
                capture.feed(text[start : start + 333].encode())
            capture.finish("end")
            kept = log.read_text()
            assert secret[:12] not in kept and secret[-12:] not in kept, cut
            assert "bytes of output not kept: over 1000 bytes]\n" in kept and kept.endswith("zzz\n=== end\n")
    finally:
        monkeypatch.delenv("PORTER_TEST_API_KEY")
        redaction.collect()
