"""The task's repos as git trees on the host: unpacked from the image, baselined, reused on resume.

Covers extracting a directory from a tar stream (what docker's get_archive returns) into the run
directory atomically, and giving the tree a git baseline (keeping the upstream commit when the
tree already is a repo). Does not cover patching, committing accepted changes or PR drafts: that is
porter/sandbox/trees/tracked.py, which works on the trees this module prepares.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from porter.sandbox.interface import SandboxError
from porter.sandbox.trees import safe_git

BASELINE_AUTHOR = {
    "GIT_AUTHOR_NAME": "porter",
    "GIT_AUTHOR_EMAIL": "porter@localhost",
    "GIT_COMMITTER_NAME": "porter",
    "GIT_COMMITTER_EMAIL": "porter@localhost",
}


class _ChunkReader(io.RawIOBase):
    """A read-only stream over an iterator of byte chunks, so tarfile can read it without buffering it all."""

    def __init__(self, chunks: Iterable[bytes]):
        self.chunks: Iterator[bytes] = iter(chunks)
        self.pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self.pending:
            self.pending = next(self.chunks, b"")
            if not self.pending:
                return 0
        size = min(len(buffer), len(self.pending))
        buffer[:size] = self.pending[:size]
        self.pending = self.pending[size:]
        return size


def _owned_by_us(member: tarfile.TarInfo, destination: str) -> tarfile.TarInfo:
    # The host tree must belong to the user running porter: git refuses "dubious ownership" otherwise.
    member = tarfile.tar_filter(member, destination)
    return member.replace(uid=os.getuid(), gid=os.getgid(), uname="", gname="", deep=False)


def extract_tree(
    chunks: Iterable[bytes], destination: Path, skip: Callable[[tarfile.TarInfo], bool] | None = None
) -> None:
    """Unpack a tar stream whose single top-level entry is a directory into `destination`.

    Extracts next to it first and renames at the end, so an interrupted copy never looks complete.
    Members for which `skip` says True are not written (the model overlay leaves the weights out).
    """
    partial = destination.with_name(f".{destination.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    with tarfile.open(fileobj=io.BufferedReader(_ChunkReader(chunks), 1 << 20), mode="r|") as archive:
        keep = _owned_by_us if skip is None else (lambda m, d: None if skip(m) else _owned_by_us(m, d))
        archive.extractall(partial, filter=keep)
    entries = list(partial.iterdir())
    if len(entries) != 1 or not entries[0].is_dir():
        shutil.rmtree(partial, ignore_errors=True)
        raise SandboxError(f"expected one directory in the archive for {destination.name}, got {len(entries)} entries")
    entries[0].rename(destination)
    partial.rmdir()


def ensure_baseline(tree: Path) -> str:
    """Make `tree` a git repo with a commit (keeping an existing one) and return its HEAD commit id.

    A `.git` that came with the tree (from an image) is kept only as a directory, with its config cut down
    to keys that cannot run anything; a `.git` file (a worktree pointer into the image) is replaced.
    """
    dot_git = tree / ".git"
    if dot_git.is_symlink() or dot_git.is_file():
        dot_git.unlink()
    if dot_git.is_dir():
        safe_git.sanitize_config(dot_git)
        repo = safe_git.open_repo(tree)
        if repo.head.is_valid():
            return repo.head.commit.hexsha
    else:
        repo = safe_git.init_repo(tree)
    with repo.git.custom_environment(**BASELINE_AUTHOR):
        repo.git.add("--all")
        repo.git.commit("--allow-empty", "--no-verify", "-q", "-m", "porter baseline: the tree as shipped in the image")
    return repo.head.commit.hexsha
