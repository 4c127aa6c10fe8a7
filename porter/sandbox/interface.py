"""What every sandbox shares: the protocols, results, errors, output capping and path confinement.

Covers the `Sandbox` and `Process` protocols, `ExecResult`, the error types, the refusal of secrets
in a sandbox environment, the head+tail capture of command output (bounded memory and disk, a copy in the
run's exec log, whole up to SPOOL_LIMIT, with secrets redacted on the way) and a server's log kept the same way
as it streams. Does not cover running anything (docker.py, local.py) nor file access (guard.py).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from porter.redaction import RedactingWriter, environment_problems, known
from porter.task import Task

# The sandbox's own folder for notes and outputs, outside every repo; bind-mounted from <run_dir>/scratch.
SCRATCH_DIR = "/porter/scratch"
# Bytes of output the caller sees: half from the head, half from the tail.
DEFAULT_OUTPUT_LIMIT = 20_000
# Bytes of one command's output kept on the host (the spool, then the exec log): the first SPOOL_LIMIT and the last
# SPOOL_TAIL; a command that prints for hours (`yes`) fills neither the disk nor the memory.
SPOOL_LIMIT = 64 << 20
SPOOL_TAIL = 1 << 20
TIMEOUT_EXIT_CODE = 124  # what coreutils `timeout` returns, so a timed-out command reads the same everywhere


class SandboxError(Exception):
    """A sandbox operation that cannot be done; the message says what and what to do instead."""


class SandboxDied(SandboxError):
    """The sandbox (container) stopped under us; the message ends with its final output."""

    def __init__(self, message: str, last_log_lines: list[str]):
        tail = "\n".join(last_log_lines) if last_log_lines else "(the container printed nothing)"
        super().__init__(f"{message}\nlast log lines:\n{tail}")


@dataclass
class ExecResult:
    exit_code: int
    output: str
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

    def repo_dir(self, name: str) -> Path: ...

    def endpoint(self, port: int) -> str: ...

    def restart(self) -> None: ...

    def stop(self, remove: bool = False) -> None: ...


def refuse_secrets(env: Mapping[str, str], task: Task) -> None:
    """Raise when `env` would carry a host secret into the sandbox: by name, by value or by `${VAR}` reference."""
    problems = environment_problems(env, task.agent.api_key_env)
    if problems:
        raise SandboxError(
            f"refusing to pass {'; '.join(problems)} into the sandbox of task {task.name!r}: host secrets never "
            "enter a sandbox; remove them from sandbox.env"
        )


class OutputCapture:
    """Collects a command's output: spools it to disk (capped as a server's log is), then hands back its head and
    tail, secrets redacted.

    `finish()` redacts the whole output into a second spool (so a secret cut by the head/tail split
    is never half shown), takes the head and tail from it, and appends it, between a header and a
    footer line, to the exec log in one write so concurrent commands never interleave there.
    """

    def __init__(
        self,
        exec_log: Path,
        title: str,
        limit: int = DEFAULT_OUTPUT_LIMIT,
        spool: tuple[int, int] = (SPOOL_LIMIT, SPOOL_TAIL),
    ):
        self.exec_log = exec_log
        self.title = title
        self.half = max(limit // 2, 1)
        # A reader thread may outlive a timed-out command (a grandchild holding the pipe); once
        # finished, the capture ignores it instead of racing the final copy.
        self.lock = threading.Lock()
        self.finished = False
        exec_log.parent.mkdir(parents=True, exist_ok=True)
        self.spool = CappedLog(tempfile.TemporaryFile(dir=exec_log.parent), *spool)

    def run(self, chunks, timeout: float, kill: Callable[[], None], exit_code: Callable[[], int | None]) -> ExecResult:
        """Feed the command's output until it ends, or until `timeout` passes and `kill` ends its group; then its
        result, the output recorded in the exec log under a footer saying how it ended."""
        started = time.monotonic()
        reader = threading.Thread(target=pump, args=(chunks, self.feed), daemon=True)
        reader.start()
        reader.join(timeout)
        timed_out = reader.is_alive()
        if timed_out:
            kill()
            reader.join(5)
        code = TIMEOUT_EXIT_CODE if timed_out else exit_code()
        duration = time.monotonic() - started
        footer = f"exit {code} after {duration:.3f}s" + (" (timed out: process group killed)" if timed_out else "")
        return ExecResult(code, self.finish(footer), duration, timed_out)

    def feed(self, chunk: bytes) -> None:
        with self.lock:
            if not self.finished:
                self.spool.write(chunk)

    def _join_tail(self) -> None:
        """After the spool's limit: the spool, a line saying how much is not kept, then the last bytes. A secret cut
        by either join is dropped whole with the bytes around it (as long as the longest one), never half kept."""
        spool, margin = self.spool, known().overlap
        head_end = max(spool.head_end - margin, 0)
        tail = bytes(spool.recent[-spool.tail :][margin:])
        lost = spool.head_end + spool.lost + len(spool.recent) - head_end - len(tail)
        spool.cut(head_end, not_kept(lost, spool.limit) + tail)

    def finish(self, footer: str) -> str:
        """Return the capped text and record the full output in the exec log."""
        with self.lock:
            self.finished = True
        if self.spool.recent:
            self._join_tail()
        clean = tempfile.TemporaryFile(dir=self.exec_log.parent)
        self.spool.file.seek(0)
        known().copy_redacted(self.spool.file, clean)
        self.spool.close()
        total = clean.tell()
        clean.seek(0)
        head = clean.read(self.half)
        clean.seek(max(total - self.half, len(head)))
        tail = clean.read()
        header = known().redact(f"=== {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {self.title}\n")
        _append_spool(self.exec_log, clean, header, f"\n=== {footer}\n")
        elided = total - len(head) - len(tail)
        if elided <= 0:
            return (head + tail).decode(errors="replace")
        marker = f"\n[... {elided} bytes elided; full output in {self.exec_log} ...]\n"
        return head.decode(errors="replace") + marker + tail.decode(errors="replace")


def not_kept(lost: int, limit: int) -> bytes:
    return f"\n[porter: {lost} bytes of output not kept: over {limit} bytes]\n".encode()


class CappedLog:
    """A log file written as output arrives (a server's), kept as command output is: its first `limit` bytes, then
    a line saying how many bytes were not kept and the last `tail` bytes, rewritten as the flood goes on; so a
    server that prints without end fills neither the disk nor the memory, and runs on."""

    def __init__(self, file, limit: int = SPOOL_LIMIT, tail: int = SPOOL_TAIL):
        self.file = file
        self.limit, self.tail, self.room = limit, tail, limit
        self.head_end, self.recent, self.lost = file.seek(0, os.SEEK_END) + limit, bytearray(), 0

    def write(self, data: bytes) -> None:
        """Append `data` past the head, or keep its end; flushed, so a reader sees the log as it stands."""
        kept, data = data[: self.room], data[self.room :]
        self.file.write(kept)
        self.room -= len(kept)
        self.recent += data
        if len(self.recent) <= 2 * self.tail:  # rewritten now and then, not at every chunk: linear time
            self.file.write(data)
        else:
            self.lost += len(self.recent) - self.tail
            del self.recent[: -self.tail]
            self.cut(self.head_end, not_kept(self.lost, self.limit) + self.recent)
        self.file.flush()

    def cut(self, at: int, text: bytes) -> None:
        """Replace everything from byte `at` on with `text`."""
        self.file.truncate(at)
        self.file.seek(at)
        self.file.write(text)

    def close(self) -> None:
        self.file.close()


def pump(chunks, sink) -> None:
    for chunk in chunks:
        sink(chunk)


def stream_to_log(chunks, log_path: Path) -> threading.Thread:
    """A daemon thread writing `chunks` (a server's output) into `log_path` as they arrive, redacted and capped."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = RedactingWriter(CappedLog(open(log_path, "ab")))  # noqa: SIM115 - closed by the thread

    def write() -> None:
        try:
            pump(chunks, log.write)
        finally:
            log.close()

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


_EXEC_LOG_LOCK = threading.Lock()


def _append_spool(exec_log: Path, spool, header: str, footer: str) -> None:
    spool.seek(0)
    with _EXEC_LOG_LOCK, open(exec_log, "ab") as log:
        log.write(header.encode())
        shutil.copyfileobj(spool, log, 1 << 20)
        log.write(footer.encode())
    spool.close()
