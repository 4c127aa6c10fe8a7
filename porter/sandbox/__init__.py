"""Sandboxes: where the agent's commands and the server run. Picked by name: `docker` or `local`.

Covers the public surface (protocols, results, errors, the registry and `make_sandbox`). Implementations live in
docker.py and local.py; the trees the agent patches in trees/; the `porter sandbox ...` commands in porter.commands.
"""

from __future__ import annotations

from pathlib import Path

from porter.sandbox.docker import DockerSandbox
from porter.sandbox.interface import Process, Sandbox, SandboxDied, SandboxError
from porter.sandbox.local import LocalSandbox
from porter.task import Task

SANDBOXES: dict[str, type] = {"docker": DockerSandbox, "local": LocalSandbox}


def make_sandbox(task: Task, run_dir: Path, run_id: str) -> Sandbox:
    """The sandbox of kind `task.sandbox.kind` for one run (not started: call start())."""
    kind = task.sandbox.kind
    if kind not in SANDBOXES:
        raise ValueError(f"unknown sandbox kind {kind!r}; valid kinds: {sorted(SANDBOXES)}")
    return SANDBOXES[kind](task, Path(run_dir), run_id)


__all__ = [
    "SANDBOXES",
    "DockerSandbox",
    "LocalSandbox",
    "Process",
    "Sandbox",
    "SandboxDied",
    "SandboxError",
    "make_sandbox",
]
