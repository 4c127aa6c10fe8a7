"""PR drafts a maintainer can merge as they are: one per change set, in the project's style, with only their own
evidence, the engine's own log lines, an environment block, a reproduction in upstream's tools, and the author
and sign-off the task asks for; the steps really apply.

Built on a prepared run (tests/prepared_run.py): a real git tree shaped like an image's, porter's TrackedRepo
commits (a tuned table kept for a throughput gain; a ROCm guard kept as a crash fix whose deeper draft was
reverted), the records and logs a run writes.
"""

from __future__ import annotations

import subprocess

import git
import pytest
from prepared_run import KEY_LINE, PreparedRun, task_data
from pydantic import ValidationError

from porter.report.pr_draft import write_prs
from porter.task import Task


def drafts(run_dir) -> dict[str, str]:
    return {path.name: path.read_text() for path in write_prs(run_dir)}


def test_each_change_set_is_a_pr_of_its_own_with_only_its_evidence(tmp_path):
    run = PreparedRun(tmp_path).build()
    texts = drafts(run.run_dir)
    assert sorted(texts) == ["engine-1.md", "engine-2.md"]  # the table and the guard touch no common file
    table, guard = texts["engine-1.md"], texts["engine-2.md"]
    assert table.startswith("# [AMD] Add tuned_fmoe.csv entries for Model-MXFP4 on MI355X (+18% throughput)\n")
    assert guard.startswith("# [AMD] Fix missing ROCm guard in metadata.cpp\n")
    for text in texts.values():  # sglang's pull request template, and nothing of porter's machinery
        for heading in ("## Motivation", "## Modifications", "## Accuracy Tests", "## Speed Tests and Profiling"):
            assert heading in text
        assert "moe-fp4" not in text and "{'" not in text and "omitted" not in text and "== triage" not in text
        assert str(tmp_path) not in text and "PORTER_SANDBOX_ROOT" not in text
        assert "sha256:" + "ab" * 32 in text and "| ROCm | 7.2.0-43 |" in text and "c16d44b93a52" in text
    # the table's PR: its own throughput figures, n and bar; not the guard's, not the reverted draft's
    assert "| throughput (output tok/s/node at knee) | 410 | 484 | +18% | 13.6% | 2/2 |" in table
    assert "missing_rocm_guard" not in table and "single stream" not in table and "reverted" not in table
    assert "python3 -m engine.tune_moe --experts 256 --topk 8" in table  # the tuner, named by its command
    bench = (
        "python3 -m sglang.bench_serving --backend sglang --host 127.0.0.1 --port 30000 --dataset-name random "
        "--random-input-len 2000 --random-output-len 64 --random-range-ratio 1 --request-rate 14.5 --num-prompts 58"
    )
    assert bench in table
    # the guard's PR: the engine's log around the key line, as printed, and a start-up before/after
    excerpt = guard.split("```\n", 2)[1]
    assert excerpt.splitlines() == (run.run_dir / "logs" / "serve-002.log").read_text().splitlines()
    assert f"**Root cause:** `{KEY_LINE}`" in guard
    assert "| `logs/serve-002.log` | fails: missing_rocm_guard at stage 2 | starts, healthy in 40 s |" in guard
    assert "throughput" not in guard.split("## Reproduction")[0] and "Signed-off-by" not in guard
    assert "--speculative-num-steps 5" in guard  # the flags that crash, in CLI form
    assert "engine's 798" not in guard  # another commit of the same repo is no dependency to announce


def test_the_reproduction_applies_to_upstream_plus_the_image_state(tmp_path):
    run = PreparedRun(tmp_path).build()
    guard = drafts(run.run_dir)["engine-2.md"]
    block = guard.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert block[0].startswith("MODEL=/path/to/Model-MXFP4   # the checkpoint: hf download org/Model-MXFP4")
    assert block[1].startswith('docker run -it --rm --network host -v "$PWD/patches:/patches:ro" -v "$MODEL:/models/')
    assert block[2] == "cd /sgl-workspace/engine"
    assert "--model-path /models/Model-MXFP4 " in guard  # where the container has the checkpoint
    fresh = tmp_path / "fresh"
    git.Repo.clone_from(run.tree, fresh).git.checkout(run.upstream)
    assert "uncommitted changes of its own" in block[3]
    shipped = subprocess.run(["git", "apply", str(run.run_dir / "patches/engine/image-state.diff")], cwd=fresh)
    assert shipped.returncode == 0  # the image's tree: upstream and its own changes
    for line in block[4:]:
        if line.startswith("git apply"):  # what runs in the container's tree, /patches mounted
            command = line.replace("/patches/", f"{run.run_dir}/patches/")
            subprocess.run(command, shell=True, cwd=fresh, check=True, capture_output=True)
    assert "USE_ROCM" in (fresh / "csrc/metadata.cpp").read_text() and (fresh / "build.cfg").exists()
    assert "6144" not in (fresh / "configs/tuned_fmoe.csv").read_text()  # the other PR's change is not in this one


def test_author_and_signoff_reach_the_series_and_the_draft_not_the_run_branch(tmp_path):
    run = PreparedRun(tmp_path, author="Jane Doe <jane@example.org>", signoff=True).build()
    guard = drafts(run.run_dir)["engine-2.md"]
    assert guard.rstrip().endswith("Signed-off-by: Jane Doe <jane@example.org>")
    patch = next((run.run_dir / "patches" / "engine").glob("0002-*.patch")).read_text()
    assert "From: Jane Doe <jane@example.org>" in patch and "\nSigned-off-by: Jane Doe <jane@example.org>\n" in patch
    branch = git.Repo(run.tree).commit(run.repo_state.branch)
    assert branch.author.email == "porter@localhost" and "Signed-off-by" not in branch.message  # resume reads it
    fresh = tmp_path / "fresh"
    git.Repo.clone_from(run.tree, fresh).git.checkout(run.repo_state.base_commit)
    subprocess.run(
        ["git", "am", str(patch_path(run, "0002"))],
        cwd=fresh,
        check=True,
        capture_output=True,
        env={"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e", "HOME": str(tmp_path)},
    )
    applied = git.Repo(fresh).head.commit
    assert applied.author.name == "Jane Doe" and applied.message.rstrip().endswith(
        "Signed-off-by: Jane Doe <jane@example.org>"
    )
    assert drafts(run.run_dir)["engine-2.md"] == guard  # a second export writes the same commits and text


def patch_path(run: PreparedRun, number: str):
    return next((run.run_dir / "patches" / "engine").glob(f"{number}-*.patch"))


def test_a_vllm_pr_reads_as_vllm_asks(tmp_path):
    run = PreparedRun(tmp_path, engine="vllm").build()
    table = drafts(run.run_dir)["engine-1.md"]
    assert table.startswith("# [ROCm] Add tuned_fmoe.csv entries")
    for heading in ("## Purpose", "## Test Plan", "## Test Result"):
        assert heading in table
    assert (
        "vllm bench serve --backend vllm --host 127.0.0.1 --port 8000 --model /models/Model-MXFP4 --dataset-name "
        "random --random-prefix-len 1200 --random-input-len 800 --random-output-len 64 --ignore-eos --request-rate 14.5"
    ) in table


@pytest.mark.parametrize(
    ("outputs", "expected"),
    [
        ({"signoff": True}, "signoff needs author"),
        ({"author": "jane"}, "must read `Name <email>`"),
        ({"author": "Jane <jane@example.org>\nSigned-off-by: x"}, "must read `Name <email>`"),
    ],
)
def test_outputs_refuse_a_signoff_without_a_person(outputs, expected):
    with pytest.raises(ValidationError, match=expected):
        Task.model_validate(task_data(**outputs))
