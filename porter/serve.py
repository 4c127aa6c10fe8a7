"""Launch the task's serve command in the sandbox and wait until it is healthy, dead or too slow.

Covers rendering the command from the task's template and the current flags, spawning it with its
log streamed to `logs/`, polling the health endpoint from the host, and turning every way a start
can end (healthy, exited, hung) into one `Launch` result with the triage of its log. Does not decide
what to do about a crash (the agent does) and does not measure anything but start-up time.
"""

from __future__ import annotations

import shlex
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from porter.sandbox import Process, Sandbox
from porter.task import FlagValue, Task, render_flags
from porter.triage import Triage, triage_file

POLL_INTERVAL_S = 0.5


@dataclass
class Launch:
    healthy: bool
    seconds: float
    log_path: Path
    command: str
    exit_code: int | None = None
    triage: Triage | None = None  # always set: the crash, or the warnings of a healthy start
    process: Process | None = field(default=None, repr=False)

    @property
    def crash_class(self) -> str | None:
        return None if self.healthy else (self.triage.category if self.triage else "other")


def render_command(task: Task, flags: dict[str, FlagValue]) -> str:
    """The serve command for these flags; the template's {placeholders} are the task's own values."""
    values = {
        "model_path": shlex.quote(task.model.container_path),
        "host": task.serve.host,
        "port": str(task.serve.port),
        "flags": shlex.join(render_flags(flags)),
    }
    try:
        return task.serve.command.format(**values).strip()
    except (KeyError, IndexError) as exc:
        raise ValueError(f"serve.command uses an unknown placeholder {exc}; known: {sorted(values)}") from None


def health_ok(url: str, timeout_s: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def launch(sandbox: Sandbox, task: Task, flags: dict[str, FlagValue], log_path: Path) -> Launch:
    """Start the server; returns once it is healthy, has exited, or has missed the start-up timeout."""
    command = render_command(task, flags)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    process = sandbox.spawn(command, log_path)
    health_url = sandbox.endpoint(task.serve.port) + task.serve.health_path
    deadline = started + task.serve.startup_timeout_s
    while True:
        if health_ok(health_url):
            seconds = time.monotonic() - started
            return Launch(True, seconds, log_path, command, triage=triage_file(log_path), process=process)
        if not process.alive():
            seconds = time.monotonic() - started
            code = process.exit_code()
            return Launch(False, seconds, log_path, command, exit_code=code, triage=triage_file(log_path))
        if time.monotonic() > deadline:
            process.stop(grace_s=10)
            seconds = time.monotonic() - started
            with open(log_path, "a", encoding="utf-8") as log:
                log.write(
                    f"\n[porter] startup timeout: {health_url} did not answer 200 within "
                    f"{task.serve.startup_timeout_s:.0f} s; the server was stopped\n"
                )
            # triage reads the line just written as startup_timeout, like an engine's own start-up timeout
            return Launch(False, seconds, log_path, command, triage=triage_file(log_path))
        time.sleep(POLL_INTERVAL_S)
