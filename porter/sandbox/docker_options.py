"""How a task becomes `docker create` arguments, as pure functions that can be checked without an engine.

Covers the container name and labels, the image name, devices and the other ROCm options (taken
from the task, nothing hard-coded), the resource limits (memory with no swap beyond it, processes, the
size of one written file), mounts (the task's, the weights read-only, the host trees of the repos and of
the model overlay, the scratch dir; none may reach porter's own state folder), environment (with secrets
refused) and the network mode. Also the host-side checks that turn a missing device, weights directory or
mount source into a clear error before docker sees it. Does not talk to the engine: docker.py does.

Network `none` is served by a porter-managed `--internal` bridge network with inter-container
traffic disabled: the host reaches the server at the container's IP (the checks run on the
host), while the container gets no NAT, no outside DNS, and (after start, see docker.py) no
default route, and a firewall rule on the Docker host refuses every connection it opens to the host's
own addresses (porter/sandbox/host_firewall.py); a task with `reach_host` joins a second internal
network without that rule. Docker does not publish ports on internal networks, so `endpoint()` uses the
IP. `bridge` publishes the serve port on 127.0.0.1 (a free host port); `host` shares the host's stack.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from docker.types import Mount, Ulimit
from docker.utils import parse_bytes

from porter import state_dir
from porter.sandbox.interface import SCRATCH_DIR, SandboxError, refuse_secrets
from porter.sandbox.trees.overlay import WEIGHTS_MOUNT
from porter.task import Task

INTERNAL_NETWORK = "porter-internal"  # network none: the host's listeners refused (host_firewall.py)
REACH_HOST_NETWORK = "porter-internal-host"  # network none with sandbox.reach_host: the host's listeners reachable
MANAGED_LABEL = "porter.managed"
OWNER_HOST, OWNER_PID, OWNER_START = "porter.owner_host", "porter.owner_pid", "porter.owner_start"
# The container idles under docker's init (tini): it reaps the process groups porter kills and
# forwards `docker stop`'s TERM, so stopping takes milliseconds, not the 10 s kill timeout.
IDLE_ENTRYPOINT = ["sleep", "infinity"]


def image_name(task: Task) -> str:
    """The image the sandbox runs: the task's image, or the tag porter builds its Dockerfile under."""
    return task.sandbox.image or f"porter-task-{task.name.lower()}:latest"


def owner_labels() -> dict[str, str]:
    """Who owns a container (host, pid and the pid's start time, so a reused pid is not mistaken for the owner):
    `porter sandbox prune` spares what a live porter process owns."""
    return {OWNER_HOST: os.uname().nodename, OWNER_PID: str(os.getpid()), OWNER_START: process_start(os.getpid())}


def proc_stat(pid: int) -> list[str]:
    """/proc/PID/stat fields from the state on (field 3 onward: the command name before may hold spaces); empty
    when there is no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return []


def process_start(pid: int) -> str:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22), "" when it does not exist."""
    fields = proc_stat(pid)
    return fields[19] if fields else ""


def owner_alive(container_labels: dict[str, str]) -> bool | None:
    """True/False when the owner is (not) running on this host; None when it is another host's or unlabelled."""
    pid = container_labels.get(OWNER_PID, "")
    if container_labels.get(OWNER_HOST) != os.uname().nodename or not pid.isdigit():
        return None
    start = process_start(int(pid))
    return bool(start) and start == container_labels.get(OWNER_START)


def repo_host_dir(run_dir: Path, repo_name: str) -> Path:
    return run_dir / "repos" / repo_name


def container_options(task: Task, run_id: str, run_dir: Path, owned: bool = True) -> dict:
    """Keyword arguments of `client.containers.create` for the task's sandbox in `run_dir` (`owned`: labelled
    with this process as its owner)."""
    spec = task.sandbox
    refuse_secrets(spec.env, task)
    options: dict = {
        "image": image_name(task),
        "name": "porter-" + re.sub(r"[^A-Za-z0-9_.-]", "-", run_id),
        "entrypoint": IDLE_ENTRYPOINT,
        "init": True,
        "detach": True,
        "labels": {
            "porter.run": run_id,
            "porter.task": task.name,
            "porter.run_dir": str(run_dir),
            MANAGED_LABEL: "1",
            **(owner_labels() if owned else {}),
        },
        "environment": dict(spec.env),
        "working_dir": spec.workdir,
        # docker's short form: HOST[:CONTAINER[:PERMISSIONS]]; a bare path maps to itself.
        "devices": [device if ":" in device else f"{device}:{device}:rwm" for device in spec.devices],
        "group_add": list(spec.group_add),
        "security_opt": list(spec.security_opt),
        "cap_add": list(spec.cap_add),
        "mounts": _mounts(task, run_dir),
    }
    if spec.ipc:
        options["ipc_mode"] = spec.ipc
    if spec.shm_size:
        options["shm_size"] = spec.shm_size
    options.update(_limits(task))
    options.update(_network_options(task))
    return options


def _limits(task: Task) -> dict:
    """The task's bounds: memory with no swap beyond it, processes and threads, the size of one written file."""
    spec, limits = task.sandbox, {}
    if spec.memory:
        limits["mem_limit"] = limits["memswap_limit"] = spec.memory
    if spec.pids:
        limits["pids_limit"] = spec.pids
    if spec.max_file_size:
        file_size = parse_bytes(spec.max_file_size)  # as docker reads the memory size: k, m, g are powers of 1024
        limits["ulimits"] = [Ulimit(name="fsize", soft=file_size, hard=file_size)]
    return limits


def internal_network(task: Task) -> str:
    return REACH_HOST_NETWORK if task.sandbox.reach_host else INTERNAL_NETWORK


def docker_run_words(task: Task, run_dir: Path = Path("RUN_DIR")) -> list[str]:
    """The options of the task's sandbox as `docker run` would spell them, for people reading `porter validate`."""
    options = container_options(task, "RUN_ID", run_dir)
    words = [f"--device {device.split(':', 1)[0]}" for device in options["devices"]]
    words += [f"--group-add {group}" for group in options["group_add"]]
    limits = (("mem_limit", "--memory"), ("memswap_limit", "--memory-swap"), ("pids_limit", "--pids-limit"))
    for key, flag in (("ipc_mode", "--ipc"), ("shm_size", "--shm-size"), *limits, ("network_mode", "--network")):
        if key in options:
            words.append(f"{flag} {options[key]}")
    words += [f"--ulimit {limit['Name']}={limit['Hard']}" for limit in options.get("ulimits", [])]
    if "network" in options:
        closed = "" if task.sandbox.reach_host else "; the host's own listeners refused"
        words.append(f"--network {options['network']} (internal: no route out{closed})")
    words += [f"--security-opt {option}" for option in options["security_opt"]]
    words += [f"--cap-add {cap}" for cap in options["cap_add"]]
    for mount in options["mounts"]:
        words.append(f"-v {mount['Source']}:{mount['Target']}" + (":ro" if mount["ReadOnly"] else ""))
    words += [f"-e {name}" for name in options["environment"]]
    return words


def _mounts(task: Task, run_dir: Path) -> list[Mount]:
    mounts = [
        Mount(target=mount.container, source=mount.host, type="bind", read_only=mount.read_only)
        for mount in task.sandbox.mounts
    ]
    model = task.model
    if not model.in_image:  # the host weights, read-only: behind the overlay's links when it is on, else at its path
        target = WEIGHTS_MOUNT if model.overlay else model.container_path
        mounts.append(Mount(target=target, source=model.path, type="bind", read_only=True))
    for repo in task.patchable_repos():
        tree = repo_host_dir(run_dir, repo.name)
        mounts.append(Mount(target=repo.path, source=str(tree), type="bind"))
        # The git directory is porter's: read-only inside (git log/diff work there), so nothing the sandbox
        # writes can reach a hook, a config or an fsmonitor that porter's host-side git would run.
        mounts.append(Mount(target=f"{repo.path}/.git", source=str(tree / ".git"), type="bind", read_only=True))
    mounts.append(Mount(target=SCRATCH_DIR, source=str(run_dir / "scratch"), type="bind"))
    for mount in mounts:
        if state_dir.shares_state(mount["Source"]):
            raise SandboxError(
                f"the sandbox mount {mount['Source']} (-> {mount['Target']}) would give it porter's own state folder "
                f"{state_dir.state_dir()} (${state_dir.STATE_VARIABLE}: the measurement cache and lock), "
                f"which the sandbox could rewrite or hold; point ${state_dir.SANDBOX_CACHE_VARIABLE} (the "
                f"sandbox's cache in the real tasks) and ${state_dir.STATE_VARIABLE} at different folders"
            )
    return mounts


def _network_options(task: Task) -> dict:
    network = task.sandbox.network
    if network == "host":
        return {"network_mode": "host"}
    if network == "bridge":
        return {"network_mode": "bridge", "ports": {f"{task.serve.port}/tcp": ("127.0.0.1", None)}}
    return {"network": internal_network(task)}


def check_host_resources(task: Task) -> None:
    """Fail with the device or mount named when the host lacks it (only meaningful for a local engine)."""
    for device in task.sandbox.devices:
        host_path = device.split(":", 1)[0]
        if not Path(host_path).exists():
            raise SandboxError(
                f"device {host_path} does not exist on this host (task {task.name!r}, sandbox.devices); "
                f"this task needs the GPU node it was written for, or remove the device from the task"
            )
    if not task.model.in_image and not Path(task.model.path).is_dir():
        raise SandboxError(
            f"model.path {task.model.path} is not a directory on this host (task {task.name!r}); download the "
            f"checkpoint there (see the README's real-run section) or fix the path"
        )
    for mount in task.sandbox.mounts:
        if not Path(mount.host).exists():
            raise SandboxError(
                f"mount source {mount.host} (-> {mount.container}) does not exist on this host "
                f"(task {task.name!r}, sandbox.mounts); create it or fix the path"
            )
