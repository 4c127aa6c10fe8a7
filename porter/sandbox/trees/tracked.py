"""Git discipline for the trees the agent patches (gitpython, on the host copies of the repos).

Covers: the run branch `porter/<run-id>` with the user's uncommitted work committed first (never lost),
the pending diff, one commit per accepted change, and reverting a rejected change so the tree is never
left half-applied. Does not decide what to accept (the loop does), export the patch series
(report/pr_series.py) or talk to the sandbox.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import stat
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

import git

from porter.redaction import redact
from porter.sandbox import SandboxError
from porter.sandbox.guard import escaping_links
from porter.sandbox.trees import safe_git

PORTER_AUTHOR = git.Actor("porter", "porter@localhost")
# Build products appear in the trees while the engine runs; they are never part of a patch.
IGNORED = ("__pycache__/", "*.py[cod]", "*.o", "*.so", "*.egg-info/", ".porter-build/")
# The new content one kept change may commit: sources, configs, tokenizer files, tuned tables. A kept change is
# reviewed as a patch, exported as one and stored again with every commit; a dump or a build output is not one.
MAX_COMMIT_MIB = 32
SET_ASIDE = "porter: the pending change, set aside while an earlier configuration runs"
MAX_COMMIT_BYTES = MAX_COMMIT_MIB << 20


class ChangeTooLarge(SandboxError):
    """A pending change over MAX_COMMIT_BYTES; nothing was staged or committed, the message names the largest files."""


@dataclass
class RepoState:
    name: str
    base_commit: str  # the upstream commit the run started from (patches apply on it)
    branch: str
    accepted: list[str]  # our commits, oldest first
    path: str = ""  # host path of the tree


class TrackedRepo:
    """One repo of the task, on the host, on porter's branch for this run."""

    def __init__(self, name: str, path: Path, run_id: str):
        self.name = name
        self.path = Path(path)
        self.branch = f"porter/{run_id}"
        try:
            self.repo = safe_git.open_repo(self.path)
        except safe_git.UntrustedRepo as exc:
            raise ValueError(f"repo {name!r}: {exc}") from None
        # A porter killed during git work (kill -9 mid-accept) leaves git's lock files; git is the truth of what
        # was committed, and a killed git's half-written index or ref never replaced the real one.
        self.cleared_locks, _ = safe_git.clear_stale_locks(Path(self.repo.git_dir))
        self._ignore_build_products()

    def _stage(self, **options) -> None:
        """`git add -A`; a lock a killed git left is cleared once and the add retried."""
        for attempt in range(2):
            try:
                self.repo.git.add(A=True, **options)
                return
            except git.GitCommandError as exc:
                said = exc.stderr.strip()
                cleared, held = safe_git.clear_stale_locks(Path(self.repo.git_dir)) if ".lock" in said else ([], {})
                if cleared and attempt == 0:
                    continue
                holders = sorted({pid for pids in held.values() for pid in pids})
                blame = (
                    f"git's lock {', '.join(held)} is held by process {holders}: let it finish, then retry"
                    if held
                    else "a nested repository or an unreadable file is in the way: remove it, or revert"
                )
                raise safe_git.UntrustedRepo(
                    f"repo {self.name!r}: git cannot stage the tree ({said}); {blame}"
                ) from None

    def _new_gitlinks(self) -> list[str]:
        """Paths staged as another repository (mode 160000) that HEAD does not have: a repo planted in the tree."""

        def gitlinks(listing: str) -> set[str]:
            return {line.split("\t", 1)[1] for line in listing.splitlines() if line.startswith("160000 ")}

        staged = gitlinks(self.repo.git.ls_files("--stage"))
        return sorted(staged - gitlinks(self.repo.git.ls_tree("-r", "HEAD")))

    def _check(self) -> None:
        # A local sandbox can write .git at any time: check the config before every git call that reads the tree.
        safe_git.check_git_dir(Path(self.repo.git_dir), self.name)

    def _ignore_build_products(self) -> None:
        exclude = Path(self.repo.git_dir) / "info" / "exclude"
        exclude.parent.mkdir(parents=True, exist_ok=True)
        present = exclude.read_text().splitlines() if exclude.exists() else []
        missing = [pattern for pattern in IGNORED if pattern not in present]
        if missing:
            exclude.write_text("\n".join(present + ["# porter: build products"] + missing) + "\n")

    def begin(self, state: RepoState | None = None) -> RepoState:
        """Check out the run branch; on a fresh run commit the user's dirty work first, as the user's commit."""
        if state is not None:
            if self.repo.active_branch.name != state.branch:
                self.repo.git.checkout(state.branch)
            # A kill between a commit and the state file must not lose the commit: git is the truth.
            ours = self.repo.iter_commits(f"{state.base_commit}..{state.branch}", author=PORTER_AUTHOR.email)
            state.accepted = [commit.hexsha for commit in reversed(list(ours))]
            return state
        if self.is_dirty():
            self.repo.git.add(A=True)
            self.repo.index.commit(
                "WIP: uncommitted changes found before the porter run\n\nCommitted by porter so nothing is lost.",
                author=PORTER_AUTHOR,
                committer=PORTER_AUTHOR,
                skip_hooks=True,
            )
        base = self.repo.head.commit.hexsha
        if self.branch in self.repo.heads:
            raise ValueError(f"repo {self.name!r}: branch {self.branch} already exists; use --resume")
        self.repo.git.checkout("-b", self.branch)
        return RepoState(self.name, base, self.branch, [], str(self.path))

    def is_dirty(self) -> bool:
        self._check()
        return self.repo.is_dirty(untracked_files=True)

    def bounded_diff(self, limit: int) -> bytes | None:
        """The pending change (new files and binary content included), or None when it is over `limit` bytes.
        Read from git's pipe and cut off past the limit: a tool run in the sandbox may write gigabytes into the
        tree."""
        process = self._binary_diff()
        try:
            data = process.stdout.read(limit + 1)
        finally:
            process.proc.kill()
            process.proc.wait()
        return data if len(data) <= limit else None

    def change_digest(self) -> str:
        """A digest of the pending change (binary content included), streamed from git: a tool run in the
        sandbox may write gigabytes into the tree, and porter must not hold its diff to see whether it changed."""
        process = self._binary_diff()
        digest = hashlib.sha256()
        for chunk in iter(lambda: process.stdout.read(1 << 20), b""):
            digest.update(chunk)
        process.wait()
        return digest.hexdigest()

    def _binary_diff(self):
        """`git diff HEAD --binary` of the pending change, new files included, as a process to read from."""
        self._check()
        self._stage(intent_to_add=True)
        return self.repo.git.diff("HEAD", "--binary", as_process=True)

    def content_tree(self) -> str:
        """Hash of the working tree as git would commit it now (new files in, ignored build products out).

        A scratch copy of the index is used, so the repo's own index and HEAD are untouched; the hash of a
        clean tree equals its HEAD's tree, so a configuration keeps its fingerprint when it is committed.
        """
        self._check()
        self.refuse_oversized(self.changed_files())  # hashing writes every changed file into git's object store
        with tempfile.TemporaryDirectory(prefix="porter-index-") as scratch:
            index = Path(scratch) / "index"
            own = Path(self.repo.git_dir) / "index"
            if own.exists():
                shutil.copyfile(own, index)
            env = {"GIT_INDEX_FILE": str(index)}
            self.repo.git.add(A=True, env=env)
            return self.repo.git.write_tree(env=env)

    def head_tree(self) -> str:
        """The tree of the last accepted commit."""
        return self.repo.head.commit.tree.hexsha

    def changed_files(self) -> list[str]:
        self._check()
        self._stage(intent_to_add=True)
        return [line for line in self.repo.git.diff("HEAD", name_only=True).splitlines() if line]

    def accept(self, state: RepoState, message: str) -> str:
        if not self.is_dirty():
            raise ValueError(f"repo {self.name!r} has no change to commit")
        files = self.changed_files()
        self.refuse_oversized(files)
        escaping = escaping_links(self.path, files)
        if escaping:
            raise safe_git.UntrustedRepo(f"repo {self.name!r}: refusing to commit symbolic links out of it: {escaping}")
        self._stage()
        nested = self._new_gitlinks()
        if nested:
            self.repo.git.reset("-q")  # unstage; the tree is left as it was for the agent to fix or revert
            raise safe_git.UntrustedRepo(f"repo {self.name!r}: refusing to commit nested git repositories: {nested}")
        commit = self.repo.index.commit(redact(message), author=PORTER_AUTHOR, committer=PORTER_AUTHOR, skip_hooks=True)
        state.accepted.append(commit.hexsha)
        return commit.hexsha

    def refuse_oversized(self, files: list[str]) -> None:
        """Raise ChangeTooLarge when the changed files hold more than MAX_COMMIT_BYTES (sizes from lstat: nothing
        is read or hashed; a sparse file counts its full length, as git would store it)."""
        sizes = {}
        for name in files:
            try:
                info = (self.path / name).lstat()
            except FileNotFoundError:
                continue  # deleted by the change
            if stat.S_ISREG(info.st_mode):
                sizes[name] = info.st_size
        total = sum(sizes.values())
        if total > MAX_COMMIT_BYTES:
            biggest = sorted(sizes, key=sizes.__getitem__, reverse=True)
            shown = [name for name in biggest[:3] if sizes[name] >= 1 << 20] or biggest[:1]  # the ones that weigh
            largest = ", ".join(f"{name}: {_mib(sizes[name])}" for name in shown)
            raise ChangeTooLarge(
                f"repo {self.name!r}: refusing to commit or fingerprint {_mib(total)} of changed files ({largest}), "
                f"over porter's {MAX_COMMIT_MIB} MiB cap on one change; nothing was committed or hashed. Delete the "
                "large files from the repo (engine outputs belong in sandbox.build_products) and try again, or revert"
            )

    def set_aside(self, tree: str) -> bool:
        """Put the content of `tree` (one of this repo's content trees) in place, the pending change stashed (new
        files included) until `restore`; True when there was one to stash."""
        stashed = self.is_dirty()
        if stashed:
            self.repo.git.stash("push", "--include-untracked", "-m", SET_ASIDE)
        if tree != self.head_tree():
            self.repo.git.checkout(tree, "--", ".")
        return stashed

    def restore(self, stashed: bool) -> None:
        """The pending change `set_aside` stashed back in place (`stashed`: there was one), even after a kill: a
        pending change whose stash was never made is still in the tree and stays."""
        ours = self.repo.git.stash("list", "-n", "1").endswith(SET_ASIDE)
        if ours or not stashed:
            self.revert()
        if ours:
            self.repo.git.stash("pop")

    def revert(self) -> list[str]:
        """Drop the pending change (tracked edits and new files); returns the files it touched."""
        try:
            touched = self.changed_files()
        except safe_git.UntrustedRepo:
            touched = []  # whatever blocks staging (a nested repo) goes below: the revert itself must not fail
        self._check()
        self.repo.git.reset("--hard", "HEAD")
        self.repo.git.clean("-ffd")  # -ff: nested repositories planted in the tree go too
        return touched


def _mib(size: int) -> str:
    return f"{size / 2**30:.1f} GiB" if size >= 1 << 30 else f"{size / 2**20:.1f} MiB"


def commit_message(summary: str, failed: str, why: str, changed: str, evidence: str) -> str:
    """What a reviewer needs: what failed, why, what changed, and the numbers before -> after."""
    subject = re.sub(r"\s+", " ", summary).strip()
    if len(subject) > 72:  # git's convention; cut at a word, not inside one
        subject = subject[:71].rsplit(" ", 1)[0] + "…"
    # the agent's reason as an indented block: where a forge renders the message as Markdown (a one-commit PR's
    # body), it shows as written, with no heading, link, HTML or "Evidence:" section of its own
    why = "\n" + textwrap.indent(why.strip(), "    ") if why.strip() else ""
    sections = [("What failed", failed.strip()), ("Why", why), ("What changed", changed.strip())]
    body = "\n\n".join(f"{title}:\n{text}" for title, text in [*sections, ("Evidence", evidence.strip())] if text)
    return f"{subject}\n\n{body}\n\nGenerated by porter.\n"
