"""What every sandbox shares: the protocols, results, errors, output capping and path confinement.

Covers the `Sandbox` and `Process` protocols, `ExecResult`, the error types, the refusal of secrets
in a sandbox environment, the head+tail capture of command output (bounded memory, full copy in the
run's exec log) and the mapping of sandbox paths onto host directories. Does not cover running
anything: docker.py and local.py do that.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import shutil
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from porter.task import Task

# Where read_file/write_file may go besides the repos; bind-mounted from <run_dir>/scratch.
SCRATCH_DIR = "/porter/scratch"
# Bytes of output the caller sees: half from the head, half from the tail.
DEFAULT_OUTPUT_LIMIT = 20_000
SECRET_NAME_PATTERNS = ("*_API_KEY", "*_TOKEN")


class SandboxError(Exception):
    """A sandbox operation that cannot be done; the message says what and what to do instead."""


class SandboxDied(SandboxError):
    """The sandbox (container) stopped under us; `last_log_lines` holds its final output."""

    def __init__(self, message: str, last_log_lines: list[str]):
        self.last_log_lines = last_log_lines
        tail = "\n".join(last_log_lines) if last_log_lines else "(the container printed nothing)"
        super().__init__(f"{message}\nlast log lines:\n{tail}")


@dataclass
class ExecResult:
    exit_code: int
    output: str
    truncated: bool
    duration_s: float
    timed_out: bool = False


@runtime_checkable
class Process(Protocol):
    def alive(self) -> bool: ...

    def exit_code(self) -> int | None: ...

    def stop(self, grace_s: float = 10) -> None: ...

    def record(self) -> dict:
        """JSON-able identity of the process group, kept in the run state so a later porter can kill it."""
        ...


@runtime_checkable
class Sandbox(Protocol):
    def start(self) -> None: ...

    def exec(self, cmd: str, timeout: float, workdir: str | None = None) -> ExecResult: ...

    def spawn(self, cmd: str, log_path: Path, env: dict[str, str] | None = None) -> Process: ...

    def kill_recorded(self, record: dict) -> bool:
        """Kill the process group a `Process.record()` names, if it is still there; True when it was."""
        ...

    def read_file(self, path: str) -> str: ...

    def write_file(self, path: str, text: str) -> None: ...

    def repo_dir(self, name: str) -> Path: ...

    def endpoint(self, port: int) -> str: ...

    def restart(self) -> None: ...

    def stop(self, remove: bool = False) -> None: ...


def refuse_secrets(env: Mapping[str, str], task: Task) -> None:
    """Raise when `env` would carry a host credential into the sandbox (by variable name)."""
    forbidden = [name for name in env if any(fnmatch.fnmatchcase(name, p) for p in SECRET_NAME_PATTERNS)]
    if task.agent.api_key_env and task.agent.api_key_env in env:
        forbidden.append(task.agent.api_key_env)
    if forbidden:
        raise SandboxError(
            f"refusing to pass {sorted(set(forbidden))} into the sandbox of task {task.name!r}: names matching "
            f"{list(SECRET_NAME_PATTERNS)} or agent.api_key_env are host secrets; remove them from sandbox.env"
        )


class OutputCapture:
    """Collects a command's output: keeps head and tail in memory, spools everything to disk.

    `finish()` appends the whole output, between a header and a footer line, to the exec log in
    one write so concurrent commands never interleave there.
    """

    def __init__(self, exec_log: Path, title: str, limit: int = DEFAULT_OUTPUT_LIMIT):
        self.exec_log = exec_log
        self.title = title
        self.half = max(limit // 2, 1)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        # A reader thread may outlive a timed-out command (a grandchild holding the pipe); once
        # finished, the capture ignores it instead of racing the final copy.
        self.lock = threading.Lock()
        self.finished = False
        exec_log.parent.mkdir(parents=True, exist_ok=True)
        self.spool = tempfile.TemporaryFile(dir=exec_log.parent)

    def feed(self, chunk: bytes) -> None:
        with self.lock:
            if not self.finished:
                self._keep(chunk)

    def _keep(self, chunk: bytes) -> None:
        self.spool.write(chunk)
        self.total += len(chunk)
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.half:
                del self.tail[: len(self.tail) - self.half]

    def finish(self, footer: str) -> tuple[str, bool]:
        """Return (capped text, truncated) and record the full output in the exec log."""
        with self.lock:
            self.finished = True
        _append_spool(self.exec_log, self.spool, f"=== {_utc()} {self.title}\n", f"\n=== {footer}\n")
        elided = self.total - len(self.head) - len(self.tail)
        if elided <= 0:
            return bytes(self.head + self.tail).decode(errors="replace"), False
        marker = f"\n[... {elided} bytes elided; full output in {self.exec_log} ...]\n"
        return self.head.decode(errors="replace") + marker + self.tail.decode(errors="replace"), True


_EXEC_LOG_LOCK = threading.Lock()


def _append_spool(exec_log: Path, spool, header: str, footer: str) -> None:
    spool.seek(0)
    with _EXEC_LOG_LOCK, open(exec_log, "ab") as log:
        log.write(header.encode())
        shutil.copyfileobj(spool, log, 1 << 20)
        log.write(footer.encode())
    spool.close()


def _utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class HostPaths:
    """Maps sandbox paths that read_file/write_file may touch (repos, scratch) onto host directories."""

    def __init__(self, roots: dict[str, Path]):
        # Longest sandbox prefix first, so a repo nested in another maps to its own tree.
        self.roots = dict(sorted(roots.items(), key=lambda item: -len(item[0])))

    def to_host(self, path: str) -> Path:
        if not path.startswith("/"):
            raise SandboxError(f"sandbox paths must be absolute, got {path!r}")
        normalized = posixpath.normpath(path)
        for prefix, host_root in self.roots.items():
            if normalized == prefix or normalized.startswith(prefix.rstrip("/") + "/"):
                relative = posixpath.relpath(normalized, prefix)
                host_path = (host_root / relative).resolve()
                if host_path != host_root.resolve() and not host_path.is_relative_to(host_root.resolve()):
                    raise SandboxError(f"{path} leaves {prefix} through a symbolic link; refused")
                return host_path
        raise SandboxError(f"{path} is outside the files porter may read or write: {sorted(self.roots)}")

    def read(self, path: str) -> str:
        host_path = self.to_host(path)
        try:
            return host_path.read_bytes().decode(errors="replace")
        except FileNotFoundError:
            raise SandboxError(f"{path}: no such file in the sandbox") from None
        except IsADirectoryError:
            raise SandboxError(f"{path} is a directory, not a file") from None

    def write(self, path: str, text: str) -> None:
        host_path = self.to_host(path)
        host_path.parent.mkdir(parents=True, exist_ok=True)
        # Write then rename: a reader (or a crash) never sees a half-written source file.
        temporary = host_path.with_name(f".{host_path.name}.porter-tmp")
        temporary.write_text(text, encoding="utf-8")
        if host_path.exists():
            os.chmod(temporary, host_path.stat().st_mode & 0o7777)
        os.replace(temporary, host_path)
