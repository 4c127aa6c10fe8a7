"""The path guard: every host-side file access a tool makes stays inside the declared trees.

A sandbox path is mapped onto the host tree of the root it falls under (engine repos, scratch, and
whatever a caller adds with `add_root`, such as a model overlay), symlinks are resolved, and anything
that lands outside the roots, or inside a repo's `.git`, is refused with an error naming the path.
Files are then opened one component at a time with O_NOFOLLOW from the root's directory, so a link
swapped in by the sandbox between the check and the access is refused too, never followed; writes go
to a temporary file renamed over the target, so a hard link or a symlink is replaced, never written
through; reads are bounded (MAX_READ_BYTES). Also checks patches (no symlinks, no gitlinks, nothing
under `.git`, no change to a link already in the tree), reading their headers as git's apply.c does (a
mode is `strtoul(..., 8)`: any spacing, leading zeros, a sign), and finds symlinks in a tree that point
outside it. Does not run git (porter/sandbox/trees/safe_git.py) and does not decide which roots a run has
(the sandboxes and the run context do).
"""

from __future__ import annotations

import errno
import os
import posixpath
import re
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath

from porter.sandbox.interface import SandboxError

# What porter reads of one sandbox-written file at once: enough for any source file, bounded for a huge or
# endless one (a log, a dump) that would otherwise be read whole into porter's memory.
MAX_READ_MIB = 4
MAX_READ_BYTES = MAX_READ_MIB << 20
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


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


def patch_problems(patch: str, tree: Path | None = None) -> list[str]:
    """Why a unified diff may not be applied: it makes or retargets a symlink or a gitlink, or touches a `.git`
    directory. Headers are read as git reads them (see `git_mode`); with `tree`, a change to a path that is a
    symbolic link there (an edit, a copy or a rename carries the link along, no mode line needed) is refused too."""
    problems = []
    for number, line in enumerate(patch.splitlines(), start=1):
        shown = f"line {number} ({line.strip()[:80]!r})"
        if (problem := _mode_problem(line)) is not None:
            problems.append(f"{shown} {problem}")
        names = _header_names(line)
        if any(part.lower() == ".git" for name in names for part in PurePosixPath(name).parts):
            problems.append(f"{shown} touches a .git directory")
        if tree is not None and not line.startswith(("+++ ", "copy to ", "rename to ", "rename new ")):
            linked = [name for name in _tree_names(line, names) if _is_link(tree, name)]
            if linked and not _deletes(patch, number):
                problems.append(f"{shown} changes the symbolic link {linked[0]} (a patch may only delete a link)")
    return problems


def refuse_patch(patch: str, tree: Path | None = None) -> None:
    problems = list(dict.fromkeys(patch_problems(patch, tree)))
    if problems:
        raise PathRefused("the patch was refused, nothing was changed: " + "; ".join(problems))


# What git's apply.c (v2.39.5, parse_git_diff_header's table) matches, as exact prefixes, one space included.
_NEW_MODE_HEADERS = ("new file mode ", "new mode ")  # the mode the file gets
_NAME_HEADERS = ("--- ", "+++ ", "copy from ", "copy to ", "rename from ", "rename to ", "rename old ", "rename new ")
S_IFMT, S_IFREG, S_IFLNK, S_IFGITLINK = 0o170000, 0o100000, 0o120000, 0o160000
_C_SPACE = " \t\n\v\f\r"  # C's isspace()
_ULONG_MAX, _UINT_MASK = (1 << 64) - 1, (1 << 32) - 1
_C_ESCAPES = {"a": 7, "b": 8, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11, "\\": 92, '"': 34}  # unquote_c_style


def git_mode(text: str) -> int | None:
    """A mode as git's parse_mode_line reads it (apply.c): `strtoul(text, &end, 8)`, so leading whitespace, a sign
    and any number of octal digits (`  120000`, `0120000`, `+120000`; `-0657777` wraps around to a link), stored
    in an unsigned int; then whitespace or the end of the line must follow. None where git refuses the line."""
    match = re.match(r"[ \t\n\v\f\r]*([+-]?)([0-7]+)(.*)$", text, re.DOTALL)
    if match is None or match.group(3)[:1] not in ("", *_C_SPACE):
        return None
    value = int(match.group(2), 8)
    if value > _ULONG_MAX:
        value = _ULONG_MAX  # strtoul's ERANGE answer, whatever the sign
    elif match.group(1) == "-":
        value = -value & _ULONG_MAX
    return value & _UINT_MASK


def _index_mode(line: str) -> str | None:
    """The mode text of an `index OLD..NEW MODE` line, as apply.c's gitdiff_index finds it (None: no mode)."""
    rest = line[len("index ") :]
    dots = rest.find(".")
    if dots < 0 or rest[dots + 1 : dots + 2] != "." or dots > 64:
        return None
    after = rest[dots + 2 :]
    space = after.find(" ")
    return after[space + 1 :] if 0 <= space <= 64 else None


def _mode_problem(line: str) -> str | None:
    """What a header line that sets a mode would make, when it is not a regular file (None: no such line or a
    regular file). Every non-regular type is refused: newer git (canon_mode) turns any unknown type into a gitlink."""
    header = next((header for header in _NEW_MODE_HEADERS if line.startswith(header)), None)
    if header is not None:
        text = line[len(header) :]
    elif line.startswith("index "):
        text = _index_mode(line)
    else:
        return None
    if text is None:
        return None
    mode = git_mode(text)
    if mode is None:
        return "has a mode git cannot read; write 100644 or 100755"
    kind = mode & S_IFMT
    if kind == S_IFLNK:
        return f"makes a symbolic link (mode {mode:o} as git reads it)"
    if kind == S_IFGITLINK:
        return f"makes a submodule link (mode {mode:o} as git reads it)"
    if kind != S_IFREG:
        return f"sets mode {mode:o}, not a regular file's; write 100644 or 100755"
    return None


def _header_names(line: str) -> list[str]:
    """The paths a header line names, unquoted as git does (C-style quotes, octal escapes)."""
    if line.startswith("diff --git "):
        return [_unquote(word) for word in line[len("diff --git ") :].split()]
    for header in _NAME_HEADERS:
        if line.startswith(header):
            name = line[len(header) :]
            name = _unquote(name) if name.startswith('"') else name.split("\t", 1)[0]
            return [] if name == "/dev/null" else [name]
    return []


def _tree_names(line: str, names: list[str]) -> list[str]:
    """The repo-relative old paths of a header line: the first component of `diff --git` and `---` names is
    git's -p1 prefix (any word, not only a/); rename and copy sources are written without it."""
    if line.startswith(("diff --git ", "--- ")):
        return [str(PurePosixPath(*PurePosixPath(name).parts[1:])) for name in names[:1] if "/" in name]
    return names


def _is_link(tree: Path, name: str) -> bool:
    return name not in ("", ".") and ".." not in PurePosixPath(name).parts and (tree / name).is_symlink()


def _deletes(patch: str, number: int) -> bool:
    """Whether the file section holding line `number` deletes its file (`deleted file mode`, or `+++ /dev/null`)."""
    lines = patch.splitlines()
    start = max((i for i in range(number) if lines[i].startswith("diff --git ")), default=0)
    end = next((i for i in range(number, len(lines)) if lines[i].startswith("diff --git ")), len(lines))
    section = lines[start:end]
    return any(line.startswith("deleted file mode ") or line.startswith("+++ /dev/null") for line in section)


def _unquote(name: str) -> str:
    """git's unquote_c_style: a name in double quotes with backslash escapes (a letter, or three octal digits
    for one byte: `"a/\\056git/config"` is a/.git/config)."""
    if not (len(name) >= 2 and name.startswith('"') and name.endswith('"')):
        return name
    body, out, index = name[1:-1], bytearray(), 0
    while index < len(body):
        octal = re.match(r"\\([0-3][0-7]{2})", body[index:])
        if octal:
            out.append(int(octal.group(1), 8))
            index += 4
        elif body[index] == "\\" and body[index + 1 : index + 2] in _C_ESCAPES:
            out.append(_C_ESCAPES[body[index + 1]])
            index += 2
        else:
            out += body[index].encode()
            index += 1
    return out.decode(errors="replace")


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
