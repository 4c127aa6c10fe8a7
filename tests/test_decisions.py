"""The pieces a keep decision is built from: the noise bar, start-up stages, and the playbook's pair search."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from helpers import sweep

from porter.engines.known import engine_named
from porter.engines.startup_stage import startup_stage
from porter.ledger.decision import quality_restored
from porter.ledger.noise import compare, knee_resolution
from porter.models.remedies import pair_candidates
from porter.task import load_task

ROOT = Path(__file__).resolve().parents[1]


def decide(accepted: list[dict], pending: list[dict], resolution: bool = True):
    values = [[result["output_throughput_per_node"] for result in side] for side in (accepted, pending)]
    steps = knee_resolution(accepted + pending) if resolution else 0.0
    return compare("throughput", "output_throughput_per_node", *values, 0.03, resolution=steps)


def test_two_samples_a_side_keep_a_no_op_change_less_than_one_time_in_twenty():
    """Whatever the noise (1% to 20% per sample), a change that changes nothing clears the bar < 5% of the time."""
    generator = random.Random(5)
    for noise in (0.01, 0.05, 0.2):
        kept = 0
        for _ in range(2000):
            draws = [100 * (1 + generator.gauss(0, noise)) for _ in range(4)]
            kept += compare("throughput", "x", draws[:2], draws[2:], 0.03).better
        assert kept / 2000 < 0.05, (noise, kept)


def test_a_real_gain_clears_the_bar_and_the_bar_never_drops_below_the_minimum():
    assert compare("t", "x", [100, 101], [120, 121], 0.03).better
    still = compare("t", "x", [100, 100], [102, 102], 0.03)
    assert still.threshold == 0.03 and not still.better and not still.worse
    assert compare("t", "x", [100, 101], [80, 81], 0.03).worse


def test_knees_one_bisection_step_apart_are_not_a_keep_two_steps_are():
    """Samples that agree within each side have no spread, so the t bound vanishes; at a 4 RPS knee one
    bisection step (0.125 RPS) is +3.1%, above the 3% minimum. The bar adds 1.5 brackets."""
    accepted = [sweep(4.05), sweep(4.1)]  # both read 4.0: 4.5, 4.25 and 4.125 fail
    one_step = [sweep(4.13), sweep(4.2)]  # both read 4.125
    assert [r["knee_rps"] for r in accepted + one_step] == [4.0, 4.0, 4.125, 4.125]
    assert knee_resolution(accepted + one_step) == pytest.approx(0.125 / 4)
    assert decide(accepted, one_step, resolution=False).better  # the bar without the resolution term keeps it
    comparison = decide(accepted, one_step)
    assert comparison.change == pytest.approx(0.03125) and comparison.threshold == pytest.approx(1.5 * 0.03125)
    assert not comparison.better and "plus 1.5 x the knee resolution 3.1%" in comparison.describe()
    assert decide(accepted, [sweep(4.3), sweep(4.3)]).better  # two steps (4.25): +6.25%
    assert decide(accepted, [sweep(4.6), sweep(4.7)]).better  # a real move to 4.5: +12.5%


def test_the_quantisation_adds_to_the_measured_spread():
    """Twin sweeps of one configuration on a busy machine (benchmarks/decision_noise.py, seed 13): knees 10.0
    and 10.5 RPS (one 5% bracket apart) with output tok/s varying 4% at a fixed knee. The spread's t bound
    (6.6%) and the step (7.5%) each stay below the +8% between medians; together they do not."""
    comparison = compare("throughput", "x", [618.8, 594.7], [661.7, 648.4], 0.03, resolution=0.05)
    assert comparison.change == pytest.approx(0.0796, abs=1e-3)
    assert comparison.threshold == pytest.approx(0.066 + 0.075, abs=2e-3) and not comparison.better


def test_no_knee_on_either_side_is_not_a_gain():
    """Every sweep of a configuration failing every rate it tried reads 0 tok/s (benchmarks/decision_noise.py,
    seed 29): 0 -> 0 was an infinite gain and kept; from 0 to a knee is still a gain."""
    nothing = [sweep(0.5)["output_throughput_per_node"]] * 2
    assert nothing == [0.0, 0.0]
    assert not compare("throughput", "x", nothing, nothing, 0.03).better
    assert compare("throughput", "x", nothing, [256.0, 256.0], 0.03).better


def test_only_a_bracketed_knee_has_a_resolution():
    assert knee_resolution([sweep(7)]) == 0.0  # every level passed: no failing rate above the knee
    assert knee_resolution([sweep(0.5)]) == 0.0  # every rate tried failed (3, then 1.5 and 0.75): no knee
    assert knee_resolution([sweep(2)]) == pytest.approx(0.5)  # bisected below the ladder: 1.5 passes, 2.25 fails
    assert knee_resolution([{"output_tok_s": 50.0}]) == 0.0  # single stream
    assert knee_resolution([sweep(7), sweep(5.6)]) == pytest.approx(0.125 / 5.5)  # 5.5 bracketed by 5.625


def test_the_start_up_stage_counts_progress_lines_before_the_traceback(tmp_path):
    log = tmp_path / "serve.log"
    log.write_text(
        "[2026-07-02 10:00:01 TP0] Load weight begin. avail mem=180.2 GB\n"
        "[2026-07-02 10:00:02 TP1] Load weight begin. avail mem=181.0 GB\n"  # the same stage on another rank
        "WARNING: not found tuned config, using default\n"
        "[2026-07-02 10:00:09 TP0] Load weight end. type=GlmMoeDsa\n"
        "Traceback (most recent call last):\n"
        '  File "loader.py", line 3\n'
        "[2026-07-02 10:00:10 TP0] Capture cuda graph begin\n"
    )
    sglang = engine_named("sglang")
    assert startup_stage(log, sglang) == (2, ["weights loaded"])  # by sglang's own stage lines, up to the traceback
    assert startup_stage(log, sglang, stop_line_no=2) == (0, [])


@pytest.mark.parametrize(
    "reverted, tried, expected",
    [
        ([{"tp": 4, "dp": 2}, {"kv": "fp8"}], [], [{"tp": 4, "dp": 2, "kv": "fp8"}]),
        ([{"tp": 4, "dp": 2}, {"kv": "fp8"}], [{"tp": 4, "dp": 2, "kv": "fp8"}], []),
        ([{"tp": 4, "dp": 2}, {"tp": 8, "kv": "fp8"}], [], []),  # one flag both ways: not a pair
        ([{"a": 1}, {"b": 1}, {"c": 1}], [], [{"a": 1, "b": 1}, {"a": 1, "c": 1}, {"b": 1, "c": 1}]),
    ],
)
def test_moves_reverted_alone_are_retried_in_pairs(reverted, tried, expected):
    assert pair_candidates(reverted, tried) == expected


def test_a_quality_keep_quotes_the_restored_check_and_the_other_checks_on_both_sides():
    task = load_task(ROOT / "tasks" / "twin_glm52.yaml")
    accepted = {
        "quality:gsm8k": {"score": 0.755, "ci_low": 0.69, "ci_high": 0.81, "passed": False},
        "quality:gpqa": {"score": 0.84, "ci_low": 0.77, "ci_high": 0.9, "passed": True},
    }
    pending = {
        "quality:gsm8k": {"score": 0.975, "ci_low": 0.94, "ci_high": 0.99, "passed": True},
        "quality:gpqa": {"score": 0.83, "ci_low": 0.76, "ci_high": 0.89, "passed": True},
    }
    decision = quality_restored(task, accepted, pending, {}, {})
    assert decision.keep and decision.rule == "quality_restored"
    assert decision.reason.startswith("quality restored: quality:gsm8k 0.755 (95% CI 0.690-0.810, failed) -> 0.975")
    assert decision.reason.endswith(
        "passed), beyond both intervals; the other quality checks pass on the change: quality:gpqa 0.840 -> 0.830"
    )
    assert quality_restored(task, accepted, {**pending, "quality:gsm8k": accepted["quality:gsm8k"]}, {}, {}) is None
