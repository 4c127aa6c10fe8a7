"""The progress log's parts, each with real inputs: its line (clock time, action, result, duration; redacted, no
terminal controls), the start-up stages read from a server log as it grows (the engines' own stage lines), the
heartbeat, the terminal's progress bar with the time left, and the checks' progress callbacks against a real
HTTP server (a line per sweep level, per tenth of the questions, per single-stream request)."""

from __future__ import annotations

import datetime as dt
import re
import time

import pytest
from local_tasks import open_local_run
from rich.console import Console
from sse_server import SseServer

from porter import redaction
from porter.checks import quality, throughput, throughput_kind
from porter.checks.kind import CheckProgress
from porter.engines.known import engine_named
from porter.ledger.state import TargetRow
from porter.report.console import targets_table
from porter.report.live_status import render_panel
from porter.report.progress_log import ProgressLog, StageWatch, Work, duration, format_line, heartbeat

CLOCK = dt.datetime(2026, 7, 2, 17, 4, 12)


@pytest.mark.parametrize(
    "seconds, shown",
    [(0.04, "0.0 s"), (4.25, "4.2 s"), (41.2, "41 s"), (192, "3 min 12 s"), (3600 * 2 + 5 * 60 + 9, "2 h 05 min")],
)
def test_durations_read_as_a_person_writes_them(seconds, shown):
    assert duration(seconds) == shown


def test_a_line_is_clock_action_result_duration():
    assert format_line(CLOCK, "serve", "healthy in 41 s", None) == "17:04:12  serve  healthy in 41 s"
    line = format_line(CLOCK, "run_check throughput", "knee 12.5 req/s, 874 tok/s/node", 192)
    assert line == "17:04:12  run_check throughput  knee 12.5 req/s, 874 tok/s/node  3 min 12 s"


def test_a_line_carries_no_secret_no_terminal_control_and_no_second_line(monkeypatch):
    monkeypatch.setenv("PORTER_TEST_API_KEY", "sk-live-0123456789abcdef")
    redaction.collect()
    try:
        text = "echo sk-live-0123456789abcdef\x1b]0;owned\x07\x1b[2J\nsecond line"
        line = format_line(CLOCK, "bash echo", text, 1.5)
    finally:
        monkeypatch.delenv("PORTER_TEST_API_KEY")
        redaction.collect()
    assert "sk-live-0123456789abcdef" not in line and "[REDACTED:PORTER_TEST_API_KEY]" in line
    assert "\x1b" not in line and "\n" not in line and line.endswith("] / second line  1.5 s")


def test_start_up_stages_are_read_from_the_log_as_it_grows(tmp_path):
    engine = engine_named("sglang")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "serve-001.log").write_text("Load weight end. an earlier launch\n")
    watch = StageWatch(logs, engine)
    assert watch.new_stages() == []  # the launch in flight has not written its log yet
    log = logs / "serve-002.log"
    log.write_text("[2026] Init torch distributed ends. mem usage=1 GB\n[2026] Load weight e")
    assert watch.new_stages() == ["process group"]
    with open(log, "a") as growing:  # the rest of a line split across two reads, then a print the agent added
        growing.write("nd. elapsed=21 s, type=GlmMoe\nprint: The server is fired up (not the engine's line)\n")
    assert watch.new_stages() == ["weights loaded"]
    with open(log, "a") as growing:
        growing.write("Capture target decode CUDA graph end. elapsed=3 s\nThe server is fired up and ready to roll!\n")
    assert watch.new_stages() == ["graphs captured", "serving"]
    assert watch.new_stages() == []


def test_stages_printed_after_the_last_heartbeat_are_written_before_the_end_line(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    lines: list[str] = []
    log = ProgressLog(tmp_path / "progress.log", every_s=3600, echo=lines.append)  # no beat during the test
    log.begin("serve", watch=StageWatch(logs, engine_named("sglang")))
    (logs / "serve-001.log").write_text("Load weight end.\nThe server is fired up and ready to roll!\n")
    log.end("healthy in 41 s", timed=False)  # a start-up that ends between two beats
    assert [line.split("  ", 1)[1] for line in lines] == [
        "serve  reached weights loaded (2 of 5 stages)  0.0 s",
        "serve  reached serving (5 of 5 stages)  0.0 s",
        "serve  healthy in 41 s",
    ]


def test_the_heartbeat_says_what_still_runs_and_how_far(tmp_path):
    lines: list[str] = []
    log = ProgressLog(tmp_path / "progress.log", every_s=0.4, echo=lines.append)
    with log:
        log.begin("run_check throughput")
        log.advance(1, 9, "levels", "8 req/s: pass", bounded=True, context="throughput, sample 1 of 2")
        deadline = time.monotonic() + 30
        while len(lines) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        log.end("knee 12 req/s, 874 tok/s/node")
    assert re.fullmatch(r"\d\d:\d\d:\d\d  run_check throughput  throughput, sample 1 of 2: 8 req/s: pass "
                        r"\(1 of up to 9 levels\)  \d\.\d s", lines[0])  # fmt: skip
    assert "  run_check throughput  still running; 1 of up to 9 levels done; throughput, sample 1 of 2  " in lines[1]
    assert lines[-1].split("  ")[1:3] == ["run_check throughput", "knee 12 req/s, 874 tok/s/node"]
    assert (tmp_path / "progress.log").read_text().splitlines() == lines


def test_heartbeat_wording_without_a_count():
    assert heartbeat(Work("model", time.monotonic(), note="waiting for the reply to step 4")) == (
        "still running; waiting for the reply to step 4"
    )


def test_the_panel_draws_a_bar_with_the_time_left(tmp_path):
    ctx = open_local_run(tmp_path)
    try:
        work = Work("run_check quality", time.monotonic() - 30, note="quality:gsm8k: 37 of 40 right")
        work.done, work.total, work.unit = 40, 100, "questions"
        screen = Console(width=110, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
        screen.print(render_panel(ctx, [], work))
        text = screen.export_text()
    finally:
        ctx.sandbox.stop(remove=True)
    assert "now run_check quality (30 s)" in text and "40 of 100 questions" in text
    assert re.search(r"4\d s left", text) and "━" in text and "quality:gsm8k: 37 of 40 right" in text


def test_the_targets_table_reads_scores_to_three_places_and_speeds_to_one():
    rows = [
        TargetRow("quality gsm8k", "quality:gsm8k", "score", 0.93, value=0.97, met=True),
        TargetRow("single stream (output tok/s)", "single_stream", "output_tok_s", 720.0, value=854.925, met=True),
        TargetRow("throughput (output tok/s/node at knee)", "throughput", "output_tok_s", 1950.0, 1117.42),
        TargetRow("quality gpqa", "quality:gpqa", "score", 0.77),
    ]
    screen = Console(width=110, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    screen.print(targets_table(rows, box=None, pad_edge=False))  # as the live panel draws it
    text = screen.export_text()
    assert "0.970" in text and "854.9 " in text and "1,117.4 " in text and "854.925" not in text
    assert re.search(r"quality gpqa\s+-\s", text)


@pytest.fixture(scope="module")
def server():
    running = SseServer()
    yield running
    running.stop()


def test_a_sweep_reports_each_level_and_how_many_remain(server):
    server.reset(ttft_ms=20, itl_ms=1)
    spec = throughput.ThroughputCheckSpec.model_validate(
        {
            "workload": {"input_tokens": 32, "output_tokens": 2, "duration_s": 0.5, "min_requests": 8},
            "rps": [4, 8, 16],
            "slo": {"ttft_s": 0.001},  # every level fails: the first fail leaves exactly the bisection steps
            "metric": "output_throughput",
            "target_tok_s_per_node": 1,
            "bisect_steps": 1,
        }
    )
    seen: list[CheckProgress] = []
    throughput.run_throughput(server.url, spec, on_level=throughput_kind.sweep_progress(spec, seen.append))
    assert [(step.done, step.total, step.bounded) for step in seen] == [(1, 2, False), (2, 2, False)]
    assert seen[0].note.startswith("4 req/s: fail (p99 TTFT ") and seen[1].note.startswith("2 req/s: fail")


def test_a_passing_sweep_counts_up_to_its_most(server):
    server.reset(ttft_ms=5, itl_ms=1)
    spec = throughput.ThroughputCheckSpec.model_validate(
        {
            "workload": {"input_tokens": 32, "output_tokens": 2, "duration_s": 0.5, "min_requests": 8},
            "rps": [4, 8],
            "slo": {"ttft_s": 5},
            "metric": "output_throughput",
            "target_tok_s_per_node": 1,
            "bisect_steps": 2,
        }
    )
    seen: list[CheckProgress] = []
    result = throughput.run_throughput(server.url, spec, on_level=throughput_kind.sweep_progress(spec, seen.append))
    assert [(step.done, step.total, step.bounded, step.unit) for step in seen] == [
        (1, 4, True, "levels"),
        (2, 4, True, "levels"),
    ]
    assert throughput_kind.brief(result.to_dict()).startswith("no knee found below the top rate (8 req/s passed)")


def test_quality_reports_every_tenth_of_its_questions(server, tmp_path):
    server.reset(answers={})
    spec = quality.QualityCheckSpec(name="g", kind="gsm8k", dataset="builtin:twin-gsm8k", samples=20, minimum=0)
    seen: list[CheckProgress] = []
    quality.run_quality(server.url, spec, on_progress=seen.append)
    assert [step.done for step in seen] == list(range(2, 21, 2)) and {step.total for step in seen} == {20}
    assert seen[-1].note == "0 of 20 right" and seen[-1].unit == "questions"


def test_single_stream_reports_each_request(server):
    server.reset(ttft_ms=5, itl_ms=2)
    spec = throughput.SingleStreamSpec(input_tokens=16, output_tokens=6, num_requests=2, target_output_tok_s=1)
    seen: list[CheckProgress] = []
    throughput.run_single_stream(server.url, spec, on_progress=seen.append)
    assert [(step.done, step.total) for step in seen] == [(1, 2), (2, 2)]
    assert re.fullmatch(r"last request [\d,.]+ output tok/s", seen[-1].note)
