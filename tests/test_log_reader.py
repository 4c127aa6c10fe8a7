"""read_log through the dispatcher on a real run directory: grep with context, tail, line ranges, earlier
launches, bounds on what comes back, and the errors a model can act on."""

from __future__ import annotations

import pytest
from local_tasks import open_local_run

from porter.loop import log_grep, log_reader, tools


@pytest.fixture
def ctx(tmp_path):
    context = open_local_run(tmp_path)
    logs = context.run_dir / "logs"
    logs.mkdir(exist_ok=True)
    (logs / "serve-001.log").write_text("first launch\nKeyError: 'model.decoder.weight'\n")
    lines = [f"\x1b[32mINFO\x1b[0m step {n}" for n in range(1, 5001)]
    lines[2999] = "WARNING not found tuned config for shape (6144, 2048, 256, 8); using the default kernel"
    lines[3999] = "x" * 5000
    (logs / "serve-002.log").write_text("\n".join(lines) + "\n")
    yield context
    context.transcript.close()
    context.sandbox.stop(remove=True)


def read(ctx, **arguments) -> str:
    result = tools.dispatch(ctx, "read_log", arguments)
    assert result.ok, result.text
    return result.text


def test_grep_finds_the_line_with_context_in_the_latest_launch(ctx):
    text = read(ctx, grep="not found tuned", context=1)
    assert text.startswith("serve-002.log (launch 2; launches [1, 2]; 5000 lines): 1 lines match")
    assert "   3000  WARNING not found tuned config" in text
    assert "   2999  INFO step 2999" in text and "   3001  INFO step 3001" in text  # colour codes stripped


def test_tail_range_and_earlier_launches(ctx):
    assert read(ctx).splitlines()[-1] == "   5000  INFO step 5000"
    assert len(read(ctx, tail=10_000).splitlines()) == log_reader.MAX_LINES + 1
    ranged = read(ctx, start_line=3999, end_line=4000).splitlines()
    cut = (
        '[... 4600 more characters; read_log {"launch": 2, "start_line": 4000, "end_line": 4000} shows the line whole]'
    )
    assert ranged[1] == "   3999  INFO step 3999" and ranged[2].endswith(f"x {cut}")
    assert read(ctx, start_line=4000, end_line=4000).splitlines()[1] == f"   4000  {'x' * 5000}"
    assert "KeyError: 'model.decoder.weight'" in read(ctx, launch=1, grep="keyerror")


def test_bounded_grep_says_it_was_cut(ctx):
    text = read(ctx, grep="step")
    assert "4998 lines match 'step' (the first shown" in text
    assert len(text.splitlines()) == log_reader.MAX_LINES + 1


def test_grep_with_tail_shows_the_last_matches_with_their_context(ctx):
    text = read(ctx, grep="step", tail=3, context=1)
    assert "4998 lines match 'step'; the last 3 shown" in text.splitlines()[0]
    assert [line.split()[0] for line in text.splitlines()[1:]] == ["4997", "4998", "4999", "5000"]
    only = read(ctx, grep="not found tuned", tail=5).splitlines()
    assert "1 lines match 'not found tuned'; the last 1 shown" in only[0] and only[1].startswith("   3000  WARNING")


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"launch": 7}, "no log of launch 7; the launches of this run are [1, 2]"),
        ({"grep": "("}, "not a valid regular expression"),
        ({"start_line": 9, "end_line": 3}, "end_line 3 is before start_line 9"),
        ({"tail": 0}, "tail: 0 is less than the minimum of 1"),
    ],
)
def test_errors_say_what_to_do(ctx, arguments, expected):
    result = tools.dispatch(ctx, "read_log", arguments)
    assert not result.ok and expected in result.text


def test_a_backtracking_pattern_is_stopped_at_the_bound_and_said_so(ctx, monkeypatch):
    (ctx.run_dir / "logs" / "serve-003.log").write_text("start\n" + "a" * 40 + "!\n")
    monkeypatch.setattr(log_grep, "GREP_BASE_S", 1.0)  # the bound's base; the pattern would need hours
    result = tools.dispatch(ctx, "read_log", {"grep": "(a+)+$"})
    assert not result.ok and "was stopped after 1 s" in result.text and "backtracks" in result.text
    assert "1 lines match" in read(ctx, grep="a!$")  # a plain pattern on the same log still answers


def test_lines_ranks_wrote_alike_show_once_with_their_count(ctx):
    """A start-up line per rank (sglang's `[stamp TP3] message`) reads once; a line one rank alone wrote stays."""
    lines = [f"[2026-07-14 10:22:0{rank} TP{rank}] Load weight begin. avail mem=286.91 GB" for rank in range(8)]
    lines += ["[2026-07-14 10:22:09 TP3] Load weight end. elapsed=13.55 s", "[aiter] start build [mla_rope]"]
    (ctx.run_dir / "logs" / "serve-003.log").write_text("\n".join(lines) + "\n")
    text = read(ctx).splitlines()[1:]
    assert text[0].startswith("10 lines shown as 3")
    assert text[1] == "      1  [2026-07-14 10:22:00 TP0] Load weight begin. avail mem=286.91 GB (x8 ranks)"
    assert text[2:] == [
        "      9  [2026-07-14 10:22:09 TP3] Load weight end. elapsed=13.55 s",
        "     10  [aiter] start build [mla_rope]",
    ]
