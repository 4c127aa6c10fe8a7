"""The tool registry and dispatcher on a real local sandbox and a real git tree: arguments are checked against
each tool's schema before its handler runs, a declared failure is text for the model, a porter bug is logged
with its traceback and reported to the model without ending the run, and facts travel beside the text."""

from __future__ import annotations

import pytest
from local_tasks import open_local_run

from porter.ledger.transcript import read_transcript
from porter.loop import agent, tools
from porter.models import ScriptedModel
from porter.redaction import redact


@pytest.fixture
def ctx(tmp_path):
    context = open_local_run(tmp_path)
    yield context
    context.transcript.close()
    context.sandbox.stop(remove=True)


def test_every_tool_is_declared_once_with_a_schema():
    specs = tools.tool_specs()
    assert [spec.name for spec in specs] == list(tools.TOOLS)
    assert all(spec.parameters["type"] == "object" for spec in specs)
    assert {"bash", "serve", "set_flags", "accept", "finish"} <= set(tools.TOOLS)


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"flags": [["tp", 1]]}, "flags: [['tp', 1]] is not of type 'object'"),
        ({}, "'flags' is a required property"),
        ({"flags": {"tp": 1}, "extra": 1}, "Additional properties are not allowed ('extra' was unexpected)"),
    ],
)
def test_arguments_that_break_the_schema_are_refused_before_the_handler(ctx, arguments, expected):
    result = tools.dispatch(ctx, "set_flags", arguments)
    assert not result.ok and expected in result.text and "Nothing was run" in result.text
    assert ctx.state.flags == {"tp": 2}
    assert result.facts["ok"] is False and result.facts["tool"] == "set_flags"


def test_a_declared_failure_is_text_and_facts_stay_out_of_the_text(ctx):
    result = tools.dispatch(ctx, "set_flags", {"flags": {"tp": 8}})
    assert not result.ok and "tp=8 use 8 GPUs; this node has 2" in result.text
    done = tools.dispatch(ctx, "bash", {"command": "echo hi"})
    assert done.ok and done.text.splitlines()[-1] == "hi" and "{" not in done.text
    assert done.facts["exit_code"] == 0 and done.facts["status"]["flags"] == {"tp": 2}


def test_a_porter_bug_is_logged_and_the_run_goes_on(ctx):
    @tools.tool("broken_for_test", "A tool whose handler has a bug.")
    def broken(ctx):
        return {}["missing"]

    try:
        script = [
            {"tool_calls": [{"name": "broken_for_test", "arguments": {}}]},
            {"tool_calls": [{"name": "bash", "arguments": {"command": "echo after"}}]},
            {"tool_calls": [{"name": "finish", "arguments": {"reason": "done"}}]},
        ]
        agent.run_loop(ctx, ScriptedModel(script), redact)
    finally:
        del tools.TOOLS["broken_for_test"]
    results = [r for r in read_transcript(ctx.run_dir / "transcript.jsonl") if r["kind"] == "tool_result"]
    assert "internal error in porter (KeyError: 'missing')" in results[0]["content"]
    assert results[0]["facts"]["internal_error"] == "KeyError"
    assert results[1]["ok"] and "after" in results[1]["content"]
    assert ctx.state.finished == "done"
    log = (ctx.run_dir / "logs" / "porter-errors.log").read_text()
    assert "Traceback" in log and 'return {}["missing"]' in log


def test_the_same_failing_call_is_nudged_then_stops_the_run(ctx):
    bad = {"tool_calls": [{"name": "set_flags", "arguments": {"flags": {"tp": 8}}}]}
    model = ScriptedModel([bad] * 5)
    agent.run_loop(ctx, model, redact)
    assert ctx.state.finished.startswith("stopped: the same failing call 4 times in a row (set_flags")
    nudged = [m.content for m in model.requests[3] if m.role == "user"]
    assert "same failing call 3 times in a row" in nudged[-1] and "ends the run" in nudged[-1]
    assert len(model.requests) == 4


def test_a_parallel_layout_that_does_not_fill_the_node_is_refused(ctx):
    result = tools.dispatch(ctx, "set_flags", {"flags": {"tp": 1}})
    assert not result.ok and "tp=1 use 1 GPUs; this node has 2" in result.text
    assert ctx.state.flags == {"tp": 2}


def test_a_sweep_table_says_which_rows_bisect_and_how_late_the_client_ran():
    from porter.checks.throughput_kind import render

    def throughput(result):
        return render("throughput", result)

    client = {"client_saturated": True, "p99_send_lag_ms": 8.6, "p99_loop_lag_ms": 12.4}
    levels = [{"rps": 4, "passed": True, "client": client}, {"rps": 6, "passed": False}, {"rps": 5, "passed": True}]
    text = throughput({"levels": levels, "knee_rps": 5, "slo": {"ttft_s": 1}, "client_saturated": True})
    assert "rows after the first failing rate bisect" in text
    assert "ran late at 1 of 3 rates (p99 lag up to 12 ms, over its 5 ms budget)" in text
    calm_levels = [{"rps": 4, "passed": True}, {"rps": 6, "passed": False}]
    calm = throughput({"levels": calm_levels, "knee_rps": 4, "slo": {"ttft_s": 1}})
    assert "bisect" not in calm and "late" not in calm


def test_a_knee_says_the_rate_its_goal_needs():
    """941 tok/s at a 2.4 req/s knee is 392 tok/s a request a second: a 1000 tok/s goal needs about 2.55 req/s."""
    from porter.checks.throughput_kind import render

    levels = [{"rps": 2.4, "passed": True}, {"rps": 2.8, "passed": False}]
    result = {"levels": levels, "knee_rps": 2.4, "slo": {"ttft_s": 5}, "metric": "output_throughput"}
    text = render("throughput", {**result, "output_throughput_per_node": 941.0, "target_tok_s_per_node": 1000})
    assert "knee 2.40 req/s" in text and "the goal needs about 2.55 req/s at the knee's tokens per request" in text
    met = render("throughput", {**result, "output_throughput_per_node": 1010.0, "target_tok_s_per_node": 1000})
    assert "the goal needs" not in met


def test_a_check_says_how_many_samples_its_configuration_has():
    from porter.loop.observations import check

    result = {"output_tok_s": 201.0, "samples": 2, "median": 200.5, "target_output_tok_s": 180}
    assert "2 samples of this check on this configuration, median 200.5" in check("single_stream", result, {})
    assert "samples of this check" not in check("single_stream", {**result, "samples": 1}, {})


def test_a_note_and_the_targets_are_told_again_only_when_they_read_otherwise():
    """Every measuring result repeated the whole targets block and the same notes: each is said when it changes."""
    from porter.ledger.state import TargetRow
    from porter.loop.observations import check, status

    said: dict[str, str] = {}
    result = {"output_tok_s": 201.0, "samples": 2, "median": 200.5, "target_output_tok_s": 180}
    first, again = check("single_stream", result, said), check("single_stream", result, said)
    assert "porter measures a configuration more than once" in first and "porter measures" not in again
    assert "2 samples of this check on this configuration, median 200.5" in again
    levels = [{"rps": 4, "passed": True}, {"rps": 6, "passed": False}]
    sweep = {"levels": levels, "knee_rps": 4, "slo": {"ttft_s": 1}}
    note = "(tok/s as bench_serving counts them"
    assert note in check("throughput", sweep, said) and note not in check("throughput", sweep, said)
    row = TargetRow("throughput", "throughput", "output_throughput_per_node", 941.0, value=900.0)
    run = {"targets": [row], "pending": False, "server": "healthy"}
    assert "- throughput: 900.0 (goal 941.0): not met" in status(run, said)
    assert (
        status(run, said)
        == "Targets of the accepted configuration: as last shown.\nPending change: none. Server: healthy."
    )
    row.value, row.met = 950.0, True
    assert "- throughput: 950.0 (goal 941.0): met" in status(run, said)
