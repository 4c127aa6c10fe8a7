"""The `porter sandbox exec | shell | prune` commands, as functions porter/commands/cli.py calls.

Covers the manual sandbox of a task (run id `manual-<task>-<key>`, run dir `<runs_dir>/<task>-manual-<key>`,
the key a hash of the task file's full path; reused between commands) and removing porter's leftover
containers: those whose owning porter process (host, pid and its start time, from the labels) is gone,
or, unowned, whose run directory is gone or which are stopped; young "created" helpers are spared.
Does not cover the sandboxes of `porter run`, which the agent loop creates with its own run ids.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import shlex
import subprocess
import sys
from pathlib import Path

import docker
import docker.errors

from porter.sandbox import make_sandbox
from porter.sandbox.docker_options import (
    INTERNAL_NETWORK,
    MANAGED_LABEL,
    OWNER_HOST,
    OWNER_PID,
    REACH_HOST_NETWORK,
    owner_alive,
)
from porter.sandbox.interface import SandboxError
from porter.task import Task, TaskError, load_task
from porter.terminal import printable

# The manual sandbox is for a person: show up to 10 MB of output instead of the agent's 20 kB.
MANUAL_OUTPUT_LIMIT = 10_000_000
HELPER_GRACE_S = 600  # a "created" container younger than this may be in use by a porter starting up


def manual_sandbox(task: Task, task_path: str):
    """The task's manual sandbox, keyed by the task file's full path: two checkouts never share one."""
    key = hashlib.sha256(str(Path(task_path).resolve()).encode()).hexdigest()[:8]
    run_dir = Path(task.outputs.runs_dir) / f"{task.name}-manual-{key}"
    sandbox = make_sandbox(task, run_dir, f"manual-{task.name}-{key}")
    sandbox.owned = False  # shared by the CLI calls of a person, each a new process: no owner pid
    return sandbox


def sandbox_exec_main(task_path: str, command: list[str], timeout: float) -> int:
    """Run `command` in the task's manual sandbox, print its output, return its exit code.

    One word is run as a shell line (`porter sandbox exec T -- 'ls | wc -l'`); several are quoted as argv.
    """
    try:
        sandbox = manual_sandbox(load_task(task_path), task_path)
        sandbox.output_limit = MANUAL_OUTPUT_LIMIT
        sandbox.start()
        result = sandbox.exec(command[0] if len(command) == 1 else shlex.join(command), timeout)
    except (TaskError, SandboxError) as exc:
        print(f"porter: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, TaskError) else 1
    # a terminal is shown the output without what it would act on (escapes that retitle it, write the clipboard);
    # a pipe or a file gets every byte as the command wrote it
    sys.stdout.write(printable(result.output) if sys.stdout.isatty() else result.output)
    sys.stdout.flush()
    if result.timed_out:
        print(f"porter: timed out after {timeout:g} s; the command's process group was killed", file=sys.stderr)
    return result.exit_code


def sandbox_shell_main(task_path: str) -> int:
    """An interactive bash in the task's manual sandbox (docker exec -it, or a local shell in its root)."""
    try:
        task = load_task(task_path)
        sandbox = manual_sandbox(task, task_path)
        sandbox.start()
    except (TaskError, SandboxError) as exc:
        print(f"porter: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, TaskError) else 1
    workdir = task.sandbox.workdir
    if task.sandbox.kind == "local":
        return subprocess.call(["bash", "-i"], cwd=sandbox.host_path(workdir), env=sandbox.environment())
    host = ["-H", task.sandbox.docker_host] if task.sandbox.docker_host else []
    argv = ["docker", *host, "exec", "-it", "-w", workdir, sandbox.container.name, "bash"]
    os.execvp(argv[0], argv)
    return 0  # not reached: execvp replaces this process


def sandbox_prune_main() -> int:
    """Remove porter's containers that belong to no live run, then its network when nothing can use it."""
    try:
        client = docker.from_env()
        containers = client.containers.list(all=True, filters={"label": f"{MANAGED_LABEL}=1"})
    except docker.errors.DockerException as exc:
        print(f"porter: cannot reach the Docker engine: {exc}", file=sys.stderr)
        return 1
    removed, waiting = 0, 0
    for container in containers:
        reason = prune_reason(container.labels, container.status, _age_s(container))
        if reason is None:
            waiting += container.status != "running"  # may join the network when it starts
            continue
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            continue  # removed meanwhile (its run ended, or another prune)
        print(f"removed {container.name} ({reason})")
        removed += 1
    for network in client.networks.list(names=[INTERNAL_NETWORK, REACH_HOST_NETWORK]):
        if network.name not in (INTERNAL_NETWORK, REACH_HOST_NETWORK):
            continue  # docker's name filter matches substrings
        network.reload()
        if not network.containers and not waiting:
            network.remove()
            print(f"removed network {network.name} (unused)")
    print(f"pruned {removed} of {len(containers)} porter containers")
    return 0


def prune_reason(labels: dict[str, str], status: str, age_s: float) -> str | None:
    """Why a porter container may be removed, or None when it may belong to a live run and is spared."""
    alive = owner_alive(labels)
    if alive:
        return None
    if status == "created" and age_s < HELPER_GRACE_S:
        return None  # a helper (or a sandbox) another porter is creating right now
    if alive is False:
        return f"its porter process {labels.get(OWNER_PID)} is gone"
    if labels.get(OWNER_HOST) is not None:
        return None  # another host's porter owns it: its liveness cannot be checked from here
    run_dir = labels.get("porter.run_dir")
    if run_dir is not None and not Path(run_dir).exists():
        return "run directory gone"
    return status if status in ("created", "exited", "dead") else None


def _age_s(container) -> float:
    try:
        # docker writes nanoseconds ("...:48.123456789Z"): Python 3.11's fromisoformat keeps the microseconds
        stamp = dt.datetime.fromisoformat(container.attrs.get("Created", ""))
    except ValueError:
        return float("inf")
    return (dt.datetime.now(dt.UTC) - stamp).total_seconds()
