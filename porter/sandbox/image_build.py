"""A task's own image build (`sandbox.image_build`): run before a Docker sandbox starts, so a local-only
image (the twin's, a private build) is never missing on `run`, `replay` or `eval` (from a local task's build only:
a recording's is refused by evaluate/replay_run.py's recorded_task).

The command runs on the host (a relative first word is relative to the task file, resolved at load) and
must leave `sandbox.image` on the engine; it may skip the build when the image is current (the twin's
build.sh compares a content hash). Its output goes to `logs/image-build.log`. Does not cover building from
a Dockerfile (docker.py does that for `sandbox.dockerfile`) or pulling: porter never pulls.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from porter.sandbox.interface import SandboxError
from porter.task import Task


def build_task_image(task: Task, run_dir: Path, timeout_s: float = 1800) -> None:
    """Run the task's image build command, if it declares one and runs in Docker; one clear error if it fails."""
    command = task.sandbox.image_build
    if task.sandbox.kind != "docker" or not command:
        return
    log_path = run_dir / "logs" / "image-build.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(log_path, "ab") as log:
            done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxError(f"sandbox.image_build could not run ({' '.join(command)}): {exc}") from None
    if done.returncode != 0:
        tail = log_path.read_text(errors="replace")[-1500:].strip()
        raise SandboxError(
            f"sandbox.image_build failed (exit {done.returncode}): {' '.join(command)}\n{tail}\n(whole log: {log_path})"
        )
