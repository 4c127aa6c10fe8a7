"""The path guard: every host-side file access a tool makes stays inside the declared trees.

A sandbox path is mapped onto the host tree of the root it falls under (engine repos, scratch, and
whatever a caller adds with `add_root`, such as a model overlay), symlinks are resolved, and anything
that lands outside the roots, or inside a repo's `.git`, is refused with an error naming the path.
Files are then opened one component at a time with O_NOFOLLOW from the root's directory, so a link
swapped in by the sandbox between the check and the access is refused too, never followed; writes go
to a temporary file renamed over the target, so a hard link or a symlink is replaced, never written
through; reads are bounded (MAX_READ_BYTES). Also checks patches (no symlinks, no gitlinks, nothing
under `.git`) and finds symlinks in a tree that point outside it. Does not run git (porter/sandbox/trees/safe_git.py)
and does not decide which roots a run has (the sandboxes and the run context do).
"""

from __future__ import annotations

import errno
import os
import posixpath
import re
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath

from porter.sandbox.base import SandboxError

# What porter reads of one sandbox-written file at once: enough for any source file, bounded for a huge or
# endless one (a log, a dump) that would otherwise be read whole into porter's memory.
MAX_READ_MIB = 4
MAX_READ_BYTES = MAX_READ_MIB << 20
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# A diff header line that makes git create or retarget a symlink (120000) or a gitlink (160000).
_LINK_MODE = re.compile(r"^(?:new file mode|new mode|old mode|index [0-9a-f]+\.\.[0-9a-f]+) (?:120000|160000)\s*$")
_DIFF_PATH = re.compile(r"^(?:---|\+\+\+) (?:[ab]/)?(\S+)|^diff --git a/(\S+) b/(\S+)|^rename (?:from|to) (\S+)")


class PathRefused(SandboxError):
    """A path that leaves the declared trees (or goes through a link); the message names it."""


class PathGuard:
    """Maps sandbox paths under the allowed roots onto host files, refusing every way out."""

    def __init__(self, roots: Mapping[str, Path] | None = None):
        self.roots: dict[str, Path] = {}
        for prefix, host_root in (roots or {}).items():
            self.add_root(prefix, host_root)

    def add_root(self, sandbox_prefix: str, host_root: Path) -> None:
        """Allow the tree `host_root`, seen in the sandbox at `sandbox_prefix` (absolute)."""
        if not sandbox_prefix.startswith("/"):
            raise ValueError(f"a root's sandbox path must be absolute, got {sandbox_prefix!r}")
        self.roots[posixpath.normpath(sandbox_prefix)] = Path(os.path.realpath(host_root))
        # Longest prefix first, so a tree nested in another maps to its own root.
        self.roots = dict(sorted(self.roots.items(), key=lambda item: -len(item[0])))

    def locate(self, sandbox_path: str) -> tuple[Path, PurePosixPath]:
        """(host root, path relative to it) of `sandbox_path`, links not yet resolved."""
        if "\0" in sandbox_path:
            raise PathRefused(f"{sandbox_path!r}: NUL bytes are not allowed in paths")
        if not sandbox_path.startswith("/"):
            raise PathRefused(f"sandbox paths must be absolute, got {sandbox_path!r}")
        if ".." in PurePosixPath(sandbox_path).parts:
            raise PathRefused(f"{sandbox_path}: `..` is not allowed in paths; give the path inside the repo")
        normalized = posixpath.normpath(sandbox_path)
        for prefix, host_root in self.roots.items():
            if normalized == prefix or normalized.startswith(prefix.rstrip("/") + "/"):
                return host_root, PurePosixPath(posixpath.relpath(normalized, prefix))
        raise PathRefused(f"{sandbox_path} is outside the files porter may read or write: {sorted(self.roots)}")

    def host_path(self, sandbox_path: str) -> Path:
        """The host file behind `sandbox_path` with every symlink resolved; refused when it leaves its root."""
        host_root, relative = self.locate(sandbox_path)
        resolved = Path(os.path.realpath(host_root / relative))
        if resolved != host_root and not resolved.is_relative_to(host_root):
            raise PathRefused(
                f"{sandbox_path} resolves through a symbolic link to {resolved}, outside the declared trees; refused"
            )
        if ".git" in resolved.relative_to(host_root).parts:
            raise PathRefused(f"{sandbox_path} is inside a repo's .git directory, which only porter may change")
        return resolved

    def _inside(self, sandbox_path: str) -> tuple[Path, PurePosixPath]:
        resolved = self.host_path(sandbox_path)
        host_root, _ = self.locate(sandbox_path)
        return host_root, PurePosixPath(resolved.relative_to(host_root))

    def read_bytes(self, sandbox_path: str, limit: int = MAX_READ_BYTES) -> bytes:
        """The file's bytes, at most `limit` + 1 of them (one more than the limit says it was cut): the sandbox
        writes these files, and a huge or endless one must not exhaust porter's memory."""
        host_root, relative = self._inside(sandbox_path)
        # O_NONBLOCK: a FIFO swapped in by the sandbox must not hang porter on open; only regular files are read.
        descriptor = _open_beneath(host_root, relative, os.O_RDONLY | os.O_NONBLOCK, sandbox_path)
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            os.close(descriptor)
            raise SandboxError(f"{sandbox_path} is not a regular file")
        with os.fdopen(descriptor, "rb") as file:
            return file.read(limit + 1)

    def read_text(self, sandbox_path: str, cut: bool = False) -> str:
        """The file as text. Over MAX_READ_BYTES: refused (a caller that writes the text back must have it all),
        or with `cut`, its first whole lines up to the limit and a last line saying how to read the rest."""
        data = self.read_bytes(sandbox_path)
        if len(data) <= MAX_READ_BYTES:
            return data.decode(errors="replace")
        size = _size_of(self.host_path(sandbox_path))
        how = f"read further with bash (sed -n 'FROM,TOp' {sandbox_path}, grep -n, tail -c)"
        if not cut:
            raise SandboxError(f"{sandbox_path} is {size}, over the {MAX_READ_MIB} MiB porter reads at once; {how}")
        kept = data[:MAX_READ_BYTES].rpartition(b"\n")[0] or data[:MAX_READ_BYTES]
        lines = kept.count(b"\n") + 1
        return kept.decode(errors="replace") + (
            f"\n[porter: {sandbox_path} is {size}; only its first {lines} lines (up to {MAX_READ_MIB} MiB) were read: "
            f"{how}]"
        )

    def write_text(self, sandbox_path: str, text: str) -> None:
        """Write atomically (temporary file, then rename over the target); parent folders are created."""
        host_root, relative = self._inside(sandbox_path)
        if not relative.parts:
            raise PathRefused(f"{sandbox_path} is a tree's root, not a file")
        parent = _open_directory(host_root, relative.parts[:-1], sandbox_path, create=True)
        name, temporary = relative.name, f".{relative.name}.porter-tmp"
        try:
            try:
                mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode & 0o7777
            except FileNotFoundError:
                mode = 0o644
            try:
                os.unlink(temporary, dir_fd=parent)  # a leftover (or a planted link) is removed, never followed
            except FileNotFoundError:
                pass
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode, dir_fd=parent)
            os.fchmod(descriptor, mode)  # the umask must not narrow the file's own mode
            with os.fdopen(descriptor, "w", encoding="utf-8") as file:
                file.write(text)
            os.replace(temporary, name, src_dir_fd=parent, dst_dir_fd=parent)
        finally:
            os.close(parent)


def _open_directory(host_root: Path, parts: Iterable[str], shown: str, create: bool = False) -> int:
    """A descriptor of host_root/parts, each component opened without following links."""
    descriptor = os.open(host_root, _DIRECTORY_FLAGS)
    try:
        for part in parts:
            try:
                following = os.open(part, _DIRECTORY_FLAGS, dir_fd=descriptor)
            except FileNotFoundError:
                if not create:
                    raise SandboxError(f"{shown}: no such file in the sandbox") from None
                os.mkdir(part, 0o755, dir_fd=descriptor)
                following = os.open(part, _DIRECTORY_FLAGS, dir_fd=descriptor)
            except OSError as exc:
                raise _refusal(exc, shown) from None
            os.close(descriptor)
            descriptor = following
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def _open_beneath(host_root: Path, relative: PurePosixPath, flags: int, shown: str) -> int:
    parent = _open_directory(host_root, relative.parts[:-1], shown)
    try:
        return os.open(relative.name or ".", flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    except FileNotFoundError:
        raise SandboxError(f"{shown}: no such file in the sandbox") from None
    except IsADirectoryError:
        raise SandboxError(f"{shown} is a directory, not a file") from None
    except OSError as exc:
        raise _refusal(exc, shown) from None
    finally:
        os.close(parent)


def _size_of(path: Path) -> str:
    try:
        return f"{path.stat().st_size:,} bytes"
    except OSError:
        return "larger than that"


def _refusal(error: OSError, shown: str) -> SandboxError:
    if error.errno in (errno.ELOOP, errno.ENOTDIR):
        return PathRefused(f"{shown} goes through a symbolic link that changed while porter used it; refused")
    return SandboxError(f"{shown}: {error.strerror}")


def patch_problems(patch: str) -> list[str]:
    """Why a unified diff may not be applied: it makes symlinks or gitlinks, or touches a `.git` directory."""
    problems = []
    for number, line in enumerate(patch.splitlines(), start=1):
        if _LINK_MODE.match(line):
            problems.append(f"line {number} ({line.strip()!r}) makes a symbolic link or a submodule link")
        match = _DIFF_PATH.match(line)
        paths = [path for path in (match.groups() if match else ()) if path and path != "/dev/null"]
        if any(".git" in PurePosixPath(path).parts for path in paths):
            problems.append(f"line {number} touches a .git directory ({line.strip()!r})")
    return problems


def refuse_patch(patch: str) -> None:
    problems = patch_problems(patch)
    if problems:
        raise PathRefused("the patch was refused, nothing was changed: " + "; ".join(problems))


def escaping_links(tree: Path, relative_paths: Iterable[str]) -> list[str]:
    """Those of `relative_paths` in `tree` that are symlinks resolving outside it."""
    root = Path(os.path.realpath(tree))
    escaping = []
    for relative in relative_paths:
        path = root / relative
        if path.is_symlink():
            target = Path(os.path.realpath(path))
            if target != root and not target.is_relative_to(root):
                escaping.append(f"{relative} -> {os.readlink(path)}")
    return escaping
