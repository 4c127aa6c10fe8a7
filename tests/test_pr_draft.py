"""PR drafts a maintainer can act on: the image's own state named as such, reproduction from the run
directory, figures rounded to what they support, the root cause in a sentence; the steps really work.

Built on a real git tree shaped like an image's: upstream history, then the uncommitted changes the image
shipped (committed by porter before the run), then the run's accepted fix.
"""

from __future__ import annotations

import shlex
import subprocess

import git
import yaml

from porter.ledger.records import Attempt, Sample
from porter.ledger.state import RunState
from porter.ledger.transcript import write_state
from porter.ops.pr_draft import round_figures, write_prs
from porter.sandbox.trees.tracked import TrackedRepo, commit_message
from porter.task import Task

UPSTREAM = git.Actor("upstream", "dev@example.org")
WHY = (
    "The fused kernel includes <cuda_runtime.h> with no ROCm guard, so hipcc cannot find it. I first grepped "
    "for the header, then looked at three other files, then tried a different include path before this."
)


def image_tree(path) -> git.Repo:
    path.mkdir()
    repo = git.Repo.init(path)
    (path / "kernel.cpp").write_text("#include <cuda_runtime.h>\nint main() { return 0; }\n")
    repo.index.add(["kernel.cpp"])
    repo.index.commit("upstream: the kernel", author=UPSTREAM, committer=UPSTREAM)
    (path / "build.cfg").write_text("arch = gfx950\n")  # the image's own, uncommitted change
    return repo


def make_run(tmp_path) -> tuple:
    tree, run_dir = tmp_path / "tree", tmp_path / "runs" / "demo-run"
    upstream = image_tree(tree).head.commit.hexsha
    run_dir.mkdir(parents=True)
    tracked = TrackedRepo("engine", tree, "demo-run")
    repo_state = tracked.begin()  # commits the image's uncommitted change as porter's WIP commit
    (tree / "kernel.cpp").write_text(
        "#ifdef USE_ROCM\n#include <hip/hip_runtime.h>\n#else\n#include <cuda_runtime.h>\n#endif\n"
        "int main() { return 0; }\n"
    )
    evidence = "single stream: 0.9361057075454807 -> 213.42857142857142 output tok/s"
    tracked.accept(repo_state, commit_message("Guard the CUDA header for ROCm", "build failed", WHY, "guard", evidence))
    task = {
        "name": "demo",
        "model": {"id": "org/model", "path": "/m", "in_image": True, "overlay": False},
        "hardware": {"gpu": "MI355X", "count": 8},
        "sandbox": {"kind": "local"},
        "repos": [{"name": "engine", "path": str(tree), "upstream": "https://example.org/engine.git"}],
        "serve": {"command": "serve --model {model_path} {flags}", "flags": {"tp-size": 8}},
    }
    (run_dir / "task.yaml").write_text(yaml.safe_dump(Task.model_validate(task).model_dump(mode="json")))
    state = RunState("demo-run", "task.yaml", {"tp-size": 8}, {"tp-size": 8}, repos={"engine": repo_state})
    state.attempts.append(Attempt(step=3, summary="guard", outcome="kept", evidence=evidence))
    state.accepted_config = "c0ffee"  # the fingerprint the accepted configuration's samples carry
    result = {"score": 0.9512345678, "ci_low": 0.93987654, "ci_high": 0.96234, "n": 1319, "passed": True}
    state.samples.append(Sample("quality:gsm8k", "c0ffee", "h", 3, result["score"], result))
    write_state(run_dir, state.to_dict(), lambda text: text)
    return run_dir, upstream, repo_state


def test_the_draft_names_the_image_state_and_reproduces_from_the_run_dir(tmp_path):
    run_dir, upstream, repo_state = make_run(tmp_path)
    (path,) = write_prs(run_dir)
    text = path.read_text()
    assert f"git checkout {upstream}" in text and f"git checkout {repo_state.base_commit}" not in text
    assert "uncommitted changes of its own (the image's state, not upstream's" in text
    assert "git apply patches/engine/image-state.diff" in text and "git am patches/engine/0001-" in text
    assert str(tmp_path) not in text  # nothing of this machine's paths
    assert "0.936 -> 213 output tok/s" in text and "0.9361057" not in text
    assert "gsm8k: 0.951 (95% CI 0.940-0.962, n=1319" in text
    assert "**Why:** The fused kernel includes <cuda_runtime.h> with no ROCm guard, so hipcc cannot find it." in text
    assert "grepped" not in text  # the agent's search trail stays in the commit, not in the PR's root cause
    # the steps work: a fresh checkout of upstream + the image's state + the series
    fresh = tmp_path / "fresh"
    git.Repo.clone_from(tmp_path / "tree", fresh).git.checkout(upstream)
    block = text.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    environment = "GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@e GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@e"
    for line in block[1:-1]:  # checkout done above; the last line is the serve command
        command = line.replace("patches/", shlex.quote(str(run_dir)) + "/patches/")
        subprocess.run(f"{environment} {command}", shell=True, cwd=fresh, check=True, capture_output=True)
    assert "USE_ROCM" in (fresh / "kernel.cpp").read_text() and (fresh / "build.cfg").exists()


def test_round_figures_keeps_what_is_meaningful():
    assert (
        round_figures("knee 2.4 RPS, 2626.3333333 tok/s, score 0.93610, p=0.05")
        == "knee 2.4 RPS, 2626 tok/s, score 0.936, p=0.05"
    )
    assert round_figures("sha256 cda190a65d1e61d1 and v0.5.20") == "sha256 cda190a65d1e61d1 and v0.5.20"
