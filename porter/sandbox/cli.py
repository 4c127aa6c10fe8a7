"""The `porter sandbox exec | shell | prune` commands, as functions porter/cli.py calls.

Covers the manual sandbox of a task (run id `manual-<task>`, run dir `<runs_dir>/<task>-manual`,
reused between commands) and removing porter's leftover containers by label. Does not cover the
sandboxes of `porter run`, which the agent loop creates with its own run ids.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import docker
import docker.errors

from porter.sandbox.base import SandboxError
from porter.sandbox.docker_options import INTERNAL_NETWORK, MANAGED_LABEL
from porter.task import Task, TaskError, load_task

# The manual sandbox is for a person: show up to 10 MB of output instead of the agent's 20 kB.
MANUAL_OUTPUT_LIMIT = 10_000_000


def manual_sandbox(task: Task):
    from porter.sandbox import make_sandbox  # deferred: porter.sandbox imports this module

    run_dir = Path(task.outputs.runs_dir) / f"{task.name}-manual"
    return make_sandbox(task, run_dir, f"manual-{task.name}")


def sandbox_exec_main(task_path: str, command: list[str], timeout: float) -> int:
    """Run `command` in the task's manual sandbox, print its output, return its exit code.

    One word is run as a shell line (`porter sandbox exec T -- 'ls | wc -l'`); several are quoted as argv.
    """
    try:
        sandbox = manual_sandbox(load_task(task_path))
        sandbox.output_limit = MANUAL_OUTPUT_LIMIT
        sandbox.start()
        result = sandbox.exec(command[0] if len(command) == 1 else shlex.join(command), timeout)
    except (TaskError, SandboxError) as exc:
        print(f"porter: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, TaskError) else 1
    sys.stdout.write(result.output)
    sys.stdout.flush()
    if result.timed_out:
        print(f"porter: timed out after {timeout:g} s; the command's process group was killed", file=sys.stderr)
    return result.exit_code


def sandbox_shell_main(task_path: str) -> int:
    """An interactive bash in the task's manual sandbox (docker exec -it, or a local shell in its root)."""
    try:
        task = load_task(task_path)
        sandbox = manual_sandbox(task)
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
    """Remove porter's containers that are stopped, or whose run directory no longer exists; then its network."""
    try:
        client = docker.from_env()
        containers = client.containers.list(all=True, filters={"label": f"{MANAGED_LABEL}=1"})
    except docker.errors.DockerException as exc:
        print(f"porter: cannot reach the Docker engine: {exc}", file=sys.stderr)
        return 1
    removed = 0
    for container in containers:
        run_dir = container.labels.get("porter.run_dir")
        stale = run_dir is not None and not Path(run_dir).exists()
        if container.status in ("created", "exited", "dead") or stale:
            reason = "run directory gone" if stale else container.status
            container.remove(force=True)
            print(f"removed {container.name} ({reason})")
            removed += 1
    for network in client.networks.list(names=[INTERNAL_NETWORK]):
        network.reload()
        if not network.containers:
            network.remove()
            print(f"removed network {INTERNAL_NETWORK} (unused)")
    print(f"pruned {removed} of {len(containers)} porter containers")
    return 0
