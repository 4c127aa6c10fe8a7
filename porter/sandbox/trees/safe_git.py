"""porter's own git, hardened so that nothing a sandbox writes into a repo is ever executed on the host.

The trees porter patches are written by the sandbox (in Docker their `.git` is mounted read-only, but a
local sandbox can write anything), so every git porter runs on them: disables hooks, fsmonitor, the
`ext::` transport, submodule recursion and pagers on its command line (`-c` beats every config file and
is inherited by any git it spawns); pins GIT_DIR and GIT_WORK_TREE to the repo it checked, so a planted
`.git` file cannot redirect it; ignores the system and the user's global config (a filter, textconv or
diff driver in ~/.gitconfig would run on every diff and commit); and refuses a repo whose own config sets
anything outside a short allow-list (filters, textconv, external diff, includes, fsmonitor, ...), which
`sanitize_config` strips once from a tree copied out of an image, before any sandbox sees it.
Also recognises the lock files a killed git leaves in porter's git dir (`index.lock`, a ref's `.lock`: git
takes them with O_EXCL and refuses to start while one exists) and clears those no live process holds open;
the sandbox cannot write that dir, so they are porter's own. Does not decide what to commit
(porter/sandbox/trees/tracked.py) nor where trees live (the sandboxes).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import git

from porter.sandbox.interface import SandboxError

HARDENING = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.untrackedCache=false",
    "core.pager=cat",
    "protocol.ext.allow=never",
    "diff.ignoreSubmodules=all",
    "status.submoduleSummary=false",
    "submodule.recurse=false",
)
# GIT_CONFIG_GLOBAL (git >= 2.32) replaces ~/.gitconfig and $XDG_CONFIG_HOME/git/config both.
ENVIRONMENT = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_OPTIONAL_LOCKS": "0",
}
# Repo-local config keys that only describe data; anything else (filter.*, diff.*.textconv, include.*,
# core.fsmonitor, core.sshCommand, remote.*.uploadpack, ...) can make git run a command.
ALLOWED_KEY = re.compile(
    r"^(?:core\.(?:repositoryformatversion|filemode|bare|logallrefupdates|ignorecase|precomposeunicode|symlinks"
    r"|autocrlf|eol|safecrlf|quotepath|checkstat|trustctime|abbrev|compression|bigfilethreshold)"
    r"|user\.(?:name|email)|init\.defaultbranch|gc\.[a-z]+|pack\.[a-z]+|index\.[a-z]+"
    r"|extensions\.objectformat|branch\..+\.(?:remote|merge|rebase)|remote\..+\.(?:url|pushurl|fetch|tagopt|prune))$"
)


# The lock files git takes in a git dir (lockfile.c: the file's name plus ".lock"), besides refs/**/*.lock.
LOCK_FILES = ("index.lock", "HEAD.lock", "ORIG_HEAD.lock", "FETCH_HEAD.lock", "packed-refs.lock", "config.lock")


class UntrustedRepo(SandboxError):
    """A repo holding something porter did not write and will not run git on (or commit); the message says what."""


def _config_entries(config: Path) -> list[tuple[str, str]]:
    if not config.exists():
        return []
    listed = subprocess.run(
        ["git", "config", "--no-includes", "--file", str(config), "--list", "-z"],
        capture_output=True,
        env=_environment(),
        check=True,
    ).stdout.decode(errors="replace")
    entries = []
    for item in filter(None, listed.split("\0")):
        key, _, value = item.partition("\n")
        entries.append((key, value))
    return entries


def check_git_dir(git_dir: Path, name: str = "") -> None:
    """Raise UntrustedRepo when the repo's own config could make git run something, or points elsewhere."""
    git_dir = Path(git_dir)
    what = f"repo {name!r}" if name else str(git_dir)
    if not git_dir.is_dir() or git_dir.is_symlink():
        raise UntrustedRepo(f"{what}: {git_dir} is not a git directory porter made (a link or a file); refusing it")
    for extra in ("commondir", "config.worktree"):
        if (git_dir / extra).exists():
            raise UntrustedRepo(f"{what}: {git_dir / extra} redirects git's config; porter did not write it")
    unknown = sorted({key for key, _ in _config_entries(git_dir / "config") if not ALLOWED_KEY.match(key)})
    if unknown:
        raise UntrustedRepo(
            f"{what}: {git_dir / 'config'} sets {unknown}, which porter did not write and which can make git run "
            "commands; porter will not run git on it (the sandbox must not change .git)"
        )


def sanitize_config(git_dir: Path) -> list[str]:
    """Drop every config key outside the allow-list (a tree fresh from an image); returns the dropped keys."""
    config = Path(git_dir) / "config"
    entries = _config_entries(config)
    dropped = sorted({key for key, _ in entries if not ALLOWED_KEY.match(key)})
    if dropped:
        fresh = config.with_name("config.porter-tmp")
        fresh.unlink(missing_ok=True)
        for key, value in entries:
            if ALLOWED_KEY.match(key):
                add = ["git", "config", "--file", str(fresh), "--add", key, value]
                subprocess.run(add, env=_environment(), check=True)
        fresh.touch()
        os.replace(fresh, config)
    for extra in ("commondir", "config.worktree"):
        (Path(git_dir) / extra).unlink(missing_ok=True)
    return dropped


def harden(repo: git.Repo) -> git.Repo:
    """Make every git command of `repo` run hardened, pinned to its checked git dir and work tree."""
    check_git_dir(Path(repo.git_dir))
    repo.git.set_persistent_git_options(c=list(HARDENING))
    pinned = {"GIT_DIR": repo.git_dir, "GIT_WORK_TREE": repo.working_tree_dir} if repo.working_tree_dir else {}
    repo.git.update_environment(**ENVIRONMENT, **pinned)
    return repo


def open_repo(path: Path | str) -> git.Repo:
    """A hardened gitpython Repo of the tree at `path` (its `.git` must be a directory porter trusts)."""
    try:
        repo = git.Repo(path)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise UntrustedRepo(f"{path} is not a git repository") from None
    return harden(repo)


def init_repo(path: Path) -> git.Repo:
    return harden(git.Repo.init(path))


def _environment() -> dict[str, str]:
    return {**os.environ, **ENVIRONMENT}


def run(tree: Path, arguments: list[str], stdin: str | None = None) -> subprocess.CompletedProcess:
    """`git ARGUMENTS` in `tree`, hardened (for commands gitpython has no call for, such as `apply`)."""
    git_dir = Path(tree) / ".git"
    check_git_dir(git_dir)
    hardening = [word for option in HARDENING for word in ("-c", option)]
    env = {**_environment(), "GIT_DIR": str(git_dir), "GIT_WORK_TREE": str(tree)}
    return subprocess.run(
        ["git", *hardening, *arguments], cwd=tree, input=stdin, capture_output=True, text=True, env=env
    )


def lock_files(git_dir: Path) -> list[Path]:
    """The lock files present in `git_dir`: the fixed names and every ref's."""
    git_dir = Path(git_dir)
    found = [git_dir / name for name in LOCK_FILES if (git_dir / name).exists()]
    refs = git_dir / "refs"
    return found + (sorted(refs.rglob("*.lock")) if refs.is_dir() else [])


def lock_holders(lock: Path, git_dir: Path) -> list[int]:
    """Live processes that may own `lock`: those that have it open (git keeps its lock open while it writes) and
    those whose environment pins GIT_DIR to `git_dir` (every git porter runs, and what that git runs, such as an
    editor while a lock waits closed). Processes of other users cannot be read: porter's git runs as porter."""
    target = os.path.realpath(lock)
    pinned = {f"GIT_DIR={spelling}".encode() for spelling in (str(git_dir), os.path.realpath(git_dir))}
    holders, own = [], str(os.getpid())
    for process in Path("/proc").glob("[0-9]*"):
        try:
            # This process's git calls are synchronous: a child still alive is gitpython's persistent `cat-file`
            # reader, which takes no lock.
            if process.name == own or (process / "stat").read_text().rsplit(")", 1)[1].split()[1] == own:
                continue
            environ = set((process / "environ").read_bytes().split(b"\0"))
            if environ & pinned or any(os.readlink(fd) == target for fd in (process / "fd").iterdir()):
                holders.append(int(process.name))
        except OSError:
            continue  # gone meanwhile, or not ours to read
    return holders


def clear_stale_locks(git_dir: Path) -> tuple[list[str], dict[str, list[int]]]:
    """Remove the lock files in `git_dir` that no live process may own (left by a git killed mid-work: what it
    was writing never replaced the index or ref, which stand as before). Returns (cleared, held: lock -> pids)."""
    cleared, held = [], {}
    for lock in lock_files(git_dir):
        holders = lock_holders(lock, git_dir)
        if holders:
            held[str(lock)] = holders
            continue
        lock.unlink(missing_ok=True)
        cleared.append(str(lock.relative_to(git_dir)))
    return cleared, held
