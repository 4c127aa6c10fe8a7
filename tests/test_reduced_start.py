"""serve's reduced start-up on the twin in a real Docker sandbox: the engine's own dummy weights and fewer layers.

A crash from a checkpoint tensor (the MTP layer's Quark exclude miss, at index num_hidden_layers) cannot be judged
reduced; a crash in the first forward pass's kernel build (the fused metadata kernel) reproduces reduced, so its fix
is judged there first. A reduced start-up is never what a keep reads.
"""

from __future__ import annotations

import pytest
from twin_tasks import SPEC_516, build_twin, call, facts, fast_twin_task, fix, run_scripted, tool_results

from porter.report.run_reading import read_run
from porter.report.run_report import render

pytestmark = pytest.mark.docker

SCRIPT = [
    call("set_flags", flags=SPEC_516),
    call("serve"),  # the MTP layer's checkpoint tensor does not fit its fp4 slot
    call("serve", reduced=True),
    fix("a-quark-exclude-mtp.patch"),
    call("serve"),  # the fused metadata kernel's build fails
    fix("b-rocm-guard-metadata.patch"),
    call("serve", reduced=True),  # porter first puts the crashed configuration back: the failure reproduces reduced
    call("accept", summary="Guard cuda_runtime.h"),
    call("serve"),
]


def test_a_reduced_start_up_judges_a_kernel_fix_and_declines_a_checkpoint_crash(docker_client, tmp_path):
    build_twin()
    ctx = run_scripted(fast_twin_task(tmp_path), SCRIPT)
    results = tool_results(ctx.run_dir)
    serves = [facts(r) for r in results if r["name"] == "serve"]
    full_crash, declined, kernel_crash, judged, healthy = serves
    assert full_crash["crash_class"] == "shape_mismatch", full_crash
    assert declined["reduced"] and declined["outcome"] == kernel_crash["crash_class"] == "missing_rocm_guard"
    assert declined["verdict"].startswith("cannot judge this crash: shape_mismatch"), declined
    assert judged["reduced"] and judged["reproduces"] and judged["outcome"] == "healthy", judged
    assert judged["verdict"].startswith("the fix passes reduced"), judged
    [refused] = [r for r in results if r["name"] == "accept"]
    assert "has not been served" in refused["content"] and not refused["ok"], refused
    assert healthy["healthy"] and (ctx.run_dir / "logs" / "serve-006.log").is_file()
    logs = sorted(path.name for path in (ctx.run_dir / "logs").glob("serve-*-reduced.log"))
    assert logs == ["serve-002-reduced.log", "serve-004-reduced.log", "serve-005-reduced.log"]
    # two serve calls made three reduced launches: the run counts launches, not calls
    assert (ctx.state.relaunches, ctx.state.reduced_launches, ctx.state.full_launches) == (6, 3, 3)
    assert "3 launches and 3 reduced ones" in render(read_run(ctx.run_dir), [])
    assert "fused_multistep_metadata" in (ctx.run_dir / "logs" / logs[1]).read_text()
    print(
        f"full {full_crash['seconds']} s, {healthy['seconds']} s; reduced {declined['seconds']}, {judged['seconds']} s"
    )


def test_a_kernel_fix_is_judged_reduced_on_vllms_front(docker_client, tmp_path):
    """vLLM's spelling (--load-format dummy, --hf-overrides, --enforce-eager) on the second family's day 0: the fp8
    activation-quantization kernel's build failure reproduces reduced, and its guard passes there."""
    from test_twin_vllm_loop import FIX, scaled_task

    build_twin("corvid3-day0-vllm")
    script = [call("serve"), call("serve", reduced=True), call("apply_patch", repo="vllm", patch=FIX)]
    ctx = run_scripted(scaled_task(tmp_path, single_stream=False), [*script, call("serve", reduced=True)])
    full, before, after = [facts(r) for r in tool_results(ctx.run_dir) if r["name"] == "serve"]
    crash = full["crash_class"]
    assert before["outcome"] == crash and before["verdict"].startswith(f"{crash} reproduces"), before
    assert after["verdict"].startswith("the fix passes reduced"), after
    said = [r["content"] for r in tool_results(ctx.run_dir) if r["name"] == "serve"][-1]
    assert "--hf-overrides '{\"num_hidden_layers\": 4}' --enforce-eager;" in said, said  # as the command spells them
    log = (ctx.run_dir / "logs" / "serve-003-reduced.log").read_text()
    assert "'load_format': 'dummy'" in log and "'enforce_eager': True" in log, log[:2000]
