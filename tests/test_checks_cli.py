"""`porter bench` and `porter check quality` entry points: exit codes, tables, and the last-line JSON."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest
from sse_server import SseServer

from porter.checks.loadgen import CheckError
from porter.commands.check_commands import bench_main, dataset_spec, quality_main


@pytest.fixture(scope="module")
def server():
    running = SseServer()
    yield running
    running.stop()


def last_json(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


def test_bench_json_sweep(server, capsys):
    server.reset(ttft_ms=20, itl_ms=2)
    code = bench_main(server.url, 64, 8, 0.5, "4,8", 0.2, 99, 1.0, False, True)
    captured = capsys.readouterr()
    document = last_json(captured.out)
    assert code == 0
    assert document["knee_rps"] == 8 and [level["rps"] for level in document["levels"]] == [4, 8]
    assert document["slo"] == {"ttft_s": 0.2, "percentile": 99}
    assert document["target_tok_s_per_node"] is None and document["meets_target"] is False
    assert 20 <= document["median_ttft_ms"] < 26
    assert "4 req/s: pass, 32/32 done" in captured.err  # a line per level as it ends
    # both rates passed: the knee is above the sweep, and it is said so, not reported at the top rate
    assert "no knee found below the top rate: every rate up to 8 req/s met the SLO" in captured.err
    assert "knee:" not in captured.err and document["every_level_passed"] is True


def test_bench_table_and_exit_1_when_no_level_passes(server, capsys):
    server.reset(ttft_ms=60, itl_ms=1)
    assert bench_main(server.url, 32, 4, 0.0, "5", 0.05, 90, 0.6, False, False) == 1
    out = capsys.readouterr().out
    assert "p90 TTFT" in out and "no level met the SLO" in out and "TTFT mean/med/p99 ms" in out


def test_bench_single_stream_json(server, capsys):
    """The speed counts from the first token: a 300 ms first token would pull a from-the-request speed under 70.
    The server paces tokens 5 ms apart (200 tok/s); a loaded machine slows the stream, or delays the read of the
    first token and so shortens the span it is measured over, hence wide bounds either side (no wall time)."""
    server.reset(ttft_ms=300, itl_ms=5)
    assert bench_main(server.url, 32, 11, 0.0, "1", 5, 99, 60, True, True) == 0
    document = last_json(capsys.readouterr().out)
    speeds = document["per_request_tok_s"]
    assert document["completed"] == 3 and len(speeds) == 3
    assert document["output_tok_s"] == sorted(speeds)[1]
    assert all(100 < speed < 400 for speed in speeds), speeds


@pytest.mark.parametrize("rps, code, message", [("1,x", 2, "--request-rate must be"), ("0", 2, "positive finite")])
def test_bench_bad_rates(capsys, rps, code, message):
    assert bench_main("http://127.0.0.1:9", 8, 1, 0.0, rps, 1, 99, 1, False, True) == code
    assert message in capsys.readouterr().err


def test_bench_unreachable_server_names_the_url(capsys):
    assert bench_main("http://127.0.0.1:9", 8, 1, 0.0, "1", 1, 99, 1, False, True) == 1
    assert "GET http://127.0.0.1:9/v1/models failed" in capsys.readouterr().err


def test_quality_on_the_builtin_twin_set(server, capsys):
    server.reset(answers={})
    assert quality_main(server.url, "gsm8k:twin-gsm8k", 20, True) == 0
    document = last_json(capsys.readouterr().out)
    assert (document["name"], document["n"], document["score"], document["errors"]) == ("twin-gsm8k", 20, 0.0, 0)
    assert document["ci_high"] == pytest.approx(0.1611, abs=1e-4)


@pytest.mark.parametrize(
    "dataset, message",
    [("gsm8k", "must be gsm8k:PATH_OR_BUILTIN"), ("qa:x", "must be gsm8k:"), ("mc:missing", "built-in: twin-gpqa")],
)
def test_quality_bad_dataset_option(capsys, dataset, message):
    assert quality_main("http://127.0.0.1:9", dataset, 5, False) == 2
    assert message in capsys.readouterr().err


def test_dataset_spec_accepts_paths_names_and_builtin_prefix(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text("Question\n")
    assert dataset_spec(f"mc:{path}", 5).dataset == str(path)
    assert dataset_spec("mc:twin-gpqa", 5).dataset == "builtin:twin-gpqa"
    assert dataset_spec("gsm8k:builtin:twin-gsm8k", 5).few_shot == 5
    with pytest.raises(CheckError):
        dataset_spec("mc:", 5)


def bench_arrivals(server: SseServer, rps: str) -> list[dict]:
    """`porter bench` run for real (a child process); the streamed requests as the server saw them."""
    server.reset(ttft_ms=5, itl_ms=1)
    command = [sys.executable, "-m", "porter", "bench", server.url, "--rps", rps, "--duration", "1"]
    options = ["--min-requests", "12", "--input-len", "48", "--output-len", "2", "--slo-ttft", "5"]
    done = subprocess.run(command + options, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return server.arrivals()


def test_bench_at_2_and_4_rps_sends_one_arrival_pattern_scaled_by_2(server):
    slow, fast = bench_arrivals(server, "2"), bench_arrivals(server, "4")
    assert len(slow) == len(fast) == 12  # 1 s holds fewer: each level measures the minimum count
    text = [[item["prompt"].split(")", 1)[1] for item in run] for run in (slow, fast)]
    assert text[0] == text[1]  # the same prompts, in the same order, after the per-level marker
    slow_t = [item["t"] - slow[0]["t"] for item in slow]
    fast_t = [item["t"] - fast[0]["t"] for item in fast]
    scale = sum(a * b for a, b in zip(slow_t, fast_t, strict=True)) / sum(b * b for b in fast_t)
    assert scale == pytest.approx(2.0, rel=0.05)  # least-squares ratio of the server-side send times


def test_bench_takes_bench_servings_names(server, tmp_path):
    """--request-rate, --random-input-len, --random-output-len, --num-prompts, --max-concurrency, --output-file as
    sglang's bench_serving spells them (sglang/benchmark/serving.py, 0.5.20)."""
    server.reset(ttft_ms=50, itl_ms=5)
    results = tmp_path / "results.jsonl"
    command = [
        sys.executable,
        "-m",
        "porter.commands.cli",
        "bench",
        server.url,
        "--request-rate",
        "500",
        "--num-prompts",
        "6",
    ]
    command += ["--random-input-len", "40", "--random-output-len", "3", "--max-concurrency", "2"]
    command += ["--output-file", str(results), "--slo-ttft", "5", "--json"]
    for _ in range(2):  # bench_serving appends a line per run
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    assert len(lines) == 2 and lines[-1] == last_json(done.stdout)
    (level,) = lines[-1]["levels"]
    assert (level["offered"], level["completed"]) == (6, 6)  # --num-prompts: the level's count
    assert level["total_input_tokens"] == 6 * 40 and level["total_output_tokens"] == 6 * 3
    arrivals = sorted(item["t"] for item in server.arrivals())[-6:]
    # at 500 req/s all six are due within ~20 ms; with two in flight at most, the third reaches the server only
    # after one of the first two ended, which takes the server's 50 ms to the first token at least
    assert arrivals[2] - arrivals[0] >= 0.05


def test_every_bench_option_says_its_unit():
    from porter.commands.cli import bench

    units = ("token", "req/s", "second", "count", "%", "0-1", "JSON")
    for option in bench.params:
        if isinstance(option, click.Option) and not option.is_flag:
            assert any(unit in (option.help or "") for unit in units), option.name
