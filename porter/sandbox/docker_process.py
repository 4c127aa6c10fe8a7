"""DockerProcess: a background command in a DockerSandbox (the server), as the `Process` protocol.

Covers streaming the command's output into a host log file as it arrives (secrets redacted and the size
capped on the way: interface.stream_to_log), liveness and exit code from docker's exec record, and stopping
its process group (TERM, then KILL). Does not cover starting it: DockerSandbox.spawn does, in a session whose
group id is written to `pgid_file`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Protocol

import docker
import docker.errors

from porter.sandbox.interface import stream_to_log


class ProcessHost(Protocol):
    """What a DockerProcess needs of its sandbox (DockerSandbox is one): the container, the engine, group signals."""

    run_id: str
    client: docker.DockerClient

    def signal_group(self, pgid_file: str, signal: str) -> bool: ...


class DockerProcess:
    """A background command in the sandbox; its output is appended to a host file as it arrives."""

    def __init__(self, sandbox: ProcessHost, exec_id: str, stream, log_path: Path, pgid_file: str):
        self.sandbox = sandbox
        self.exec_id = exec_id
        self.pgid_file = pgid_file
        self.writer = stream_to_log(stream, log_path)

    def record(self) -> dict:
        return {"sandbox": "docker", "container": self.sandbox.run_id, "pgid_file": self.pgid_file}

    def _inspect(self) -> dict:
        try:
            return self.sandbox.client.api.exec_inspect(self.exec_id)
        except docker.errors.NotFound:
            return {"Running": False, "ExitCode": None}

    def alive(self) -> bool:
        if self._inspect()["Running"]:
            return True
        # Callers read the log as soon as the process is over (a crash's traceback is its last
        # lines): let the writer drain the stream first.
        self.writer.join(5)
        return False

    def exit_code(self) -> int | None:
        return None if self.alive() else self._inspect()["ExitCode"]

    def stop(self, grace_s: float = 10) -> None:
        """TERM the process group, KILL it if it is still there after `grace_s`."""
        for signal, wait_s in (("TERM", grace_s), ("KILL", 5.0)):
            if not self._inspect()["Running"]:
                break
            delivered = self.sandbox.signal_group(self.pgid_file, signal)
            deadline = time.monotonic() + wait_s
            while self._inspect()["Running"] and time.monotonic() < deadline:
                time.sleep(0.05)
                if not delivered:  # spawned a moment ago: the session has not written its group id yet
                    delivered = self.sandbox.signal_group(self.pgid_file, signal)
        self.writer.join(5)
