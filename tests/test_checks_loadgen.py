"""Load generator: timings against a server with injected TTFT/ITL, faults, SSE parsing, cache accounting."""

from __future__ import annotations

import asyncio
import json
import random
import statistics

import pytest
from sse_server import SseServer

from porter.checks import loadgen, metrics, request_failures, stream_parse, workload
from porter.checks.throughput import completion_body


@pytest.fixture(scope="module")
def server():
    running = SseServer()
    yield running
    running.stop()


def plan(count: int, rps: float, output_tokens: int, prompt_words: int = 16, path: str = "/v1/completions"):
    planned = []
    for index in range(count):
        words = workload.prose_words()
        prompt = " ".join(words[(index + offset) % len(words)] for offset in range(prompt_words))
        body = completion_body("sse-test", prompt, output_tokens)
        if path.endswith("chat/completions"):
            body["messages"] = [{"role": "user", "content": body.pop("prompt")}]
        planned.append(loadgen.Planned(index, index / rps, path, json.dumps(body).encode()))
    return planned


def run(server: SseServer, planned, drain_s: float = 60.0):
    async def go():
        async with loadgen.make_session(len(planned)) as session:
            return await loadgen.run_schedule(session, server.url, planned, drain_s)

    return asyncio.run(go())


def peak_concurrency(records) -> int:
    edges = sorted([(record.sent_s, 1) for record in records] + [(record.end_s, -1) for record in records])
    current = peak = 0
    for _, step in edges:
        current += step
        peak = max(peak, current)
    return peak


def test_one_stream_matches_injected_timings_or_reports_saturation(server):
    server.reset(ttft_ms=80, itl_ms=15)
    records, lag = run(server, plan(5, rps=4, output_tokens=30))
    assert all(record.ok for record in records), [record.error for record in records]
    assert all(record.output_tokens == 30 and record.ttft_s * 1000 >= 80 for record in records)  # 80 ms is a floor
    if lag.summary().client_saturated:
        return  # a loaded machine can starve even one stream's client (8 ms late once); it said so
    for record in records:
        # above the floor is the test server's lateness (on shared CI cores it reached 89 ms) plus the client's:
        # the client's own part is its read vs the server's clock at the write
        client_ms = (record.first_token_s + lag.origin_monotonic - record.first_token_event["server_t"]) * 1000
        assert client_ms < 5
    figures = metrics.summarize(records, 0.0)
    assert abs(figures["median_itl_ms"] - 15) < 2
    assert abs(figures["median_tpot_ms"] - 15) < 1
    # end to end, the injected 80 + 29 x 15 ms is a floor; above it the server's lateness adds up over 30 writes
    # (6.1 ms once on a loaded 2-core machine): the TPOT tolerance above, the first write's lateness (9 ms seen)
    # and the client's own 5 ms
    assert 80 + 29 * 15 <= figures["median_e2e_latency_ms"] < 80 + 29 * (15 + 1) + 15


def test_256_concurrent_streams_match_injected_timings_or_report_saturation(server):
    """The shared 2-core CI machine may starve either process: the client must be right or say it lagged."""
    server.reset(ttft_ms=100, itl_ms=50)
    records, lag = run(server, plan(400, rps=125, output_tokens=40))
    assert all(record.ok for record in records)
    assert peak_concurrency(records) >= 256
    ttft_errors = [record.ttft_s * 1000 - 100 for record in records]
    assert min(ttft_errors) >= 0
    # End to end, the error here also holds the test server's own lateness (256 streams on 2 shared cores, which
    # failed CI once at 6.9 ms); the client's part is measured apart: its read vs the server's clock at the write.
    client_errors = [
        (record.first_token_s + lag.origin_monotonic - record.first_token_event["server_t"]) * 1000
        for record in records
    ]
    if lag.summary().client_saturated:
        return  # starved (61 ms late reads once, at a load average of 5), it said so: its timings are flagged
    assert statistics.median(client_errors) < 2
    assert metrics.percentile(client_errors, 99) < loadgen.SATURATION_LAG_MS
    figures = metrics.summarize(records, 0.0)
    # the injected 50 ms, and above it the test server's own lateness with 256 open streams on 2 shared cores
    # (3.2 ms on the median at a load average of 5)
    assert 49 < figures["median_itl_ms"] < 50 + 6
    assert 49.5 < figures["median_tpot_ms"] < 50 + 6


def test_dropped_streams_are_failed_requests_not_crashes(server):
    server.reset(ttft_ms=5, itl_ms=1, drop_after=3)
    records, _ = run(server, plan(4, rps=50, output_tokens=10))
    assert [record.ok for record in records] == [False] * 4
    for record in records:
        assert "stream" in record.error
        assert record.output_tokens == 3
    assert metrics.summarize(records, 0.0)["errors"] == 4


def test_malformed_frames_fail_only_their_request(server):
    server.reset(ttft_ms=5, itl_ms=1, malformed_every=2)
    records, _ = run(server, plan(6, rps=50, output_tokens=8))
    failed = [record.index for record in records if not record.ok]
    assert failed == [1, 3, 5]
    assert all("malformed SSE frame" in records[index].error for index in failed)


def test_http_500s_are_recorded_with_status(server):
    server.reset(ttft_ms=5, itl_ms=1, fail_every=3)
    records, _ = run(server, plan(9, rps=100, output_tokens=4))
    failed = [record for record in records if not record.ok]
    assert len(failed) == 3
    assert all(record.error.startswith("HTTP 500: ") and "injected failure" in record.error for record in failed)
    assert request_failures.of_records(records) == [
        {"count": 3, "status": 500, "error": "HTTP 500", "body": '{"error": {"message": "injected failure"}}'}
    ]


def test_unfinished_requests_time_out_at_the_drain_limit(server):
    server.reset(ttft_ms=5, itl_ms=200)
    records, _ = run(server, plan(3, rps=100, output_tokens=50), drain_s=0.5)
    assert all(record.timed_out and not record.ok for record in records)
    figures = metrics.summarize(records, 0.0)
    assert (figures["timed_out"], figures["errors"], figures["completed"]) == (3, 0, 0)
    drained = "deadline: still running 0.5 s after the level's last send (level drain)"
    assert request_failures.of_records(records) == [{"count": 3, "status": None, "error": drained, "body": ""}]


def test_reasoning_content_counts_as_the_first_token(server):
    # every frame is reasoning_content: the first one (at 40 ms, the next at 90 ms) is the first token
    server.reset(ttft_ms=40, itl_ms=50, reasoning=True)
    records, _ = run(server, plan(2, rps=20, output_tokens=6, path="/v1/chat/completions"))
    assert all(record.ok for record in records)
    assert all(40 <= record.ttft_s * 1000 < 90 and len(record.token_times_s) == 6 for record in records)


@pytest.mark.parametrize(
    "chunks, texts, error",
    [
        ([b'data: {"choices":[{"text":"a"}]}\n\n', b"data: [DONE]\n\n"], ["a"], None),
        ([b'data: {"choices":[{"te', b'xt":"a"}]}\r\n\r\ndata: [DONE]\r\n\r\n'], ["a"], None),
        (
            [
                b': keep-alive\n\ndata: {"choices":[{"text":""}]}\n\n',
                b'data: {"choices":[{"text":"b"}]}\n\ndata: [DONE]',
            ],
            ["b"],
            None,
        ),
        ([b'data: {"choices":[{"text":"a"}]}\n\n'], ["a"], "without [DONE]"),
        ([b'data: {"choices":[{"text":"a"}]}\n\ndata: {"choi'], ["a"], "stream cut inside a frame"),
        ([b'data: {"error": {"message": "boom"}}\n\n', b"data: [DONE]\n\n"], [], "error frame"),
        ([b"data: not json\n\n", b"data: [DONE]\n\n"], [], "malformed SSE frame"),
    ],
)
def test_parse_stream(chunks, texts, error):
    record = loadgen.RequestRecord(0, 0.0, sent_s=0.0)
    asyncio.run(
        stream_parse.parse_stream_yielding(record, [(index + 1.0, chunk) for index, chunk in enumerate(chunks)])
    )
    assert record.text == "".join(texts)
    assert (record.error is None) if error is None else (error in record.error)


def test_first_token_time_is_the_read_that_completed_the_frame():
    record = loadgen.RequestRecord(0, 0.0, sent_s=0.0)
    frames = [
        (1.0, b'data: {"choices":[{"text":""}]}\n\ndata: {"choi'),
        (2.5, b'ces":[{"text":"x"}]}\n\n'),
        (3.0, b'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":1}}\n\ndata: [DONE]\n\n'),
    ]
    asyncio.run(stream_parse.parse_stream_yielding(record, frames))
    assert record.first_token_s == 2.5
    assert (record.prompt_tokens, record.output_tokens, record.cached_tokens) == (7, 1, None)


def test_a_blank_line_split_across_reads_times_its_frame_at_the_second_read():
    record = loadgen.RequestRecord(0, 0.0, sent_s=0.0)
    frames = [
        (1.0, b'data: {"choices":[{"text":"x"}]}\n'),
        (1.5, b""),
        (2.0, b'\ndata: {"choices":[{"text":"y"}]}\n\n\n'),
        (3.0, b"\ndata: [DONE]\n\n"),
    ]
    asyncio.run(stream_parse.parse_stream_yielding(record, frames))
    assert (record.token_times_s, record.text, record.error) == ([2.0, 2.0], "xy", None)


@pytest.mark.parametrize("cache_hit_rate", [0.0, 0.25, 0.6])
def test_achieved_cache_hit_rate_is_the_asked_one(server, cache_hit_rate):
    server.reset(ttft_ms=1, itl_ms=1, block=1)

    async def go():
        async with loadgen.make_session(8) as session:
            tokenizer = workload.Tokenizer(session, server.url)
            built = await workload.build_workload(
                tokenizer, [0.01 * i for i in range(12)], 400, 4, cache_hit_rate, seed=3, salt=f"hit-{cache_hit_rate}"
            )
            for primer in built.primers:
                async with session.post(server.url + "/v1/completions", json=completion_body("m", primer, 1, False)):
                    pass
            planned = [
                loadgen.Planned(
                    item.index,
                    item.send_at_s,
                    "/v1/completions",
                    json.dumps(completion_body("m", item.prompt, 4)).encode(),
                )
                for item in built.requests
            ]
            return built, (await loadgen.run_schedule(session, server.url, planned, 30))[0]

    built, records = asyncio.run(go())
    assert built.exact_lengths
    assert all(item.prompt_tokens == 400 for item in built.requests)
    assert all(record.prompt_tokens == 400 for record in records)
    assert metrics.cache_hit_rate(records) == pytest.approx(cache_hit_rate, abs=0.005)


def test_prompts_without_tokenize_count_words_and_punctuation_marks(server):
    server.reset(tokenize=False)

    async def go():
        async with loadgen.make_session(2) as session:
            tokenizer = workload.Tokenizer(session, server.url)
            return await workload.build_workload(tokenizer, [0.0, 0.1], 123, 4, 0.5, seed=1), tokenizer

    built, tokenizer = asyncio.run(go())
    assert tokenizer.remote is False and not built.exact_lengths
    assert [len(workload.TOKEN_PATTERN.findall(item.prompt)) for item in built.requests] == [123, 123]
    marker = workload.level_marker("")
    prefixes = [item.prompt.split(marker)[0] for item in built.requests]
    assert prefixes[0] == prefixes[1] and len(workload.TOKEN_PATTERN.findall(prefixes[0])) == 62
    assert built.requests[0].prompt.split(marker)[1] != built.requests[1].prompt.split(marker)[1]


def test_text_of_length_converges_when_some_words_are_two_tokens():
    class Splitting(workload.Tokenizer):
        async def count(self, text: str) -> int:
            return sum(2 if len(word) > 6 else 1 for word in text.split())

    text, counted = asyncio.run(workload.text_of_length(Splitting(None, ""), 500, random.Random(5)))
    assert counted in (499, 500)
    assert asyncio.run(Splitting(None, "").count(text)) == counted
