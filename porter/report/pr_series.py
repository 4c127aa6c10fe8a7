"""A run's commits as maintainers receive them: change sets, the exported series, the author and sign-off, the push.

Covers grouping a repo's accepted commits into change sets (a commit joins the set of every earlier commit
whose files it touches, since it cannot be reviewed or applied without them; commits that share no file are
separate PRs: a build fix and a tuned table do not wait on each other), copying the commits with the task's
author and `Signed-off-by` (outputs.author, outputs.signoff: the same trees and messages, the original dates,
so a second export writes the same commits; the run's branch is never rewritten, --resume reads porter's
commits from it), `git format-patch` of the copies into `patches/<repo>/`, and pushing them. Does not write
the PR text (pr_draft.py) and decides nothing about what was kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import git

from porter.sandbox.trees.tracked import RepoState
from porter.task import OutputsSpec


@dataclass
class ChangeSet:
    """Commits of one repo that make one PR: the run's own commits and their exported copies, in order."""

    repo: str
    commits: list[git.Commit]  # the run's commits: the records (attempts, state) name these
    exported: list[git.Commit] = field(default_factory=list)  # as exported: copies with the author and sign-off
    patches: list[Path] = field(default_factory=list)
    files: list[str] = field(default_factory=list)


def export(repo: git.Repo, state: RepoState, outputs: OutputsSpec, out_dir: Path) -> tuple[list[ChangeSet], str]:
    """The repo's change sets with their patches (the whole series in `out_dir`, `git am`-able on the base), and the
    tip of the exported series (what a push sends)."""
    commits = [repo.commit(sha) for sha in state.accepted]
    exported = _copies(repo, state.base_commit, commits, outputs)
    out_dir = out_dir.resolve()  # git runs in the repo: a relative -o would land inside the tree
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.patch"):
        old.unlink()
    tip = exported[-1].hexsha if exported else state.base_commit
    names = repo.git.format_patch(f"{state.base_commit}..{tip}", o=str(out_dir)).splitlines() if commits else []
    patch_of = dict(zip([c.hexsha for c in commits], [Path(name) for name in names], strict=True))
    copy_of = dict(zip([c.hexsha for c in commits], exported, strict=True))
    sets = change_sets(state.name, commits)
    for change in sets:
        change.exported = [copy_of[c.hexsha] for c in change.commits]
        change.patches = [patch_of[c.hexsha] for c in change.commits]
    return sets, tip


def change_sets(repo_name: str, commits: list[git.Commit]) -> list[ChangeSet]:
    """Commits grouped by the files they touch: a commit touching a file of an earlier set joins it (several sets
    it touches merge), in the order the run made them."""
    sets: list[ChangeSet] = []
    for commit in commits:
        files = sorted(commit.stats.files)
        touched = [change for change in sets if set(change.files) & set(files)]
        merged = ChangeSet(repo_name, [], files=files)
        for change in touched:
            merged.commits += change.commits
            merged.files = sorted({*merged.files, *change.files})
            sets.remove(change)
        merged.commits = sorted([*merged.commits, commit], key=commits.index)
        sets.append(merged)
    return sorted(sets, key=lambda change: commits.index(change.commits[0]))


def _copies(repo: git.Repo, base: str, commits: list[git.Commit], outputs: OutputsSpec) -> list[git.Commit]:
    """The commits as exported: themselves (no outputs.author), or copies (same trees and dates) with the author and
    the sign-off."""
    if not outputs.author:
        return commits
    name, email = re.fullmatch(r"(.*?)\s*<([^<>]+)>", outputs.author).groups()
    copies, parent = [], base
    for commit in commits:
        message = commit.message.rstrip("\n") + "\n"
        if outputs.signoff:
            message += f"\nSigned-off-by: {name} <{email}>\n"
        environment = {
            "GIT_AUTHOR_NAME": name,
            "GIT_AUTHOR_EMAIL": email,
            "GIT_AUTHOR_DATE": commit.authored_datetime.isoformat(),
            "GIT_COMMITTER_NAME": name,
            "GIT_COMMITTER_EMAIL": email,
            "GIT_COMMITTER_DATE": commit.committed_datetime.isoformat(),
        }
        sha = repo.git.commit_tree(commit.tree.hexsha, "-p", parent, "-m", message, env=environment)
        parent = sha.strip()
        copies.append(repo.commit(parent))
    return copies


def push(repo: git.Repo, tip: str, remote: str, remote_branch: str) -> None:
    """Push the exported series; `remote` is a configured remote's name, a URL or a path."""
    repo.git.push(remote, f"{tip}:refs/heads/{remote_branch}")
