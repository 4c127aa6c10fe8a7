"""Patch modes read as git reads them: the guard's verdict on git's own variants, compared with what `git apply` does.

git writes a symlink as `new file mode 120000`, but its parser (apply.c's parse_mode_line: strtoul in base 8) also
takes `  120000`, `0120000`, `+120000`, `120777` and even `-0657777` (which wraps around to a link type), and a copy,
a rename or a plain edit of a path that is already a link carries the link along with no mode line at all. Each
variant here is made from a patch git itself wrote, applied by the real `git apply` in a fresh repo: whatever git
turns into a link or a gitlink, the guard must refuse; whatever git writes as a regular file, the guard must pass.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from porter.sandbox.guard import git_mode, patch_problems


def _git(tree: Path, *arguments: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *arguments], cwd=tree, input=stdin, capture_output=True, text=True)


def _repo(path: Path) -> Path:
    """A repo holding a regular file and a symlink to it, committed."""
    path.mkdir()
    _git(path, "init", "-q")
    (path / "file").write_text("hello\n")
    (path / "inlink").symlink_to("file")
    _git(path, "add", ".")
    _git(path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    return path


@pytest.fixture(scope="module")
def link_patch(tmp_path_factory) -> str:
    """The patch git writes for a new symlink to /etc/passwd."""
    tree = _repo(tmp_path_factory.mktemp("source") / "repo")
    (tree / "sneaky").symlink_to("/etc/passwd")
    _git(tree, "add", "sneaky")
    patch = _git(tree, "diff", "--cached").stdout
    assert "new file mode 120000\n" in patch
    return patch


def _what_git_makes(tree: Path, patch: str, path: str) -> str:
    """What `git apply` leaves at `path`: link, gitlink (an empty directory), file, absent, or refused."""
    if _git(tree, "apply", "-", stdin=patch).returncode != 0:
        return "refused"
    target = tree / path
    if target.is_symlink():
        return "link"
    if target.is_dir():
        return "gitlink"
    return "file" if target.exists() else "absent"


@pytest.mark.parametrize(
    "mode_line",
    [
        "new file mode 120000",
        "new file mode  120000",
        "new file mode 0120000",
        "new file mode +120000",
        "new file mode 120777",
        "new file mode 00000120000",
        "new file mode -0657777",
        "new file mode 160000",
        "new file mode 100644",
        "new file mode  100755",
        "new file mode 0100644",
    ],
)
def test_a_new_file_mode_is_refused_exactly_when_git_makes_a_link(link_patch, tmp_path, mode_line):
    variant = link_patch.replace("new file mode 120000", mode_line)
    made = _what_git_makes(_repo(tmp_path / "repo"), variant, "sneaky")
    problems = patch_problems(variant)
    assert made in ("link", "gitlink", "file"), made
    if made == "file":
        assert problems == [], problems
    else:
        assert problems and ("symbolic link" in problems[0] or "submodule link" in problems[0]), (made, problems)


LINK_EDITS = {
    # an existing link retargeted by an ordinary hunk: no mode anywhere
    "edit": "diff --git a/inlink b/inlink\n--- a/inlink\n+++ b/inlink\n@@ -1 +1 @@\n-file\n"
    "\\ No newline at end of file\n+/etc/shadow\n\\ No newline at end of file\n",
    # a copy of it, retargeted: the copy is a link too
    "copy": "diff --git a/inlink b/copied\nsimilarity index 0%\ncopy from inlink\ncopy to copied\n--- a/inlink\n"
    "+++ b/copied\n@@ -1 +1 @@\n-file\n\\ No newline at end of file\n+/etc/passwd\n\\ No newline at end of file\n",
    # the old-style rename headers git still reads
    "rename": "diff --git a/inlink b/moved\nsimilarity index 100%\nrename old inlink\nrename new moved\n",
    # the index line's mode on a regular file git already has
    "index mode": "diff --git a/file b/file\nindex ce01362..0000000  0120000\n--- a/file\n+++ b/file\n"
    "@@ -1 +1 @@\n-hello\n+bye\n",
}


@pytest.mark.parametrize("kind", sorted(LINK_EDITS))
def test_a_patch_that_carries_an_existing_link_is_refused(tmp_path, kind):
    tree = _repo(tmp_path / "repo")
    patch = LINK_EDITS[kind]
    problems = patch_problems(patch, tree)
    made = {name: _what_git_makes(_repo(tmp_path / f"copy-{name}"), patch, name) for name in ("inlink", "copied")}
    assert problems, (kind, made)
    if kind in ("edit", "copy"):
        target = "copied" if kind == "copy" else "inlink"
        assert made[target] == "link" and os.readlink(tmp_path / f"copy-{target}" / target).startswith("/etc/")


def test_deleting_a_link_and_ordinary_edits_pass(tmp_path):
    tree = _repo(tmp_path / "repo")
    delete = "diff --git a/inlink b/inlink\ndeleted file mode 120000\nindex 1a010b1..0000000\n--- a/inlink\n"
    delete += "+++ /dev/null\n@@ -1 +0,0 @@\n-file\n\\ No newline at end of file\n"
    edit = "diff --git a/file b/file\nindex ce01362..b3f4f5e 100644\n--- a/file\n+++ b/file\n"
    edit += "@@ -1 +1 @@\n-hello\n+bye\n"
    for patch in (delete, edit):
        assert patch_problems(patch, tree) == []
        assert _git(_repo(tmp_path / f"apply-{len(patch)}"), "apply", "-", stdin=patch).returncode == 0


@pytest.mark.parametrize(
    "name_line",
    ['--- "a/\\056git/config"', "+++ b/.GIT/config", "rename to .git/hooks/pre-commit", "copy to sub/.git/config"],
)
def test_a_git_directory_is_found_however_the_name_is_spelled(name_line):
    assert any(".git directory" in problem for problem in patch_problems(f"diff --git a/x b/x\n{name_line}\n"))


@pytest.mark.parametrize(
    ("text", "mode"),
    [("120000", 0o120000), ("  0120000", 0o120000), ("+100644", 0o100644), ("120000x", None), ("", None)],
)
def test_git_mode_reads_like_strtoul(text, mode):
    assert git_mode(text) == mode
