"""Git discipline on real repositories in temp dirs: user work kept, one commit per accept, clean reverts."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import git
import pytest

from porter.report.pr_series import export
from porter.sandbox.trees import safe_git
from porter.sandbox.trees import tracked as tracked_module
from porter.sandbox.trees.tracked import TrackedRepo, commit_message
from porter.task import OutputsSpec


@pytest.fixture
def upstream(tmp_path):
    path = tmp_path / "engine"
    path.mkdir()
    repo = git.Repo.init(path, initial_branch="main")
    (path / "kernel.cc").write_text("#include <cuda_runtime.h>\nint main() { return 0; }\n")
    (path / "config.json").write_text('{"exclude": ["model.layers.78.mlp.shared_experts.*"]}\n')
    repo.index.add(["kernel.cc", "config.json"])
    actor = git.Actor("upstream", "up@example.com")
    repo.index.commit("upstream base", author=actor, committer=actor)
    return path


def test_user_dirty_work_is_committed_first_and_never_lost(upstream):
    (upstream / "notes.txt").write_text("my local experiment\n")
    (upstream / "config.json").write_text('{"exclude": []}\n')
    tracked = TrackedRepo("engine", upstream, "run-1")
    state = tracked.begin()
    assert not tracked.is_dirty()
    assert tracked.repo.active_branch.name == "porter/run-1"
    assert "uncommitted changes" in tracked.repo.head.commit.message
    assert (upstream / "notes.txt").read_text() == "my local experiment\n"
    assert state.base_commit == tracked.repo.head.commit.hexsha
    assert state.accepted == []


def test_accept_makes_one_commit_and_revert_leaves_no_trace(upstream):
    tracked = TrackedRepo("engine", upstream, "run-2")
    state = tracked.begin()
    (upstream / "kernel.cc").write_text(
        "#ifdef USE_ROCM\n#include <hip/hip_runtime.h>\n#else\n"
        "#include <cuda_runtime.h>\n#endif\nint main() { return 0; }\n"
    )
    assert tracked.changed_files() == ["kernel.cc"]
    message = commit_message("Guard cuda_runtime.h for ROCm", "compile error", "no guard", "kernel.cc", "builds")
    sha = tracked.accept(state, message)
    assert state.accepted == [sha]
    assert tracked.repo.head.commit.message.startswith("Guard cuda_runtime.h for ROCm\n\nWhat failed:")

    (upstream / "config.json").write_text('{"exclude": ["broken"]}\n')
    (upstream / "new_file.py").write_text("print('scratch')\n")
    (upstream / "__pycache__").mkdir()
    (upstream / "__pycache__" / "x.pyc").write_bytes(b"\0")
    assert sorted(tracked.revert()) == ["config.json", "new_file.py"]
    assert not (upstream / "new_file.py").exists()
    assert "model.layers.78" in (upstream / "config.json").read_text()
    assert tracked.repo.head.commit.hexsha == sha
    assert not tracked.is_dirty()


def test_build_products_never_enter_a_commit(upstream):
    tracked = TrackedRepo("engine", upstream, "run-3")
    state = tracked.begin()
    (upstream / "kernel.o").write_bytes(b"\x7fELF")
    (upstream / "config.json").write_text('{"exclude": ["model.decoder.shared_experts.*"]}\n')
    tracked.accept(state, "Add exclude alias")
    assert tracked.repo.head.commit.stats.files.keys() == {"config.json"}


def test_patch_series_applies_with_git_am_on_a_fresh_copy(upstream, tmp_path):
    base = git.Repo(upstream).head.commit.hexsha
    fresh = tmp_path / "fresh"
    git.Repo.clone_from(upstream, fresh)
    tracked = TrackedRepo("engine", upstream, "run-4")
    state = tracked.begin()
    for index, text in enumerate(["a", "b"]):
        (upstream / f"fix{index}.txt").write_text(text + "\n")
        tracked.accept(state, f"Fix {index}\n\nbody")
    changes, _ = export(tracked.repo, state, OutputsSpec(), tmp_path / "patches")
    patches = [patch for change in changes for patch in change.patches]
    assert [p.name[:4] for p in patches] == ["0001", "0002"]
    subprocess.run(["git", "checkout", "-q", base], cwd=fresh, check=True)
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "PATH": "/usr/bin:/bin",
    }
    subprocess.run(["git", "am", *map(str, patches)], cwd=fresh, check=True, env=env, capture_output=True)
    assert (fresh / "fix1.txt").read_text() == "b\n"


def test_a_second_run_on_the_same_branch_is_refused(upstream):
    TrackedRepo("engine", upstream, "run-5").begin()
    git.Repo(upstream).git.checkout("main")
    with pytest.raises(ValueError, match="already exists; use --resume"):
        TrackedRepo("engine", upstream, "run-5").begin()


def test_not_a_git_repo_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="is not a git repository"):
        TrackedRepo("engine", tmp_path, "run-6")


def test_a_lock_a_killed_git_left_is_cleared_and_one_still_held_is_not(upstream):
    tracked = TrackedRepo("engine", upstream, "run-lock")
    state = tracked.begin()
    (upstream / "kernel.cc").write_text("#include <hip/hip_runtime.h>\nint main() { return 0; }\n")
    git_dir, lock = upstream / ".git", upstream / ".git" / "index.lock"
    # another process's git, pinned to the repo as porter's are, holding the index lock while its editor runs
    env = {**os.environ, "GIT_DIR": str(git_dir), "GIT_WORK_TREE": str(upstream), "GIT_EDITOR": "sleep 120; true"}
    holder = subprocess.Popen(
        ["sh", "-c", "git -c user.name=t -c user.email=t@t commit -a & wait"],
        env=env, cwd=upstream, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        while not lock.exists():
            assert holder.poll() is None, "git exited before taking its lock"
            time.sleep(0.01)
        with pytest.raises(safe_git.UntrustedRepo, match=r"index.lock is held by process \[\d+"):
            tracked.accept(state, "Guard the include")
        assert TrackedRepo("engine", upstream, "run-lock").cleared_locks == [] and lock.exists()
    finally:
        os.killpg(holder.pid, signal.SIGKILL)  # as a kill -9 of porter's process group would
        holder.wait()
    assert lock.exists()
    resumed = TrackedRepo("engine", upstream, "run-lock")
    state = resumed.begin(state)
    assert resumed.cleared_locks == ["index.lock"] and not lock.exists()
    sha = resumed.accept(state, "Guard the include")
    assert state.accepted == [sha] and resumed.repo.head.commit.parents[0].hexsha == state.base_commit
    assert "hip_runtime" in resumed.repo.git.show(f"{sha}:kernel.cc") and not resumed.is_dirty()


@pytest.mark.parametrize("killed_after", ["nothing", "the stash", "the checkout", "the revert"])
def test_a_pending_change_set_aside_comes_back_whoever_puts_it_back(upstream, killed_after):
    tracked = TrackedRepo("engine", upstream, "run-7")
    tracked.begin()
    earlier = tracked.head_tree()
    (upstream / "kernel.cc").write_text("#include <hip/hip_runtime.h>\nint main() { return 0; }\n")
    (upstream / "new_file.py").write_text("print('part of the fix')\n")
    dirty = tracked.is_dirty()
    if killed_after != "nothing":  # a porter killed part-way through set_aside or restore: a new one restores
        tracked.repo.git.stash("push", "--include-untracked", "-m", tracked_module.SET_ASIDE)
    if killed_after in ("the checkout", "the revert"):
        tracked.repo.git.checkout(earlier, "--", ".")
    if killed_after == "the revert":
        tracked.revert()
    TrackedRepo("engine", upstream, "run-7").restore(dirty)
    assert "hip_runtime" in (upstream / "kernel.cc").read_text()
    assert (upstream / "new_file.py").exists() and not tracked.repo.git.stash("list")


def test_a_clean_tree_set_aside_is_reset_to_its_own_head(upstream):
    tracked = TrackedRepo("engine", upstream, "run-8")
    tracked.begin()
    base = tracked.head_tree()
    (upstream / "kernel.cc").write_text("// the earlier configuration\n")
    tracked.repo.index.add(["kernel.cc"])
    tracked.repo.index.commit("a later accepted change")
    assert tracked.set_aside(base) is False and "cuda_runtime" in (upstream / "kernel.cc").read_text()
    tracked.restore(False)
    assert (upstream / "kernel.cc").read_text() == "// the earlier configuration\n" and not tracked.is_dirty()
