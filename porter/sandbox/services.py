"""Host processes a task's sandbox needs (`sandbox.services`), started before the sandbox and stopped with
the run.

Each service gets a directory it shares with the sandbox: `<run_dir>/services/<name>` bind-mounted at the
service's `mount` path for a Docker sandbox, or the same path under the local sandbox's root (where a
sandbox path already lives). A service typically serves a unix socket there, so the sandbox reaches it
without a network. Its output goes to `logs/service-<name>.log`; it runs in its own session and is killed
with its process group. A service gets only the environment a program needs to run (SERVICE_ENVIRONMENT:
paths, locale, home), never porter's own (its provider keys and every other secret): the sandbox talks to
it. Does not cover what a service does: the task names the command.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from porter.sandbox.interface import SandboxError
from porter.task import Mount, ServiceSpec, Task

# What a host service inherits of porter's environment: enough to find and run its program, nothing else.
SERVICE_ENVIRONMENT = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")
LOG_TAIL_BYTES = 1500  # of a failed service's log, shown in the error
SHARED_DIRS = "services"  # under the run directory: one folder per service, the sandbox's to write


@dataclass
class Service:
    spec: ServiceSpec
    process: subprocess.Popen
    shared_dir: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=5)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=5)


def shared_dir(task: Task, run_dir: Path, spec: ServiceSpec) -> Path:
    if task.sandbox.kind == "local":
        return run_dir / "root" / spec.mount.lstrip("/")
    return run_dir / SHARED_DIRS / spec.name


def start_services(task: Task, run_dir: Path) -> list[Service]:
    """Start every service of the task and wait until each is ready; a Docker sandbox gets their mounts."""
    started: list[Service] = []
    try:
        for spec in task.sandbox.services:
            started.append(_start(task, run_dir, spec))
    except SandboxError:
        stop_services(started)
        raise
    if task.sandbox.kind == "docker":
        mounted = {mount.container for mount in task.sandbox.mounts}
        for service in started:
            if service.spec.mount not in mounted:
                mount = Mount(host=str(service.shared_dir), container=service.spec.mount, read_only=False)
                task.sandbox.mounts.append(mount)
    return started


def _start(task: Task, run_dir: Path, spec: ServiceSpec) -> Service:
    directory = shared_dir(task, run_dir, spec)
    directory.mkdir(parents=True, exist_ok=True)
    if spec.ready:
        (directory / spec.ready).unlink(missing_ok=True)
    log_path = run_dir / "logs" / f"service-{spec.name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    command = [word.replace("{dir}", str(directory)) for word in spec.command]
    environment = {name: os.environ[name] for name in SERVICE_ENVIRONMENT if name in os.environ}
    with open(log_path, "ab") as log:
        try:
            process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=environment
            )
        except OSError as exc:
            raise SandboxError(f"sandbox service {spec.name!r} cannot start: {exc}") from None
    service = Service(spec, process, directory)
    deadline = time.monotonic() + spec.ready_timeout_s
    while spec.ready and not (directory / spec.ready).exists():
        if process.poll() is not None or time.monotonic() > deadline:
            service.stop()
            tail = _tail(log_path)
            what = f"exited with {process.returncode}" if process.returncode is not None else "was not ready in time"
            raise SandboxError(f"sandbox service {spec.name!r} {what} ({' '.join(command)}):\n{tail}")
        time.sleep(0.05)
    return service


def _tail(log_path: Path) -> str:
    """The end of a service's log, read from its last bytes (the log may be huge)."""
    with open(log_path, "rb") as log:
        log.seek(max(log.seek(0, os.SEEK_END) - LOG_TAIL_BYTES, 0))
        return log.read(LOG_TAIL_BYTES).decode(errors="replace").strip()


def stop_services(services: list[Service]) -> None:
    for service in services:
        service.stop()
