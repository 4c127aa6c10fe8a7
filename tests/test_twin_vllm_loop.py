"""porter's loop end to end on the twin's vLLM front, in a real Docker sandbox, on the second family's day 0
(tests/data/twin_corvid3_vllm.yaml, a hand-written task until `porter init` writes the family's tasks).

The playbook fixes the day-0 build failure of the fp8 activation-quantization kernel from the triage's facts alone
(the unguarded <cuda_fp8.h> in the vllm repo's tree) and finishes with quality held; a scripted agent then does what
the playbook cannot yet on vLLM's flags (its speculative decoding is one JSON flag): the same fix, MTP through
--speculative-config, measured and kept. The bring-up runs the twin's quick clock; the run that compares speeds runs
the clock the measuring tests use (TIME_SCALE), where a token's few milliseconds are not lost in a loaded machine's
scheduling noise.
"""

from __future__ import annotations

import git
import pytest
from twin_tasks import (
    QUICK_SCALE,
    ROOT,
    TIME_SCALE,
    build_twin,
    call,
    run_scripted,
    run_with,
    task_data,
    tool_results,
    write_task,
)

pytestmark = pytest.mark.docker
TASK = ROOT / "tests" / "data" / "twin_corvid3_vllm.yaml"
FIX = (ROOT / "sandboxes" / "twin" / "fixes" / "d-rocm-guard-fp8-quant.patch").read_text()
MTP3 = '{"method": "mtp", "num_speculative_tokens": 3}'


@pytest.fixture(scope="module")
def image(docker_client) -> str:
    return build_twin("corvid3-day0-vllm")


def scaled_task(tmp_path, single_stream: bool, time_scale: float = QUICK_SCALE) -> object:
    """The task at another clock (every speed target scaled from the task's clock), 50 / 30 questions."""
    data = task_data(TASK)
    scale = time_scale / float(data["sandbox"]["env"]["TWIN_TIME_SCALE"])
    data["sandbox"]["env"]["TWIN_TIME_SCALE"] = str(time_scale)
    data["serve"]["startup_timeout_s"] *= max(scale, 1)
    for check, samples in zip(data["checks"]["quality"], (50, 30), strict=True):
        check["samples"] = samples
    if single_stream:
        data["checks"]["single_stream"]["target_output_tok_s"] /= scale
        data["checks"]["single_stream"]["num_requests"] = 3
    else:
        del data["checks"]["single_stream"]
    return write_task(tmp_path, data)


def test_the_playbook_fixes_the_day0_build_from_the_triage_on_vllms_front(image, tmp_path) -> None:
    ctx = run_with(scaled_task(tmp_path, single_stream=False))
    results = tool_results(ctx.run_dir)
    first = next(r for r in results if r["name"] == "serve")
    assert first["facts"]["crash_class"] == "missing_rocm_guard"
    assert first["facts"]["findings"][0]["facts"]["header"] == "cuda_fp8.h"
    assert ctx.state.solved, ctx.state.finished
    repo = git.Repo(ctx.repos["vllm"].path)
    (commit,) = list(repo.iter_commits(f"{ctx.state.repos['vllm'].base_commit}..HEAD"))
    assert sorted(commit.stats.files) == ["twin/csrc/per_token_group_quant_fp8.cpp"]
    assert "+#ifdef USE_ROCM\n+#include <hip/hip_fp8.h>" in repo.git.show("HEAD")


SCRIPT = [
    call("serve"),
    call("apply_patch", repo="vllm", patch=FIX),
    call("serve"),
    call("run_check", kind="quality"),
    call("accept", summary="Guard cuda_fp8.h with USE_ROCM in the fp8 activation quantization kernel"),
    call("run_check", kind="single_stream"),
    call("set_flags", flags={"speculative-config": MTP3}),
    call("serve"),
    call("run_check", kind="single_stream"),
    call("accept", summary="Serve with MTP, three speculative tokens"),
    call("finish", reason="done"),
]


@pytest.mark.long_run  # about four minutes: three start-ups and repeated single streams at the measuring clock
def test_a_scripted_agent_serves_mtp_through_vllms_json_flag(image, tmp_path) -> None:
    ctx = run_scripted(scaled_task(tmp_path, single_stream=True, time_scale=TIME_SCALE), SCRIPT)
    state = ctx.state
    assert [attempt.outcome for attempt in state.attempts] == ["kept", "kept"]
    assert state.accepted_flags["speculative-config"] == MTP3
    assert state.solved, state.finished
    log = max((ctx.run_dir / "logs").glob("*.log"), key=lambda path: path.stat().st_mtime).read_text()
    assert "'speculative_config': {'method': 'mtp', 'num_speculative_tokens': 3}" in log
    assert "Application startup complete." in log
    assert "Enabling num_speculative_tokens > 1 will run multiple times of forward on same MTP layer" in log
