"""Benchmark of porter's load generator against the test SSE server (tests/sse_server.py, its own process).

(a) chunk rate: streams as fast as the server writes them; figures are streamed frames per second
    of wall time and per second of the client's own CPU time (its capacity on one core), set against
    what a 2.4 RPS x 1000-output-token workload needs (2,400 frames/s at one token per frame).
    The same figure for a line-by-line client that parses JSON on the hot path, as sglang's bench_serving
    does (written here from its description; bench_serving itself needs torch and triton to import, which
    this machine does not have).
(b) TTFT error vs injected truth at 1, 64 and 256 concurrent streams: measured TTFT minus the
    injected TTFT (end to end, includes the server's own jitter), and the client-side error alone
    (arrival of the first frame vs the server's monotonic clock when it wrote it; same host clock).
Warm-up run first, then the median over repeats. Last line: one JSON object.
Usage: python3 benchmarks/loadgen.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from sse_server import SseServer  # noqa: E402

from porter.checks import loadgen, metrics  # noqa: E402
from porter.checks.throughput import completion_body  # noqa: E402

INJECTED_TTFT_MS = 100.0
INJECTED_ITL_MS = 50.0


def planned(count: int, rps: float, output_tokens: int) -> list[loadgen.Planned]:
    body = json.dumps(completion_body("sse-test", "time year people way day", output_tokens)).encode()
    return [loadgen.Planned(index, index / rps, "/v1/completions", body) for index in range(count)]


def run(server: SseServer, plan: list[loadgen.Planned]) -> tuple[list[loadgen.RequestRecord], loadgen.ClientLag, float]:
    async def go():
        async with loadgen.make_session(len(plan)) as session:
            return await loadgen.run_schedule(session, server.url, plan, 600)

    cpu_before = time.process_time()
    records, lag = asyncio.run(go())
    return records, lag, time.process_time() - cpu_before


def chunk_rate(server: SseServer, streams: int, tokens: int) -> dict:
    server.reset(ttft_ms=0, itl_ms=0)
    records, _, cpu_s = run(server, planned(streams, 1e6, tokens))
    frames = sum(len(record.token_times_s) for record in records if record.ok)
    wall_s = max(record.end_s for record in records) - min(record.sent_s for record in records)
    return {"frames": frames, "frames_per_s_wall": frames / wall_s, "frames_per_client_cpu_s": frames / cpu_s}


async def _line_parsing_stream(session, url: str, body: bytes) -> int:
    """bench_serving's way: iterate lines, decode and json-parse each, take the clock per token frame."""
    frames = 0
    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as response:
        async for line in response.content:
            text = line.strip().decode()
            if not text.startswith("data:") or text == "data: [DONE]":
                continue
            payload = json.loads(text.removeprefix("data:").strip())
            if payload["choices"] and payload["choices"][0].get("text"):
                time.perf_counter()
                frames += 1
    return frames


def line_parsing_chunk_rate(server: SseServer, streams: int, tokens: int) -> dict:
    server.reset(ttft_ms=0, itl_ms=0)
    body = planned(1, 1.0, tokens)[0].body

    async def go():
        async with loadgen.make_session(streams) as session:
            url = server.url + "/v1/completions"
            return await asyncio.gather(*(_line_parsing_stream(session, url, body) for _ in range(streams)))

    cpu_before, wall_before = time.process_time(), time.monotonic()
    frames = sum(asyncio.run(go()))
    cpu_s, wall_s = time.process_time() - cpu_before, time.monotonic() - wall_before
    return {"frames": frames, "frames_per_s_wall": frames / wall_s, "frames_per_client_cpu_s": frames / cpu_s}


def ttft_error(server: SseServer, streams: int) -> dict:
    """`streams` concurrent streams in steady state: arrivals spaced so that many overlap."""
    server.reset(ttft_ms=INJECTED_TTFT_MS, itl_ms=INJECTED_ITL_MS)
    output_tokens = 40
    stream_s = (INJECTED_TTFT_MS + output_tokens * INJECTED_ITL_MS) / 1000
    rps = streams / stream_s
    records, lag, _ = run(server, planned(max(streams * 2, 8), rps, output_tokens))
    good = [record for record in records if record.ok]
    error = [record.ttft_s * 1000 - INJECTED_TTFT_MS for record in good]
    client = [
        (record.first_token_s + lag.origin_monotonic - record.first_token_event["server_t"]) * 1000 for record in good
    ]
    return {
        "median_error_ms": statistics.median(error),
        "p99_error_ms": metrics.percentile(error, 99),
        "median_client_error_ms": statistics.median(client),
        "p99_client_error_ms": metrics.percentile(client, 99),
        "failed": len(records) - len(good),
        "client_saturated": lag.summary()["client_saturated"],
    }


def median_of(runs: list[dict]) -> dict:
    merged = {}
    for key, first in runs[0].items():
        values = [result[key] for result in runs]
        merged[key] = any(values) if isinstance(first, bool) else statistics.median(values)
    return merged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    repeats = parser.parse_args().repeats
    server = SseServer()
    try:
        chunk_rate(server, 16, 200)  # warm-up: connections, imports, JIT-free but cache-warm
        rate = median_of([chunk_rate(server, 64, 1000) for _ in range(repeats)])
        print(
            f"chunk rate: {rate['frames_per_s_wall']:,.0f} frames/s wall, "
            f"{rate['frames_per_client_cpu_s']:,.0f} frames per client CPU second "
            f"(2.4 RPS x 1000 tokens needs 2,400/s)"
        )
        line_parsing_chunk_rate(server, 16, 200)
        baseline = median_of([line_parsing_chunk_rate(server, 64, 1000) for _ in range(repeats)])
        print(
            f"line-parsing client (bench_serving's approach): {baseline['frames_per_s_wall']:,.0f} frames/s wall, "
            f"{baseline['frames_per_client_cpu_s']:,.0f} frames per client CPU second"
        )
        errors = {}
        for streams in (1, 64, 256):
            errors[streams] = median_of([ttft_error(server, streams) for _ in range(repeats)])
            figures = errors[streams]
            print(
                f"{streams:>3} streams: TTFT error median {figures['median_error_ms']:.2f} ms, "
                f"p99 {figures['p99_error_ms']:.2f} ms; client-side median {figures['median_client_error_ms']:.2f} "
                f"ms, p99 {figures['p99_client_error_ms']:.2f} ms; saturated: {figures['client_saturated']}"
            )
    finally:
        server.stop()
    summary = {
        "frames_per_s_wall": rate["frames_per_s_wall"],
        "frames_per_client_cpu_s": rate["frames_per_client_cpu_s"],
        "line_parsing_frames_per_client_cpu_s": baseline["frames_per_client_cpu_s"],
        "line_parsing_frames_per_s_wall": baseline["frames_per_s_wall"],
        "needed_frames_per_s": 2400,
        **{f"ttft_error_{n}": errors[n] for n in errors},
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
