"""Everything a tool call needs for one run: the task, the sandbox, the repos, the server and the state.

Covers the mapping from sandbox paths to the host git trees (file tools may only touch declared repos),
the server's lifecycle (one at a time; a relaunch stops the old one and any a killed porter left, whose
process group the state records), the fingerprint of the
configuration a server or a check result belongs to, and running the checks from the host.
Does not decide what to keep (ledger/decision.py) and does not talk to the model (agent.py).
"""

from __future__ import annotations

import functools
import shlex
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Protocol

from porter.checks.kind import CheckProgress
from porter.engines import serve
from porter.errors import ToolError
from porter.ledger.records import Configuration, SetAside
from porter.ledger.state import RunState, anchor_references
from porter.ledger.transcript import Transcript, write_state
from porter.redaction import redact
from porter.sandbox import Process, Sandbox
from porter.sandbox.guard import PathGuard, escaping_links
from porter.sandbox.trees.tracked import TrackedRepo
from porter.task import Task


def resume_command(ctx: RunContext) -> str:
    """The command that continues this run, as a person pastes it."""
    return f"porter resume {shlex.quote(str(ctx.run_dir))}"


class CheckWatcher(Protocol):
    """Follows the checks as they run: told when each sample starts, while it waits for the node's measurement
    lock, and as its units (levels, questions) end."""

    def waiting(self, key: str, holder: str) -> None: ...  # for the node's measurement lock, which `holder` holds

    def sample_started(self, key: str, number: int, samples: int) -> None: ...  # the lock is held: it runs

    def progressed(self, key: str, step: CheckProgress) -> None: ...


@dataclass
class RunContext:
    task: Task
    sandbox: Sandbox
    state: RunState
    run_dir: Path
    transcript: Transcript
    repos: dict[str, TrackedRepo]
    server: serve.Launch | None = None
    server_fingerprint: str | None = None
    image_digest: str | None = None  # of the sandbox's image, part of every configuration's fingerprint
    server_started: float | None = None  # monotonic time of the running server's launch (server hours)
    services: list = field(default_factory=list)  # the sandbox's host services (porter/sandbox/services.py)
    check_watcher: CheckWatcher | None = None  # who follows the checks as they run (the progress log), if anyone
    said: dict[str, str] = field(default_factory=dict)  # the blocks the model was told last (observations.once)

    # ------------------------------------------------------------ paths

    def repo_of(self, sandbox_path: str) -> str:
        path = PurePosixPath(sandbox_path)
        for spec in self.task.patchable_repos():
            if path == PurePosixPath(spec.path) or PurePosixPath(spec.path) in path.parents:
                return spec.name
        declared = ", ".join(f"{spec.name} at {spec.path}" for spec in self.task.patchable_repos())
        raise ToolError(f"{sandbox_path} is outside the repos porter may change ({declared}); use a path inside one")

    @functools.cached_property
    def guard(self) -> PathGuard:
        """The trees the file tools may touch: the declared repos and the model overlay (add_root adds others)."""
        return PathGuard({spec.path: self.repo_dir(spec.name) for spec in self.task.patchable_repos()})

    def host_path(self, sandbox_path: str) -> Path:
        """Host file behind a sandbox path of a declared repo, symlinks resolved; ways out are refused."""
        self.repo_of(sandbox_path)
        return self.guard.host_path(sandbox_path)

    def refuse_escaping_links(self, changed: dict[str, list[str]]) -> None:
        """A ToolError naming the changed files that are symlinks out of their repo (porter never follows them)."""
        escaping = [
            f"{name}: {link}" for name, files in changed.items() for link in escaping_links(self.repo_dir(name), files)
        ]
        if escaping:
            raise ToolError(f"symbolic links that leave the repo were written: {escaping}; remove them (or revert)")

    def repo_dir(self, name: str) -> Path:
        if name not in self.repos:
            raise ToolError(f"no repo named {name!r}; the task declares {sorted(self.repos)}")
        return self.repos[name].path

    def only_repo(self) -> str:
        if len(self.repos) != 1:
            raise ToolError(f"say which repo the patch is for: one of {sorted(self.repos)}")
        return next(iter(self.repos))

    # ------------------------------------------------------------ configuration

    def is_pending(self) -> bool:
        return self.state.flags != self.state.accepted_flags or any(repo.is_dirty() for repo in self.repos.values())

    def configuration(self, accepted: bool = False) -> Configuration:
        """The current configuration (the live trees and flags), or the accepted one (the last commits, their flags)."""
        if accepted:
            trees = {name: repo.head_tree() for name, repo in self.repos.items()}
            flags = self.state.accepted_flags
        else:
            trees = {name: repo.content_tree() for name, repo in self.repos.items()}
            flags = self.state.flags
        if self.image_digest is None:
            facts = self.sandbox.describe()
            self.image_digest = facts.get("image_id") or facts.get("kind") or "unknown"
        return Configuration(trees, dict(flags), self.image_digest)

    def fingerprint(self) -> str:
        """Identifies trees + flags + image: a result measured on another fingerprint is not evidence for this one."""
        return self.configuration().fingerprint

    def mark_accepted(self) -> str:
        """The accepted configuration is what the last commits and the accepted flags make: called at start, at
        a keep and at a revert, the only moments it changes."""
        self.state.accepted_config = self.state.remember(self.configuration(accepted=True))
        anchor_references(self.task, self.state)  # the first healthy accepted configuration fixes relative bars
        return self.state.accepted_config

    # ------------------------------------------------------------ server

    def relaunch(self, reduced: bool = False) -> serve.Launch:
        """Start the server on the current configuration, or on the engine's reduced mode of it (serve-NNN-reduced)."""
        self.stop_server()
        # what it will serve, taken before the launch (a tree porter cannot fingerprint is refused here) and
        # remembered: its samples' cache keys and the report read the configuration
        fingerprint = self.state.remember(self.configuration())
        self.state.relaunches += 1
        self.state.reduced_launches += reduced
        log_path = self.run_dir / "logs" / f"serve-{self.state.relaunches:03d}{'-reduced' * reduced}.log"
        flags = {**self.state.flags, **self.task.engine.reduced_flags()} if reduced else self.state.flags
        self.server_started = time.monotonic()
        self.server = serve.launch(self.sandbox, self.task, flags, log_path, on_spawn=self._remember)
        self.server_fingerprint = fingerprint
        return self.server

    @contextmanager
    def in_place(self, config: Configuration):
        """A configuration porter ran before in place for a while (its trees and flags), then the current one back."""
        trees = {name: tree for name, tree in config.repos.items() if self.repos[name].content_tree() != tree}
        # on disk before a tree moves: a porter killed in between puts the change back when resumed (put_back)
        self.state.set_aside = SetAside(self.state.flags, {name: self.repos[name].is_dirty() for name in trees})
        write_state(self.run_dir, self.state.to_dict(), redact)
        for name, tree in trees.items():
            self.repos[name].set_aside(tree)
        self.state.flags = dict(config.flags)
        try:
            yield
        finally:
            self.put_back()

    def put_back(self) -> None:
        """The current configuration back after `in_place` (or after a porter killed during it): trees and flags."""
        if self.state.set_aside is None:
            return
        for name, dirty in self.state.set_aside.dirty.items():
            self.repos[name].restore(dirty)
        self.state.flags, self.state.set_aside = self.state.set_aside.flags, None
        write_state(self.run_dir, self.state.to_dict(), redact)

    def _remember(self, process: Process) -> None:
        # On disk before the wait for health: a porter killed during a long start-up leaves a server
        # that the next porter (resume) must be able to find and kill.
        self.state.server_process = process.record()
        write_state(self.run_dir, self.state.to_dict(), redact)

    def stop_server(self) -> None:
        if self.server and self.server.process and self.server.process.alive():
            self.server.process.stop(grace_s=10)
        if self.server_started is not None:
            self.state.server_s += time.monotonic() - self.server_started
        self.server_started = None
        self.server = None
        self.server_fingerprint = None
        self.kill_leftover_server()

    def kill_leftover_server(self) -> None:
        """Kill the server a killed porter left behind (recorded in the state); a no-op when there is none."""
        record, self.state.server_process = self.state.server_process, None
        if serve.kill_leftover(self.sandbox, record):
            self.transcript.record("note", step=self.state.step, text=f"killed a server porter left running: {record}")

    def require_server(self) -> str:
        """Base URL of a healthy server running the current configuration, or a ToolError saying what to do."""
        if self.server is None or not self.server.healthy:
            raise ToolError("no healthy server is running; call serve first")
        if not self.server.process.alive():
            raise ToolError(f"the server exited (code {self.server.process.exit_code()}); call serve again")
        if self.server_fingerprint != self.fingerprint():
            raise ToolError("the flags or the source changed since the server started; call serve to apply them")
        return self.sandbox.endpoint(self.task.serve.port)
