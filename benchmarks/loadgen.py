"""Porter's load client against sglang's own bench_serving (client CPU), and its TTFT error, on tests/sse_server.py.

The server runs in its own process.

(a) Client CPU at 200 RPS x 2000 output tokens (Poisson arrivals; the server streams as fast as it can), porter's client
    (loadgen.run_schedule) and sglang's bench_serving run alternately in this one process, each run charged the process
    CPU time it took (time.process_time, a full gc.collect included): CPU ms per request and token frames per client CPU
    second, and their ratio. bench_serving is the pinned release's own code, imported from its wheel
    (sglang.benchmark.serving, which `sglang.bench_serving` re-exports): its Poisson scheduler get_request and its
    request function async_request_openai_completions (--backend sglang-oai, /v1/completions), driven as benchmark()
    drives them (a task per request as it arrives, each opening its own session, as it does); only what it imports for
    other paths is stubbed (transformers, orjson, sglang's package root and server utilities, its datasets). On this
    server's closing usage frame (`choices: []`, which porter asks for and bench_serving does not) bench_serving ends
    with its IndexError, after timing every token frame. Without the wheel (tests/conformance/requirements.lock pins it)
    the comparison is skipped with a line saying how to fetch it. With two or more cores the server runs on core 0 and
    the client on core 1.
(b) TTFT error vs injected truth at 1, 64 and 256 concurrent streams: measured TTFT minus the injected TTFT (end to
    end, includes the server's own jitter), and the client-side error alone (arrival of the first frame vs the
    server's monotonic clock when it wrote it; same host clock).
Warm-up run first, then the median over repeats. Last line: one JSON object.
Usage: python3 benchmarks/loadgen.py [--repeats 5] [--requests 200]

Measured 2026-12-06 on a shared 2-core VM (other sessions running; load average 4.34 before, 2.39 after), defaults,
aiohttp 3.14.5: (a) porter 22.8 client CPU ms per request (87,710 frames per CPU second), bench_serving 20.1 (99,631):
0.88x, per pair 0.70-1.04; in another run, alternating with the client as it was before the per-read changes (d8c98a1),
load average 3.37 to 4.94: before 22.7, after 18.7, bench_serving 20.2 ms (0.89x before, 1.08x after). Porter's client
holds no 2x lead over the real bench_serving: the receive path both share (aiohttp's reader per HTTP chunk, a task
wake-up per socket read) costs porter's client, its parse skipped, 17.4 ms there (86% of bench_serving's whole request),
and a client's cost per request moves with how many frames each socket read carries, which the machine's load sets.
(b) TTFT error median 1.65 / 1.86 / 1.52 ms (p99 4.74 / 12.45 / 6.98) at 1 / 64 / 256 streams; client-side median
0.28 / 0.15 / 0.11 ms (p99 0.38 / 3.64 / 3.38); the client's lag flagged saturation at 64 and 256 streams.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import re
import statistics
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from sse_server import SseServer  # noqa: E402

from porter.checks import loadgen, metrics, workload  # noqa: E402
from porter.checks.throughput import completion_body  # noqa: E402

INJECTED_TTFT_MS = 100.0
INJECTED_ITL_MS = 50.0
RPS, OUTPUT_TOKENS = 200.0, 2000
PROMPT = "time year people way day"
LOCK = ROOT / "tests" / "conformance" / "requirements.lock"
# what sglang.benchmark.serving imports for paths other than the OpenAI completions request
STUBBED = "orjson transformers sglang.srt.disaggregation.utils sglang.srt.utils.network sglang.benchmark.datasets"


class _Stub(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {})


def bench_serving() -> tuple[types.ModuleType | None, str]:
    """sglang.benchmark.serving imported from the pinned sglang wheel in the conformance cache, or None and why."""
    version = re.search(r"^sglang==(\S+)", LOCK.read_text(), re.M)[1]
    cache = Path(os.environ.get("PORTER_CONFORMANCE_CACHE") or Path.home() / ".cache" / "porter" / "conformance")
    wheels = sorted(cache.glob(f"sglang-{version}-*.whl"))
    if not wheels:
        fetch = f"pip download sglang=={version} --no-deps --only-binary :all: -d {cache}"
        return None, f"no sglang {version} wheel in {cache}; fetch it with `{fetch}` (or scripts/conformance.sh pinned)"
    for name in (*STUBBED.split(), "sglang.benchmark.datasets.mooncake"):
        sys.modules[name] = _Stub(name)
    package = sys.modules["sglang"] = types.ModuleType("sglang")  # its real __init__ imports torch
    package.__path__ = [f"{wheels[-1]}/sglang"]  # read from the wheel itself (zipimport)
    from sglang.benchmark import serving

    flags = {"disable_stream": False, "disable_ignore_eos": False, "return_logprob": False, "top_logprobs_num": 0}
    serving.args = argparse.Namespace(**flags, header=None)  # bench_serving's defaults for these flags
    return serving, f"sglang {version} bench_serving from {wheels[-1].name}"


def planned(count: int, rps: float, output_tokens: int, poisson: bool = False) -> list[loadgen.Planned]:
    body = json.dumps(completion_body("sse-test", PROMPT, output_tokens)).encode()
    times = [t / rps for t in workload.unit_arrivals(0, count)] if poisson else [i / rps for i in range(count)]
    return [loadgen.Planned(index, at, "/v1/completions", body) for index, at in enumerate(times)]


def run(server: SseServer, plan: list[loadgen.Planned]) -> tuple[list[loadgen.RequestRecord], loadgen.ClientLag, float]:
    async def go():
        async with loadgen.make_session(len(plan)) as session:
            return await loadgen.run_schedule(session, server.url, plan, 600)

    gc.collect()
    cpu_before = time.process_time()
    records, lag = asyncio.run(go())
    gc.collect()  # porter's client defers collection to after the level: charge it here
    return records, lag, time.process_time() - cpu_before


def porter_cpu(server: SseServer, count: int) -> dict:
    server.reset(ttft_ms=0, itl_ms=0)
    records, _, cpu_s = run(server, planned(count, RPS, OUTPUT_TOKENS, poisson=True))
    good = [record for record in records if record.ok and record.output_tokens == OUTPUT_TOKENS]
    return _cpu_figures(len(records) - len(good), sum(len(record.token_times_s) for record in good), count, cpu_s)


def bench_serving_cpu(serving: types.ModuleType, server: SseServer, count: int) -> dict:
    server.reset(ttft_ms=0, itl_ms=0)
    rows = [types.SimpleNamespace(prompt=PROMPT, prompt_len=5, output_len=OUTPUT_TOKENS) for _ in range(count)]

    async def go():
        tasks = []
        async for row in serving.get_request(rows, RPS):
            request = serving.RequestFuncInput(
                row.prompt, server.url + "/v1/completions", row.prompt_len, row.output_len, "sse-test", "", None, {}
            )
            tasks.append(asyncio.create_task(serving.async_request_openai_completions(request)))
        return await asyncio.gather(*tasks)

    gc.collect()
    cpu_before = time.process_time()
    outputs = asyncio.run(go())
    gc.collect()
    cpu_s = time.process_time() - cpu_before
    # the closing usage frame has no choice: bench_serving's IndexError, after every token frame was timed
    good = [
        out
        for out in outputs
        if len(out.itl) + 1 == OUTPUT_TOKENS and out.error.endswith("IndexError: list index out of range\n")
    ]
    return _cpu_figures(count - len(good), sum(len(out.itl) + 1 for out in good), count, cpu_s)


def _cpu_figures(failed: int, frames: int, requests: int, cpu_s: float) -> dict:
    return {"cpu_ms_per_request": cpu_s * 1000 / requests, "frames_per_client_cpu_s": frames / cpu_s, "failed": failed}


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
        "client_saturated": lag.summary().client_saturated,
    }


def median_of(runs: list[dict]) -> dict:
    merged = {}
    for key, first in runs[0].items():
        values = [result[key] for result in runs]
        merged[key] = any(values) if isinstance(first, bool) else statistics.median(values)
    return merged


def compare(server: SseServer, serving: types.ModuleType | None, repeats: int, requests: int) -> dict:
    """Porter's client and bench_serving's alternately (P B P B ...), after a warm-up of each."""
    porter_cpu(server, 20)
    if serving:
        bench_serving_cpu(serving, server, 20)
    runs: dict[str, list[dict]] = {"porter": [], "bench_serving": []}
    for _ in range(repeats):
        runs["porter"].append(porter_cpu(server, requests))
        if serving:
            runs["bench_serving"].append(bench_serving_cpu(serving, server, requests))
    figures = {name: median_of(found) for name, found in runs.items() if found}
    for name, found in figures.items():
        print(
            f"{name}: {found['cpu_ms_per_request']:.1f} client CPU ms per request, "
            f"{found['frames_per_client_cpu_s']:,.0f} frames per client CPU second, failed {found['failed']:g}"
        )
    if serving:
        pairs = [b["cpu_ms_per_request"] / p["cpu_ms_per_request"] for p, b in zip(*runs.values(), strict=True)]
        figures["ratio"] = figures["bench_serving"]["cpu_ms_per_request"] / figures["porter"]["cpu_ms_per_request"]
        figures["ratio_per_pair"] = pairs
        print(
            f"porter's lead: {figures['ratio']:.2f}x less client CPU per request "
            f"(per pair: {', '.join(f'{ratio:.2f}' for ratio in pairs)})"
        )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--requests", type=int, default=200, help="requests per run of (a), at 200 RPS")
    parser.add_argument("--no-ttft", action="store_true", help="only (a)")
    options = parser.parse_args()
    serving, source = bench_serving()
    print(f"bench_serving: {source}" if serving else f"bench_serving: skipped, {source}")
    server = SseServer()
    if len(os.sched_getaffinity(0)) >= 2:
        os.sched_setaffinity(server.process.pid, {0})
        os.sched_setaffinity(0, {1})
    load_before = os.getloadavg()[0]
    try:
        print(f"{options.requests} requests at {RPS:g} RPS x {OUTPUT_TOKENS} tokens, median of {options.repeats}:")
        summary = {
            "requests": options.requests,
            "repeats": options.repeats,
            **compare(server, serving, options.repeats, options.requests),
        }
        for streams in () if options.no_ttft else (1, 64, 256):
            figures = summary[f"ttft_error_{streams}"] = median_of(
                [ttft_error(server, streams) for _ in range(options.repeats)]
            )
            print(
                f"{streams:>3} streams: TTFT error median {figures['median_error_ms']:.2f} ms, "
                f"p99 {figures['p99_error_ms']:.2f} ms; client-side median {figures['median_client_error_ms']:.2f} "
                f"ms, p99 {figures['p99_client_error_ms']:.2f} ms; saturated: {figures['client_saturated']}"
            )
    finally:
        server.stop()
    summary["load_average_1m"] = [load_before, os.getloadavg()[0]]
    print(f"load average (1 min) before and after: {load_before:.2f}, {summary['load_average_1m'][1]:.2f}")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
