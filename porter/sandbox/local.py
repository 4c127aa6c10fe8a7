"""LocalSandbox: the Sandbox protocol with host subprocesses, for machines without Docker. No isolation.

A sandbox path P is `<run_dir>/root/P` on the host. On start each declared repo is copied into the
root: from `<run_dir>/root/<repo.path>` when it is already there (a resumed run, or a tree placed
by the caller), else from the host directory `repo.path` itself (copied, never patched in place);
a repo found in neither place is an error naming both. The checkpoint appears at its container path:
the model overlay built from the weights directory, or (overlay off) a link to it. Commands run with
`bash -c` in their own session, cwd mapped into the root, and an environment of only the task's
`sandbox.env`, PATH, HOME, LANG and `PORTER_SANDBOX_ROOT=<root>` (commands that need sandbox paths prefix
them with it); never porter's own. porter makes itself non-dumpable when a local sandbox starts, so
`/proc/<porter>/environ` (the API key) is root-only and commands run as the same user cannot read it; as
root (which could), each command runs in its own PID namespace with its own /proc (`unshare`), where
porter does not exist. That is all the isolation there is: a local command can read and write every file
the user can (everything, as root), which start() says. Does not cover containers (docker.py) or resource
limits.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

from porter.sandbox.docker_options import proc_stat, process_start
from porter.sandbox.interface import (
    DEFAULT_OUTPUT_LIMIT,
    SCRATCH_DIR,
    ExecResult,
    OutputCapture,
    SandboxError,
    refuse_secrets,
    stream_to_log,
)
from porter.sandbox.trees.baseline import ensure_baseline
from porter.sandbox.trees.overlay import build_from_dir
from porter.task import Task

logger = logging.getLogger(__name__)
PR_SET_DUMPABLE = 4  # <linux/prctl.h>
ENVIRONMENT_ALLOWED = ("PATH", "HOME", "LANG")  # the only host variables a local command sees


class LocalSandbox:
    """Subprocesses on the host under `<run_dir>/root`; same protocol as DockerSandbox, no isolation."""

    def __init__(self, task: Task, run_dir: Path, run_id: str):
        self.task = task
        self.run_dir = Path(run_dir).resolve()
        self.root = self.run_dir / "root"
        self.exec_log = self.run_dir / "logs" / "exec.log"
        self.output_limit = DEFAULT_OUTPUT_LIMIT  # bytes of output an ExecResult keeps (head + tail)
        self.processes: list[LocalProcess] = []
        refuse_secrets(task.sandbox.env, task)

    def host_path(self, sandbox_path: str) -> Path:
        return self.root / sandbox_path.lstrip("/")

    def start(self) -> None:
        hidden = hide_own_environment()
        if pid_namespace():
            how = "hidden from them (each command has its own PID namespace and /proc)"
        else:
            how = "hidden from them (porter is not dumpable)" if hidden and os.geteuid() else "NOT hidden from them"
        logger.warning(
            "local sandbox (task %s): NO ISOLATION. Commands run on this host as %s and can read and write every "
            "file that user can; porter's own environment is %s",
            self.task.name,
            "root" if os.geteuid() == 0 else "you",
            how,
        )
        self.host_path(SCRATCH_DIR).mkdir(parents=True, exist_ok=True)
        self.host_path(self.task.sandbox.workdir).mkdir(parents=True, exist_ok=True)
        for repo in self.task.repos:
            tree = self.host_path(repo.path)
            if not tree.exists():
                if not Path(repo.path).is_dir():
                    raise SandboxError(
                        f"repo {repo.name!r}: neither {tree} nor the host directory {repo.path} exists; "
                        f"a local sandbox copies the repo from one of them"
                    )
                shutil.copytree(repo.path, tree, symlinks=True)
            ensure_baseline(tree)
        self._place_model()

    def _place_model(self) -> None:
        """The checkpoint at its container path: the overlay (links into the original), or a link to it."""
        model = self.task.model
        target = self.host_path(model.container_path)
        if target.exists() or target.is_symlink():
            return
        source = self.host_path(model.path) if model.in_image else Path(model.path)
        if model.overlay:
            target.parent.mkdir(parents=True, exist_ok=True)
            build_from_dir(source, target, link_base=str(source))
        elif not model.in_image:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(source)

    def environment(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        refuse_secrets(extra or {}, self.task)
        env = {name: os.environ[name] for name in ENVIRONMENT_ALLOWED if name in os.environ}
        env.update(self.task.sandbox.env)
        env.update(extra or {})
        env["PORTER_SANDBOX_ROOT"] = str(self.root)
        return env

    def exec(self, cmd: str, timeout: float, workdir: str | None = None) -> ExecResult:
        workdir = workdir or self.task.sandbox.workdir
        title = f"exec (timeout {timeout:g}s, workdir {workdir}): {cmd}"
        capture = OutputCapture(self.exec_log, title, self.output_limit)
        try:
            child = self._start(cmd, workdir)
        except SandboxError:
            capture.finish("not started")
            raise
        kill = functools.partial(_signal_group, child.pid, signal.SIGKILL)
        return capture.run(_chunks(child.stdout), timeout, kill, lambda: _shell_code(child.wait()))

    def spawn(self, cmd: str, log_path: Path, env: dict[str, str] | None = None) -> LocalProcess:
        child = self._start(cmd, self.task.sandbox.workdir, env)
        process = LocalProcess(child, stream_to_log(_chunks(child.stdout), Path(log_path)))
        self.processes.append(process)
        return process

    def _start(self, cmd: str, workdir: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        """`cmd` in its own session, its cwd mapped into the root, its output (stderr too) on a pipe."""
        pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "stdin": subprocess.DEVNULL}
        try:
            return subprocess.Popen(
                command_argv(cmd),
                cwd=self.host_path(workdir),
                env=self.environment(env),
                start_new_session=True,
                **pipes,
            )
        except (FileNotFoundError, NotADirectoryError):
            raise SandboxError(f"working directory {workdir} does not exist in the sandbox") from None

    def kill_recorded(self, record: dict) -> bool:
        return kill_group_record(record)

    def repo_dir(self, name: str) -> Path:
        try:
            return self.host_path(self.task.repo(name).path)
        except KeyError as exc:
            raise SandboxError(exc.args[0]) from None

    def endpoint(self, port: int) -> str:
        return f"http://127.0.0.1:{port}"

    def describe(self) -> dict:
        """What a run records about its sandbox, so a replay can tell what changed."""
        return {"kind": "local", "root": str(self.root), "isolation": "none"}

    def restart(self) -> None:
        """Stop every spawned process; the files under the root (and the repos' patches) stay."""
        self.stop()
        self.start()

    def stop(self, remove: bool = False) -> None:
        for process in self.processes:
            process.stop(grace_s=5)
        self.processes.clear()
        if remove:
            shutil.rmtree(self.root, ignore_errors=True)


def hide_own_environment() -> bool:
    """Make this process non-dumpable: its /proc/<pid>/environ and mem become root-only, so a command started
    as the same user cannot read porter's keys there. Children are dumpable again after exec (kernel rule)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


@functools.cache
def pid_namespace() -> list[str]:
    """As root (which reads every process's /proc/PID/environ, dumpable or not), the argv prefix that gives a
    command its own PID namespace and /proc, where porter's process does not exist; [] when unavailable."""
    prefix = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return []
    probe = subprocess.run([*prefix, "true"], capture_output=True)
    return prefix if probe.returncode == 0 else []


def command_argv(cmd: str) -> list[str]:
    if not pid_namespace():
        return ["bash", "-c", cmd]
    # The namespace's PID 1 ignores signals it has no handler for: a wrapper shell takes that place, so the
    # command itself (and a server it starts) gets TERM like anywhere else.
    return [*pid_namespace(), "bash", "-c", 'bash -c "$1" & wait $!', "porter-sandbox", cmd]


def _chunks(pipe):
    return iter(lambda: pipe.read1(1 << 16), b"")


def _shell_code(returncode: int) -> int:
    # Popen reports death by signal N as -N; docker and shells say 128 + N. Callers see one convention.
    return 128 - returncode if returncode < 0 else returncode


def _signal_group(pgid: int, signal_number: int) -> None:
    try:
        os.killpg(pgid, signal_number)
    except ProcessLookupError:
        pass  # the group already exited


def kill_group_record(record: dict, wait_s: float = 10.0) -> bool:
    """SIGKILL the recorded group and wait for it to go. A leader whose start time differs is a reused pid: left alone.

    A group whose leader already exited can still hold members; its id cannot be reused while they live.
    """
    pgid = record.get("pgid")
    if record.get("sandbox") != "local" or not isinstance(pgid, int) or pgid <= 1:
        return False
    started = process_start(pgid)  # with the pid, a unique name
    if started and started != record.get("start_ticks"):
        return False
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and _group_alive(pgid):
        time.sleep(0.05)
    return True


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # Zombies still answer signal 0; a dead leader only waits for its reaper and holds no port.
    return proc_stat(pgid)[:1] != ["Z"]


class LocalProcess:
    """A background host process (its own session); its output streams into the log file (interface.stream_to_log)."""

    def __init__(self, child: subprocess.Popen, writer: threading.Thread):
        self.child, self.writer = child, writer
        self.start_ticks = process_start(child.pid)

    def record(self) -> dict:
        return {"sandbox": "local", "pgid": self.child.pid, "start_ticks": self.start_ticks}

    def alive(self) -> bool:
        if self.child.poll() is None:
            return True
        self.writer.join(5)  # callers read the log the moment the process reads as over: let it drain first
        return False

    def exit_code(self) -> int | None:
        return None if self.alive() else _shell_code(self.child.returncode)

    def stop(self, grace_s: float = 10) -> None:
        """TERM the process group, KILL it if the leader is still there after `grace_s`."""
        if self.alive():
            _signal_group(self.child.pid, signal.SIGTERM)
            try:
                self.child.wait(grace_s)
            except subprocess.TimeoutExpired:
                pass
        _signal_group(self.child.pid, signal.SIGKILL)  # also takes children that ignored TERM
        self.child.wait()
        self.writer.join(5)
