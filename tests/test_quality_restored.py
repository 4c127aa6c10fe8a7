"""Quality is a reason to keep (#35, done-when 1): on the twin's silent numeric defect (scenario mxfp4-scale-gfx950:
the gfx950 MXFP4 path reads its e8m0 scales one binade low, the server starts clean, only quality sees it), a
scripted model that serves, measures quality (failing on the accepted configuration), fixes the scale read and
calls accept has the fix kept at that first accept by rule quality_restored, with no speed figure asked for first,
although the task declares throughput and single-stream targets. Under the rule before integrate (main's
porter/accepting.py) the same accept was refused: "no throughput or single_stream result for the pending change"."""

from __future__ import annotations

import git
import pytest
from twin_tasks import QUICK_SCALE, ROOT, build_twin, call, fast_task_data, run_scripted, write_task

from porter.ledger.transcript import read_transcript

pytestmark = pytest.mark.docker
SCENARIO = ROOT / "sandboxes" / "twin" / "scenarios" / "mxfp4-scale-gfx950"


def test_a_fix_that_restores_quality_is_kept_at_the_first_accept(docker_client, tmp_path):
    build_twin("mxfp4-scale-gfx950")
    data = fast_task_data(ROOT / "tasks" / "twin_mxfp4_scale_gfx950.yaml", time_scale=QUICK_SCALE)
    task = write_task(tmp_path, data)
    script = [
        call("serve"),
        call("run_check", kind="quality"),
        call("apply_patch", repo="twin", patch=(SCENARIO / "fix.patch").read_text()),
        call("serve"),
        call("accept", summary="Read the e8m0 group scales with bias 127 on gfx950's FP4 GEMM path"),
        call("finish", reason="quality restored"),
    ]
    ctx = run_scripted(task, script)
    records = read_transcript(ctx.run_dir / "transcript.jsonl")
    results = {record["name"]: record for record in records if record["kind"] == "tool_result"}
    baseline = results["run_check"]["facts"]["results"]
    assert not baseline["quality:gsm8k"]["passed"] and baseline["quality:gsm8k"]["score"] < 0.85  # the defect
    accepted = results["accept"]
    assert accepted["ok"], accepted["content"]
    assert accepted["facts"]["kept"] and accepted["facts"]["rule"] == "quality_restored"
    assert "quality restored" in accepted["content"]
    assert [attempt.outcome for attempt in ctx.state.attempts] == ["kept"]
    assert ctx.state.attempts[0].rule == "quality_restored"
    repo = git.Repo(ctx.repos["twin"].path)
    [commit] = list(repo.iter_commits(f"{ctx.state.repos['twin'].base_commit}..HEAD"))
    assert list(commit.stats.files) == ["twin/mxfp4.py"]
    speed = [
        r
        for r in records
        if r["kind"] == "tool_call" and r["name"] == "run_check" and r["arguments"]["kind"] != "quality"
    ]
    assert not speed  # no speed figure was asked for
