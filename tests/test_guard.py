"""The path guard, patch checks, porter's hardened git and the task's path rules, on real files and real git.

Each hostile case plants what a sandbox could (a symlink out, a `..`, a link swapped in under a checked path, a
hook, an fsmonitor or a filter in .git/config) and checks that the access is refused and nothing outside changed.
"""

from __future__ import annotations

import os
import subprocess

import git
import pytest
from pydantic import ValidationError

from porter.sandbox import SandboxError
from porter.sandbox.guard import MAX_READ_BYTES, PathGuard, PathRefused, escaping_links, patch_problems
from porter.sandbox.trees import safe_git
from porter.sandbox.trees.baseline import ensure_baseline
from porter.sandbox.trees.tracked import TrackedRepo
from porter.task import RepoSpec


@pytest.fixture
def layout(tmp_path):
    """A repo tree (sandbox path /src/engine) and a host file outside it."""
    tree = tmp_path / "tree"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "a.py").write_text("x = 1\n")
    outside = tmp_path / "host"
    outside.mkdir()
    (outside / "secret.txt").write_text("host only\n")
    return tree, outside, PathGuard({"/src/engine": tree})


def test_reads_and_writes_inside_the_tree(layout):
    tree, _, guard = layout
    assert guard.read_text("/src/engine/pkg/a.py") == "x = 1\n"
    os.chmod(tree / "pkg" / "a.py", 0o755)
    guard.write_text("/src/engine/pkg/a.py", "x = 2\n")
    guard.write_text("/src/engine/new/dir/b.py", "y\n")
    assert (tree / "pkg" / "a.py").read_text() == "x = 2\n" and (tree / "pkg" / "a.py").stat().st_mode & 0o777 == 0o755
    assert (tree / "new" / "dir" / "b.py").read_text() == "y\n"
    (tree / "inner").symlink_to("pkg")  # a link that stays inside the tree is fine
    assert guard.read_text("/src/engine/inner/a.py") == "x = 2\n"


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("/src/engine/leak.txt", "resolves through a symbolic link"),
        ("/src/engine/host_etc/secret.txt", "resolves through a symbolic link"),
        ("/src/engine/host_etc/porter_pwned", "resolves through a symbolic link"),
        ("/src/engine/../../etc/passwd", "`..` is not allowed"),
        ("/etc/passwd", "outside the files porter may read or write"),
        ("pkg/a.py", "must be absolute"),
        ("/src/engine/.git/config", "inside a repo's .git"),
    ],
)
def test_every_way_out_is_refused_by_name(layout, path, problem):
    tree, outside, guard = layout
    (tree / "leak.txt").symlink_to(outside / "secret.txt")
    (tree / "host_etc").symlink_to(outside)
    with pytest.raises(PathRefused, match=problem) as refused:
        guard.read_text(path)
    assert path in str(refused.value)
    with pytest.raises(PathRefused, match=problem):
        guard.write_text(path, "pwned\n")
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "host only\n"


def test_a_link_swapped_in_after_the_check_is_not_followed(layout):
    tree, outside, guard = layout
    host_root, relative = guard.locate("/src/engine/pkg/a.py")
    (tree / "pkg" / "a.py").unlink()
    (tree / "pkg").rmdir()
    (tree / "pkg").symlink_to(outside)  # the sandbox wins the race between resolve and open
    from porter.sandbox import guard as guard_module

    with pytest.raises(PathRefused, match="symbolic link that changed"):
        guard_module._open_beneath(host_root, relative, os.O_RDONLY, "/src/engine/pkg/a.py")
    (tree / "b.py").symlink_to(outside / "secret.txt")
    with pytest.raises(PathRefused, match="symbolic link"):
        guard_module._open_beneath(host_root, relative.parent.parent / "b.py", os.O_RDONLY, "/src/engine/b.py")


def test_a_fifo_is_refused_without_hanging(layout):
    tree, _, guard = layout
    os.mkfifo(tree / "pipe")
    with pytest.raises(SandboxError, match="not a regular file"):
        guard.read_text("/src/engine/pipe")


def test_add_root_lets_another_tree_in(layout, tmp_path):
    _, _, guard = layout
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    guard.add_root("/models/demo", overlay)
    guard.write_text("/models/demo/config.json", "{}\n")
    assert (overlay / "config.json").read_text() == "{}\n"


@pytest.mark.parametrize(
    ("patch", "problem"),
    [
        ("diff --git a/l b/l\nnew file mode 120000\nindex 0000000..e69de29\n--- /dev/null\n+++ b/l\n", "symbolic"),
        ("diff --git a/l b/l\nold mode 100644\nnew mode 120000\n", "symbolic"),
        ("diff --git a/l b/l\nindex 1234567..89abcde 120000\n--- a/l\n+++ b/l\n", "symbolic"),
        ("diff --git a/s b/s\nnew file mode 160000\n", "submodule"),
        ("--- a/.git/config\n+++ b/.git/config\n@@ -1 +1 @@\n-a\n+b\n", ".git"),
        ("--- a/sub/.git/hooks/x\n+++ b/sub/.git/hooks/x\n", ".git"),
    ],
)
def test_patches_that_make_links_or_touch_git_are_refused(patch, problem):
    problems = patch_problems(patch)
    assert problems and problem in " ".join(problems)


def test_an_ordinary_patch_passes():
    assert patch_problems("--- a/pkg/a.py\n+++ b/pkg/a.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n") == []


def test_escaping_links(layout):
    tree, outside, _ = layout
    (tree / "out").symlink_to(outside)
    (tree / "in").symlink_to("pkg")
    assert escaping_links(tree, ["out", "in", "pkg/a.py"]) == [f"out -> {outside}"]


# ---------------------------------------------------------------- git


def _repo(tree):
    ensure_baseline(tree)
    return TrackedRepo("engine", tree, "run-1")


def test_a_planted_hook_and_fsmonitor_are_never_run(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.py").write_text("x = 1\n")
    tracked = _repo(tree)
    state = tracked.begin()
    marker = tmp_path / "pwned"
    hook = tree / ".git" / "hooks" / "pre-commit"
    hook.parent.mkdir(exist_ok=True)
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    (tree / "a.py").write_text("x = 2\n")
    tracked.accept(state, "Change x")
    (tree / "a.py").write_text("x = 3\n")
    identity = {"GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@x"}
    identity |= {"GIT_COMMITTER_NAME": "u", "GIT_COMMITTER_EMAIL": "u@x"}
    tracked.repo.git.commit("-am", "through git's command line", env=identity)  # porter's git reads no ~/.gitconfig
    assert not marker.exists()
    (tree / "a.py").write_text("x = 4\n")
    plain = {**os.environ, "GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@x", "GIT_COMMITTER_NAME": "u"}
    subprocess.run(["git", "commit", "-qam", "plain"], cwd=tree, env={**plain, "GIT_COMMITTER_EMAIL": "u@x"})
    assert marker.exists()  # the planted hook is real: plain git runs it, porter's git did not
    marker.unlink()
    with tracked.repo.config_writer() as config:
        config.set_value("core", "fsmonitor", f"touch {marker}; false")
    with pytest.raises(safe_git.UntrustedRepo, match=r"core\.fsmonitor"):
        tracked.is_dirty()
    with pytest.raises(safe_git.UntrustedRepo, match=r"core\.fsmonitor"):
        safe_git.run(tree, ["status"])
    subprocess.run(["git", "status"], cwd=tree, capture_output=True)
    assert marker.exists()  # the planted fsmonitor is real too: plain git runs it
    marker.unlink()
    with pytest.raises(ValueError, match="core.fsmonitor"):
        TrackedRepo("engine", tree, "run-2")
    assert not marker.exists()


def test_a_nested_repo_with_an_fsmonitor_is_never_run_nor_committed(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.py").write_text("x\n")
    tracked = _repo(tree)
    state = tracked.begin()
    marker = tmp_path / "pwned"
    nested = git.Repo.init(tree / "sub")
    (tree / "sub" / "f.txt").write_text("f\n")
    with pytest.raises(safe_git.UntrustedRepo, match="a nested repository or an unreadable file is in the way"):
        tracked.changed_files()  # no commit in it yet: git cannot stage it, and says so as a tool error
    nested.git.add(A=True)
    nested.git.commit("-m", "planted", author="m <m@x>", env={"GIT_COMMITTER_NAME": "m", "GIT_COMMITTER_EMAIL": "m@x"})
    nested.git.config("core.fsmonitor", f"touch {marker}; false")
    nested.git.config("filter.evil.clean", f"touch {marker}; cat")
    (tree / "sub" / ".gitattributes").write_text("* filter=evil\n")
    assert tracked.is_dirty()
    tracked.change_digest()  # stages and diffs the tree as every reader of the pending change does
    (tree / "a.py").write_text("y\n")
    head = tracked.repo.head.commit.hexsha
    with pytest.raises(safe_git.UntrustedRepo, match=r"refusing to commit nested git repositories: \['sub'\]"):
        tracked.accept(state, "Take the nested repo")
    assert tracked.repo.head.commit.hexsha == head
    tracked.revert()
    assert not (tree / "sub").exists() and not tracked.is_dirty()
    assert not marker.exists()


def test_a_patch_through_a_symlink_does_not_apply(layout):
    tree, outside, _ = layout
    ensure_baseline(tree)
    (tree / "host").symlink_to(outside)
    patch = "--- a/host/secret.txt\n+++ b/host/secret.txt\n@@ -1 +1 @@\n-host only\n+pwned\n"
    new_file = "--- /dev/null\n+++ b/host/planted.txt\n@@ -0,0 +1 @@\n+pwned\n"
    for text in (patch, new_file):
        assert patch_problems(text) == []  # nothing in the text says "link": git must refuse it by itself
        applied = safe_git.run(tree, ["apply", "--recount", "-"], stdin=text)
        assert applied.returncode != 0 and "beyond a symbolic link" in applied.stderr
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "host only\n"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("filter.evil.clean", "touch {marker}"),
        ("diff.evil.textconv", "touch {marker}"),
        ("include.path", "{marker}"),
        ("core.sshCommand", "touch {marker}"),
        ("remote.origin.uploadpack", "touch {marker}"),
    ],
)
def test_config_that_can_run_commands_is_refused(tmp_path, key, value):
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.py").write_text("x\n")
    ensure_baseline(tree)
    marker = tmp_path / "pwned"
    subprocess.run(["git", "config", "--file", str(tree / ".git/config"), key, value.format(marker=marker)], check=True)
    with pytest.raises(safe_git.UntrustedRepo, match=key.lower().replace(".", r"\.")):
        safe_git.check_git_dir(tree / ".git")
    assert safe_git.sanitize_config(tree / ".git") == [key.lower()]
    safe_git.check_git_dir(tree / ".git")
    assert not marker.exists()


def test_an_image_tree_keeps_its_history_without_its_dangerous_config(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    upstream = git.Repo.init(tree)
    (tree / "a.py").write_text("x\n")
    upstream.git.add(A=True)
    upstream.git.commit("-m", "upstream", "--no-verify", author="u <u@x>", env={"GIT_COMMITTER_NAME": "u"})
    upstream.git.config("core.fsmonitor", "touch /tmp/never")
    upstream.git.config("remote.origin.url", "https://example.invalid/engine.git")
    head = upstream.head.commit.hexsha
    assert ensure_baseline(tree) == head
    safe_git.check_git_dir(tree / ".git")
    assert safe_git.open_repo(tree).git.config("remote.origin.url") == "https://example.invalid/engine.git"


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("path", "/src/../etc", "normal absolute path"),
        ("path", "/src/./engine", "normal absolute path"),
        ("path", "//src/engine", "normal absolute path"),
        ("path", "src/engine", "absolute"),
        ("path", "/", "not / itself"),
        ("name", "..", "not a repo name"),
        ("name", ".", "not a repo name"),
        ("name", "a/b", "pattern"),
    ],
)
def test_repo_paths_and_names_cannot_traverse(field, value, problem):
    spec = {"name": "engine", "path": "/src/engine", field: value}
    with pytest.raises(ValidationError, match=problem):
        RepoSpec.model_validate(spec)


def test_a_trailing_slash_is_still_normal():
    assert RepoSpec.model_validate({"name": "e", "path": "/src/engine/"}).path == "/src/engine"


def test_a_huge_file_is_read_only_up_to_the_cap(layout):
    tree, _, guard = layout
    line = b"x" * 99 + b"\n"
    (tree / "huge.log").write_bytes(line * (MAX_READ_BYTES // len(line) + 1000))  # 100 kB over the cap
    assert len(guard.read_bytes("/src/engine/huge.log")) == MAX_READ_BYTES + 1
    shown = guard.read_text("/src/engine/huge.log", cut=True)
    *kept, note = shown.splitlines()
    assert len(kept) == MAX_READ_BYTES // len(line) and kept[-1] == "x" * 99
    assert note.startswith("[porter: /src/engine/huge.log is ") and "sed -n 'FROM,TOp' /src/engine/huge.log" in note
    # Whoever writes the text back (edit_file) must have all of it: refused, never cut.
    with pytest.raises(SandboxError, match="over the 4 MiB porter reads at once"):
        guard.read_text("/src/engine/huge.log")
    (tree / "small.py").write_text("a\nb\n")
    assert guard.read_text("/src/engine/small.py", cut=True) == "a\nb\n"
