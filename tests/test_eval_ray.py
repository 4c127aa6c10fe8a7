"""`porter eval --ray` on a real Ray cluster that the tests start on this machine: a head with a custom resource
(`porter_slot: 2`) and the dashboard (Ray's state API is served by it), as a subprocess in a session of its own,
stopped by signalling that session only (never `ray stop`, which would stop any other Ray on the machine). The
cells replay twin recordings from transcripts/ in Docker; the cluster is kept small (2 CPUs) for a shared VM."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import docker
import pytest
import yaml
from helpers import free_port
from twin_tasks import ROOT, build_twin, task_data

from porter.evaluate import eval_ray

pytestmark = pytest.mark.docker
RECORDINGS = ("ckpt-name-keyerror", "nv-bf16-macro")  # each stops cleanly after its start-up crash: seconds
CELLS = {f"porter-eval: {name} x replay" for name in RECORDINGS}
EVAL_TIMEOUT_S = 600
HEAD_START_TIMEOUT_S = 120


def _session_pids(session: int) -> list[int]:
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the process ended while we looked
        if int(fields[3]) == session:  # fields after the command: state, ppid, pgrp, session
            pids.append(int(stat.parent.name))
    return pids


def _stop_session(session: int) -> None:
    """SIGTERM every process of the session, SIGKILL what is left after 5 s (`ray start --block` outlives SIGTERM)."""
    for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        for pid in _session_pids(session):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait_s
        while _session_pids(session) and time.monotonic() < deadline:
            time.sleep(0.5)


def _state_api_tasks(address: str) -> list:
    from ray.util.state import list_tasks

    return list_tasks(address=address, limit=1000, detail=True, raise_on_missing_output=False)


RAY_CLI = (sys.executable, "-c", "from ray.scripts.scripts import main; main()")
SMALL_NODE = ("--disable-usage-stats", "--object-store-memory=100000000")


def _start_node(options: list[str], log: Path) -> subprocess.Popen:
    """`ray start --block ...` in a session of its own, so the node can be stopped (or killed) alone."""
    command = [*RAY_CLI, "start", "--block", f"--dashboard-agent-listen-port={free_port()}", *SMALL_NODE, *options]
    with log.open("w") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


@pytest.fixture(scope="module")
def ray_head(docker_client):
    # Short and directly under /tmp: Ray's unix sockets live under it (107-byte limit), and a pytest-xdist
    # worker's tmp_path is too long for them (the head then never serves, and Ray's client aborts the worker).
    temp_dir = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
    port = free_port()
    options = [
        *("--head", f"--port={port}", "--num-cpus=2", '--resources={"porter_slot": 2}', f"--temp-dir={temp_dir}"),
        *("--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={free_port()}"),
        f"--ray-client-server-port={free_port()}",
    ]
    head = _start_node(options, temp_dir / "head.log")
    address = f"127.0.0.1:{port}"
    try:
        _wait_for_state_api(address, head, temp_dir / "head.log")
        yield address
    finally:
        _stop_session(head.pid)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _wait_for_state_api(address: str, head: subprocess.Popen, log: Path) -> None:
    from ray.util.state.exception import RayStateApiException

    deadline = time.monotonic() + HEAD_START_TIMEOUT_S
    while True:
        assert head.poll() is None, f"ray start exited {head.returncode}:\n{log.read_text()[-3000:]}"
        try:
            _state_api_tasks(address)
            return
        except (RayStateApiException, ConnectionError):
            assert time.monotonic() < deadline, f"no state API at {address}:\n{log.read_text()[-3000:]}"
            time.sleep(1)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("corpus")
    for name in RECORDINGS:
        build_twin(name)
        (folder / name).mkdir()
        for file in ("task.yaml", "transcript.jsonl"):
            (folder / name / file).write_bytes((ROOT / "transcripts" / name / file).read_bytes())
        # Recordings made before model.in_image existed: their checkpoint is in the twin image, as the twin
        # tasks now say; setdefault leaves a re-recorded corpus as it is.
        task = task_data(ROOT / "transcripts" / name / "task.yaml")  # host commands resolved from the original
        task["model"].setdefault("in_image", True)
        task["model"].setdefault("overlay", False)
        (folder / name / "task.yaml").write_text(yaml.safe_dump(task, sort_keys=False))
    return folder


def _eval_command(corpus: Path, address: str, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "porter.commands.cli",
        "eval",
        str(corpus),
        "--ray",
        address,
        "--out",
        str(out),
        "--trust-recorded-tasks",  # the project's own recordings: their twin builds and device services
        *extra,
    ]


def _board(out: Path) -> dict:
    (folder,) = out.iterdir()
    return json.loads((folder / "leaderboard.json").read_text())


def _cell_states(address: str, since: float) -> dict[str, list[str]]:
    """The porter cells Ray has recorded since `since` (epoch s), name -> states in submission order."""
    states: dict[str, list[str]] = {}
    for task in sorted(_state_api_tasks(address), key=lambda t: t.creation_time_ms or 0):
        if task.name in CELLS and (task.creation_time_ms or 0) >= since * 1000:
            states.setdefault(task.name, []).append(task.state)
    return states


def _wait_for_states(address: str, since: float, done) -> dict[str, list[str]]:
    """Ray reports task events a second or so late: poll until `done(states)` or 30 s."""
    deadline = time.monotonic() + 30
    while not done(states := _cell_states(address, since)) and time.monotonic() < deadline:
        time.sleep(1)
    return states


def test_eval_on_ray_writes_both_entries_and_ray_lists_the_cells_finished(ray_head, corpus, tmp_path):
    started = time.time()
    result = subprocess.run(
        _eval_command(corpus, ray_head, tmp_path / "evals", "--ray-resource", "porter_slot=1"),
        capture_output=True,
        text=True,
        timeout=EVAL_TIMEOUT_S,
    )
    assert result.returncode == 0, result.stderr
    board = _board(tmp_path / "evals")
    assert sorted(entry["name"] for entry in board["entries"]) == sorted(RECORDINGS)
    assert board["totals"]["playbook (replayed)"]["runs"] == 2  # by the model that recorded them
    for entry in board["entries"]:
        _assert_replayed_and_shipped(entry, next((tmp_path / "evals").iterdir()) / "runs")
    assert "finished per node:" in result.stderr
    states = _wait_for_states(ray_head, started, lambda s: s == {cell: ["FINISHED"] for cell in CELLS})
    assert states == {cell: ["FINISHED"] for cell in CELLS}


def _assert_replayed_and_shipped(entry: dict, runs_dir: Path) -> None:
    """The cell replayed its recording on the node (reproduced, or diverged where the shared twin image was
    rebuilt from another tree meanwhile) and its run directory came back and was unpacked under runs_dir."""
    assert entry["steps"] > 0 and entry["outcome"].startswith(("reproduced", "diverged")), entry
    run_dir = Path(entry["run_dir"])
    assert run_dir.parent == runs_dir
    assert (run_dir / "transcript.jsonl").stat().st_size > 0 and (run_dir / "state.json").is_file()


def test_a_cell_whose_worker_is_killed_is_run_again(ray_head, corpus, tmp_path, docker_client):
    started = time.time()
    driver = subprocess.Popen(
        _eval_command(corpus, ray_head, tmp_path / "evals", "--ray-resource", "porter_slot=1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    victim = _running_cell(ray_head, started, docker_client)
    os.kill(victim.worker_pid, signal.SIGKILL)
    victim = victim.name
    _stdout, stderr = driver.communicate(timeout=EVAL_TIMEOUT_S)
    assert driver.returncode == 0, stderr
    entries = {entry["name"]: entry for entry in _board(tmp_path / "evals")["entries"]}
    assert set(entries) == set(RECORDINGS)
    killed = entries[victim.removeprefix("porter-eval: ").removesuffix(" x replay")]
    assert "ran again after attempt 1: WorkerCrashedError" in killed["note"], killed
    _assert_replayed_and_shipped(killed, next((tmp_path / "evals").iterdir()) / "runs")
    states = _wait_for_states(ray_head, started, lambda s: s.get(victim) == ["FAILED", "FINISHED"])
    assert states[victim] == ["FAILED", "FINISHED"]
    assert _leftover_containers(docker_client) == []  # the killed attempt's sandbox was reaped


def _running_cell(address: str, since: float, client: docker.DockerClient):
    """The state API's record of the first running cell whose sandbox container is up."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        up = _cell_containers(client)
        for task in _state_api_tasks(address):
            recording = task.name.removeprefix("porter-eval: ").removesuffix(" x replay")
            fresh = (task.creation_time_ms or 0) >= since * 1000
            if task.name in CELLS and task.state == "RUNNING" and fresh and any(recording in n for n in up):
                return task
        time.sleep(0.2)
    raise AssertionError("no porter cell was seen running with its container within 120 s")


def test_ctrl_c_cancels_the_cells_and_writes_what_finished(ray_head, corpus, tmp_path, docker_client):
    started = time.time()
    driver = subprocess.Popen(
        _eval_command(corpus, ray_head, tmp_path / "evals", "--ray-resource", "porter_slot=1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # a background shell may ignore it
    )
    _running_cell(ray_head, started, docker_client)
    driver.send_signal(signal.SIGINT)
    _stdout, stderr = driver.communicate(timeout=EVAL_TIMEOUT_S)
    assert driver.returncode == 130 and "interrupted: the cells still running were cancelled" in stderr, stderr
    notes = [entry["note"] for entry in _board(tmp_path / "evals")["entries"]]
    assert len(notes) == 2 and any("(Ctrl-C)" in note for note in notes), notes
    assert _leftover_containers(docker_client) == []
    states = _wait_for_states(ray_head, started, lambda s: "RUNNING" not in str(s))
    assert set(states) <= CELLS and "RUNNING" not in str(states)


def _cell_containers(client: docker.DockerClient) -> list[str]:
    """Names of the containers of Ray cells: their repos are mounted from a porter-cell-* folder."""
    # sparse: one listing call, no per-container inspect that races with other users' containers going away
    containers = client.containers.list(all=True, sparse=True, filters={"label": "porter.managed=1"})
    return [
        c.attrs["Names"][0].lstrip("/")
        for c in containers
        if any("/porter-cell-" in mount.get("Source", "") for mount in c.attrs.get("Mounts", []))
    ]


def _leftover_containers(client: docker.DockerClient) -> list[str]:
    """Cell containers still there after up to 20 s (the surviving cell's own removal may be under way)."""
    for _ in range(20):
        if not (names := _cell_containers(client)):
            break
        time.sleep(1)
    return names


def test_a_cell_no_node_can_hold_fails_before_anything_runs(ray_head, corpus, tmp_path):
    result = subprocess.run(_eval_command(corpus, ray_head, tmp_path / "evals"), capture_output=True, text=True)
    assert result.returncode == 2
    assert "offers GPU=8" in result.stderr and "porter_slot=2" in result.stderr and "--ray-resource" in result.stderr
    assert not (tmp_path / "evals").exists()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--ray-resource", "porter_slot=0"], "expected NAME=AMOUNT with a positive amount"),
        (["--ray-resource", "porter_slot=1"], "--ray-resource needs --ray ADDRESS"),
        (["--ray", "127.0.0.1:{port}"], "no Ray head answers at 127.0.0.1:"),
    ],
)
def test_bad_ray_options_get_one_line(options, message, tmp_path):
    corpus = ROOT / "transcripts"
    options = [option.format(port=free_port()) for option in options]
    command = [sys.executable, "-m", "porter", "eval", str(corpus), "--trust-recorded-tasks", "--out", str(tmp_path)]
    command += options
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr


def test_a_run_too_big_to_ship_leaves_its_repos_then_logs_on_the_node(tmp_path, monkeypatch):
    run_dir = tmp_path / "node" / "twin-x-20260101T000000Z"
    for folder, size in (("repos/twin", 4000), ("logs", 3000), ("plots", 10)):
        (run_dir / folder).mkdir(parents=True)
        (run_dir / folder / "data").write_bytes(os.urandom(size))  # random bytes: gzip cannot shrink them
    (run_dir / "transcript.jsonl").write_text('{"seq": 1}\n')
    monkeypatch.setattr(eval_ray, "MAX_ARCHIVE_BYTES", 5000)
    archive, left = eval_ray.pack(run_dir)
    assert left == ["repos/"]
    (tmp_path / "runs").mkdir()
    first, second = (eval_ray.unpack(archive, tmp_path / "runs") for _ in range(2))
    assert second.name == f"{first.name}-2" and (second / "logs" / "data").stat().st_size == 3000
    assert not (second / "repos").exists() and (second / "transcript.jsonl").read_text() == '{"seq": 1}\n'
    monkeypatch.setattr(eval_ray, "MAX_ARCHIVE_BYTES", 2000)
    assert eval_ray.pack(run_dir)[1] == ["repos/", "root/", "logs/"]


def test_a_cell_whose_node_dies_is_listed_failed_with_the_reason(ray_head, corpus, tmp_path, docker_client):
    """A second node, the only one offering porter_node2, dies (every process of it SIGKILLed) under both cells:
    no live node can take another attempt, so each is listed failed with why; their containers are reaped."""
    from ray.util.state import list_nodes

    node = _start_node([f"--address={ray_head}", "--num-cpus=1", '--resources={"porter_node2": 2}'], tmp_path / "n2")
    try:
        deadline = time.monotonic() + HEAD_START_TIMEOUT_S
        while len(list_nodes(address=ray_head, filters=[("state", "=", "ALIVE")])) < 2:
            assert node.poll() is None and time.monotonic() < deadline, (tmp_path / "n2").read_text()[-3000:]
            time.sleep(1)
        started = time.time()
        driver = subprocess.Popen(
            _eval_command(corpus, ray_head, tmp_path / "evals", "--ray-resource", "porter_node2=1"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        _running_cell(ray_head, started, docker_client)
        for pid in _session_pids(node.pid):
            os.kill(pid, signal.SIGKILL)
        _stdout, stderr = driver.communicate(timeout=EVAL_TIMEOUT_S)
    finally:
        _stop_session(node.pid)
    assert driver.returncode == 0, stderr
    notes = {entry["name"]: entry["note"] for entry in _board(tmp_path / "evals")["entries"]}
    assert set(notes) == set(RECORDINGS)
    for note in notes.values():
        assert note.startswith("failed: attempt 1: ") and "no live node offers porter_node2=1" in note, notes
    assert _leftover_containers(docker_client) == []
