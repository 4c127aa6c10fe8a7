"""Statistics of a set of request records, named as sglang's bench_serving names them.

Covers TTFT, ITL (gaps between successive token frames), TPOT ((e2e - ttft) / (output tokens - 1))
and end-to-end latency as mean/median/p99 in ms; request, input, output and total throughput over
the measured window (to the last completion) and the drain, the part of it after the last send; the
achieved prefix-cache hit rate from usage.prompt_tokens_details.cached_tokens.
Percentiles interpolate linearly between ranks, like numpy.percentile (bench_serving uses numpy).
Does not send requests nor judge a level.
"""

from __future__ import annotations

import statistics

from porter.checks.loadgen import RequestRecord


def percentile(values: list[float], share_percent: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    position = share_percent / 100 * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def describe(name: str, values_ms: list[float], extra_percentile: float | None = None) -> dict:
    """mean_/median_/p99_/std_ NAME _ms, plus p<extra> when an SLO percentile other than 99 is asked."""
    figures = {
        f"mean_{name}_ms": statistics.fmean(values_ms) if values_ms else None,
        f"median_{name}_ms": statistics.median(values_ms) if values_ms else None,
        f"p99_{name}_ms": percentile(values_ms, 99),
        f"std_{name}_ms": statistics.pstdev(values_ms) if values_ms else None,
    }
    if extra_percentile is not None and extra_percentile != 99:
        figures[f"p{extra_percentile:g}_{name}_ms"] = percentile(values_ms, extra_percentile)
    return figures


def summarize(records: list[RequestRecord], window_start_s: float, slo_percentile: float | None = None) -> dict:
    """bench_serving-style figures for `records`; throughput is over window start -> last completion."""
    done = [record for record in records if record.ok]
    ttft = [record.ttft_s * 1000 for record in done]
    e2e = [(record.end_s - record.sent_s) * 1000 for record in done]
    tpot = [
        (record.end_s - record.first_token_s) * 1000 / (record.output_tokens - 1)
        for record in done
        if record.output_tokens > 1
    ]
    itl = [
        (later - earlier) * 1000
        for record in done
        for earlier, later in zip(record.token_times_s, record.token_times_s[1:], strict=False)
    ]
    last_end = max((record.end_s for record in done), default=window_start_s)
    elapsed = last_end - window_start_s
    # not a bench_serving figure: how long the level ran after its last send, all of it decode finishing
    drain = last_end - max((record.sent_s for record in done), default=last_end)
    input_tokens = sum(record.prompt_tokens or 0 for record in done)
    output_tokens = sum(record.output_tokens for record in done)
    figures = {
        "completed": len(done),
        # a missed deadline carries its reason in `error` but is counted once, as timed out
        "errors": sum(1 for record in records if record.error is not None and not record.timed_out),
        "timed_out": sum(1 for record in records if record.timed_out),
        "duration_s": elapsed,
        "drain_s": drain,
        "total_input_tokens": input_tokens,
        "total_output_tokens": output_tokens,
        "request_throughput": len(done) / elapsed if elapsed > 0 else 0.0,
        "input_throughput": input_tokens / elapsed if elapsed > 0 else 0.0,
        "output_throughput": output_tokens / elapsed if elapsed > 0 else 0.0,
        "total_throughput": (input_tokens + output_tokens) / elapsed if elapsed > 0 else 0.0,
        "cache_hit_rate": cache_hit_rate(done),
    }
    figures.update(describe("ttft", ttft, slo_percentile))
    figures.update(describe("tpot", tpot))
    figures.update(describe("itl", itl))
    figures.update(describe("e2e_latency", e2e))
    return figures


def cache_hit_rate(records: list[RequestRecord]) -> float | None:
    """Cached prompt tokens / prompt tokens over the requests whose usage reports both; None if none do."""
    counted = [record for record in records if record.cached_tokens is not None and record.prompt_tokens]
    if not counted:
        return None
    return sum(record.cached_tokens for record in counted) / sum(record.prompt_tokens for record in counted)
