"""Relative targets: a quality bar anchored at the run's first healthy configuration, speed figures as high as the
budget allows, and the run's end at a plateau (the last K candidates each within noise), said with the best
configuration and its evidence. The rules on records first; then a short run on the twin (local sandbox, quick clock)
with a scripted agent whose three candidates change nothing the single-stream figure sees.
"""

from __future__ import annotations

import pytest
from twin_tasks import QUICK_SCALE, call, fast_task_data, run_scripted, write_task

from porter.checks.quality import QualityCheckSpec
from porter.checks.throughput import SingleStreamSpec, ThroughputCheckSpec
from porter.ledger.decision import plateau
from porter.ledger.noise import Comparison
from porter.ledger.records import Attempt


def attempt(step: int, rule: str, worse: bool = False) -> Attempt:
    outcome = "kept" if rule in ("gain", "trade") else "reverted"
    change = -0.5 if worse else 0.0
    compared = Comparison("throughput", "tok/s", [1.0], [1.0 + change], 1.0, 1.0 + change, change, 0.0, 0.03, 0.03)
    return Attempt(step, f"candidate {step}", outcome, "", rule=rule, comparisons=[compared])


def test_the_specs_take_relative_targets_and_refuse_what_is_neither():
    assert SingleStreamSpec(input_tokens=10, output_tokens=10, target_output_tok_s="max").target_output_tok_s == "max"
    quality = QualityCheckSpec(name="q", kind="gsm8k", dataset="builtin:twin-gsm8k", reference="first_healthy",
                               tolerance=0.02)  # fmt: skip
    assert quality.relative and not QualityCheckSpec(name="q", kind="gsm8k", dataset="d", minimum=0.5).relative
    for bad in ("fast", -1, True):
        with pytest.raises(ValueError, match="tok/s or max|greater than 0"):
            ThroughputCheckSpec.model_validate(
                {"workload": {"input_tokens": 1, "output_tokens": 1, "num_prompts": 1}, "rps": [1],
                 "slo": {"ttft_s": 1}, "metric": "output_throughput", "target_tok_s_per_node": bad}
            )  # fmt: skip
    with pytest.raises(ValueError):
        QualityCheckSpec(name="q", kind="gsm8k", dataset="d", reference="first_healthy")  # no tolerance


def test_a_plateau_is_the_last_k_speed_judgements_each_within_noise():
    flat = [attempt(1, "gain"), attempt(2, "no_gain"), attempt(3, "crash_gone"), attempt(4, "no_gain")]
    assert plateau(flat, 2) == [flat[1], flat[3]]  # a crash fix neither counts nor breaks the run
    assert plateau(flat, 3) is None  # the gain at step 1 is among the last three
    assert plateau([*flat, attempt(5, "no_gain", worse=True)], 2) is None  # worse beyond noise is not a plateau
    assert plateau([attempt(1, "no_gain"), attempt(2, "quality_failed"), attempt(3, "no_gain")], 2)
    assert plateau([attempt(1, "no_gain")], 2) is None


NEUTRAL = [  # serve flags the twin's parser takes that leave one request's decode speed as it is
    {"mem-fraction-static": 0.8},
    {"chunked-prefill-size": 8192},
    {"max-running-requests": 128},
]


def relative_twin_task(tmp_path):
    """The flagship twin task with relative targets: gsm8k within 0.05 of the first healthy configuration (30
    questions), single stream as high as the budget allows (no sweep: it would only make the test longer)."""
    data = fast_task_data(time_scale=QUICK_SCALE)
    gsm8k = {**data["checks"]["quality"][0], "samples": 30, "reference": "first_healthy", "tolerance": 0.05}
    single = {**data["checks"]["single_stream"], "target_output_tok_s": "max"}
    # a plateau of two candidates; a bar of 10% holds a neutral move on a busy 2-core machine at the quick clock
    checks = {"quality": [gsm8k], "single_stream": single, "plateau_candidates": 2, "min_improvement": 0.1}
    serve = data["serve"]
    serve["flags"].update({"chunked-prefill-size": 16384, "max-running-requests": 256})  # the twin's defaults
    serve["tunables"].update({"chunked-prefill-size": [16384, 8192], "max-running-requests": [256, 128]})
    return write_task(tmp_path, data, checks=checks, **{"sandbox.kind": "local"})


def test_a_relative_run_on_the_twin_ends_at_a_plateau_with_its_best_configuration(tmp_path):
    script = [call("serve"), call("run_check", kind="quality"), call("run_check", kind="single_stream")]
    for flags in NEUTRAL:
        script += [call("set_flags", flags=flags), call("serve"), call("run_check", kind="single_stream"),
                   call("accept", summary=f"Serve with {flags}", why="a candidate")]  # fmt: skip
    ctx = run_scripted(relative_twin_task(tmp_path), script)
    state = ctx.state
    finished = state.finished
    assert finished.startswith("plateau: the last 2 candidates were each within noise"), finished
    assert f"Best configuration {state.accepted_config}" in finished and "single stream (output tok/s)" in finished
    assert state.solved and [a.rule for a in state.attempts][-2:] == ["no_gain", "no_gain"]
    # the quality bar was anchored at the first healthy configuration and read against it afterwards
    reference = state.references["quality:gsm8k"]
    quality = [s for s in state.samples if s.key == "quality:gsm8k"]
    assert reference.config == quality[0].config and 0 < reference.value <= 1  # whatever was kept after it
    assert quality[0].result["sets_reference"] and not any(s.result["sets_reference"] for s in quality[1:])
    assert all(s.result["reference"] == pytest.approx(reference.value) for s in quality[1:])
    report = (ctx.run_dir / "report.md").read_text()
    assert "as high as the budget allows" in report and "plateau" in report
