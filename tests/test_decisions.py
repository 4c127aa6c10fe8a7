"""The pieces a keep decision is built from: the noise bar, start-up stages, and the playbook's pair search."""

from __future__ import annotations

import random

import pytest

from porter.models.remedies import pair_candidates
from porter.noise import compare
from porter.startup_stage import startup_stage


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
    assert startup_stage(log) == 2
    assert startup_stage(log, stop_line_no=2) == 1


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
