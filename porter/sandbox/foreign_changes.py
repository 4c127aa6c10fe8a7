"""Changes to the sandbox's filesystem outside the declared trees: what accept must refuse to keep.

Covers listing what a run changed in its sandbox beyond the repos: `docker diff` of the container
(through the docker SDK's `Container.diff()`: Kind 0 changed, 1 added, 2 deleted, relative to the image)
or, for the local sandbox, the files under its root modified since the run set it up. Paths under the
repos, the scratch dir, temp and cache dirs, Python bytecode and the task's `sandbox.build_products`
globs do not count. A pip install into site-packages, an edit under /opt or /usr does: no patch,
revert or fingerprint would ever see it. Also the other way in: a serve environment variable that names a file
where nothing of this is looked at (`$PYTHONPATH` to a sitecustomize.py in the scratch, `$LD_PRELOAD` from /tmp),
or that is shell code run before the server (`$BASH_ENV`), which set_flags refuses and the measurement cache
shuns. Does not undo anything.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from porter.sandbox.interface import SCRATCH_DIR, Sandbox
from porter.sandbox.trees.overlay import WEIGHTS_MOUNT
from porter.task import Task

# Written by any engine or shell while it runs, and never part of what the engine is; /usr/sbin/docker-init is
# the init process Docker itself puts into a container started with `init`.
IGNORED_TREES = ("/tmp", "/var/tmp", "/run", "/root/.cache", "/dev", "/proc", "/sys", "/usr/sbin/docker-init")
IGNORED_PATTERNS = ("*/__pycache__", "*/__pycache__/*", "*.pyc")
KIND = {0: "changed", 1: "added", 2: "deleted"}
# Read by bash before the server's command runs, and expanded with command substitution (bash(1): BASH_ENV, ENV in
# POSIX mode, PS4 under xtrace; SHELLOPTS and BASHOPTS turn xtrace on): shell code, whatever their value names.
SHELL_HOOKS = ("BASH_ENV", "ENV", "PS4", "SHELLOPTS", "BASHOPTS", "PROMPT_COMMAND")


def foreign_changes(sandbox: Sandbox, task: Task, run_dir: Path) -> list[str]:
    """Changed paths outside the declared trees, as "added /usr/local/lib/.../foo" lines, top-most first."""
    changes = _docker_changes(sandbox) if hasattr(sandbox, "container") else _local_changes(sandbox, run_dir)
    mounts = [mount.container for mount in task.sandbox.mounts] + [SCRATCH_DIR, WEIGHTS_MOUNT]
    declared = [repo.path for repo in task.patchable_repos()] + mounts
    patterns = [*IGNORED_PATTERNS, *task.sandbox.build_products]
    # A changed directory is only the parent of a real change (kept or ignored): name the change, not it.
    parents = {str(parent) for path in changes for parent in PurePosixPath(path).parents}
    own = {path: kind for path, kind in changes.items() if not (kind == "changed" and path in parents)}
    kept = {
        path: kind
        for path, kind in own.items()
        if not _under(path, declared + list(IGNORED_TREES))
        and not _above(path, declared)  # the mount points' parents, created for the mounts
        and not any(fnmatch.fnmatchcase(path, p) for p in patterns)
    }
    # An added tree is named once, at its root.
    leaves = {path: kind for path, kind in kept.items() if kept.get(str(PurePosixPath(path).parent)) != "added"}
    return [f"{kind} {path}" for path, kind in sorted(leaves.items())]


def unseen_paths(task: Task, env: Mapping[str, str]) -> list[str]:
    """Why each variable of `env` (the serve process's) could make the server run what no fingerprint covers: a
    shell hook, or a path (absolute, or relative to the workdir) in the scratch, the task's mounts or a tree the
    foreign-change check ignores, where the agent writes unseen. Empty when there is none."""
    unseen = [SCRATCH_DIR, *IGNORED_TREES, *(mount.container for mount in task.sandbox.mounts)]
    problems = []
    for name, value in env.items():
        words = (posixpath.normpath(posixpath.join(task.sandbox.workdir, w)) for w in re.split(r"[\s:;,='\"]+", value))
        if name in SHELL_HOOKS:
            problems.append(f"${name} is shell code bash runs before the server")
        elif named := next((word for word in words if _under(word, unseen)), None):
            problems.append(f"${name} names {named}, where the agent writes and no fingerprint looks")
    return problems


def _under(path: str, roots: list[str]) -> bool:
    candidate = PurePosixPath(path)
    return any(candidate == PurePosixPath(root) or PurePosixPath(root) in candidate.parents for root in roots)


def _above(path: str, roots: list[str]) -> bool:
    return any(PurePosixPath(path) in PurePosixPath(root).parents for root in roots)


def _docker_changes(sandbox: Sandbox) -> dict[str, str]:
    container = sandbox.container
    if container is None:
        return {}
    return {entry["Path"]: KIND.get(entry["Kind"], "changed") for entry in container.diff() or []}


def _local_changes(sandbox: Sandbox, run_dir: Path) -> dict[str, str]:
    """Files under the local root newer than the run's set-up (environment.json is written right after it)."""
    root = getattr(sandbox, "root", None)
    marker = run_dir / "environment.json"
    if root is None or not Path(root).exists() or not marker.exists():
        return {}
    since = marker.stat().st_mtime_ns
    changes = {}
    for path in Path(root).rglob("*"):
        if path.is_file() and not path.is_symlink() and path.stat().st_mtime_ns > since:
            changes["/" + str(path.relative_to(root))] = "changed"
    return changes
