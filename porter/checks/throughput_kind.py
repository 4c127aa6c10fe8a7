"""The throughput check kind, declared once: an RPS sweep under a TTFT SLO, the knee and its tok/s per node.

Its spec is throughput.ThroughputCheckSpec (at most one, `checks.throughput`); one run sweeps the rates and
bisects the knee (throughput.run_throughput); the headline is the target's bench_serving metric per node at
the knee, higher is better, and a keep decision compares two samples a side at least. A sweep reads for
the model as a table of levels with the knee, the target and what the figures mean, then each distinct
failure of its requests with the server's answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from porter.checks import request_failures, throughput
from porter.checks.kind import CheckKind, CheckProgress, OnProgress, at_least, speed_goal
from porter.checks.loadgen import SATURATION_LAG_MS
from porter.checks.render import number
from porter.checks.throughput import AS_HIGH_AS_POSSIBLE, LevelResult, ThroughputCheckSpec, ThroughputResult
from porter.checks.workload import level_send_seconds
from porter.engines.engine import BenchLoad

# A knee level that spends more than this share of its duration draining after the last send reports a
# throughput set by how long decode took to finish, not by the rate (bench_serving counts to the last token).
DRAIN_NOTE_SHARE = 0.5


def headline_field(spec: ThroughputCheckSpec) -> str:
    return f"{spec.metric}_per_node"


def render(key: str, result: dict) -> str:
    sweep = ThroughputResult.from_dict(result)
    percentile = sweep.slo.percentile if sweep.slo else 99
    ttft_key, ttft_header = f"p{percentile:g}_ttft_ms", f"p{percentile:g} TTFT s"
    rows = [f"  {'req/s':>6}  {'done':>9}  {'output tok/s':>12}  {'total tok/s':>11}  {ttft_header:>11}  pass"]
    for level in sweep.levels:
        figures = level.metrics
        done = f"{figures.get('completed', '-')}/{level.offered}"
        ttft = figures.get(ttft_key)
        verdict = "yes" if level.passed else "no: " + "; ".join(level.reasons or ["failed"])
        rows.append(
            f"  {number(level.rps, 2):>6}  {done:>9}  {number(figures.get('output_throughput')):>12}  "
            f"{number(figures.get('total_throughput')):>11}  {number(ttft / 1000 if ttft else None, 2):>11}  {verdict}"
        )
    knee, figure, target = sweep.knee_rps, sweep.tok_s_per_node, sweep.target_tok_s_per_node
    met = "met" if sweep.meets_target else "NOT met"
    verdict = f"target {number(target)}: {met}" if target is not None else "no target figure: as high as possible"
    slo_text = f"p{percentile:g} TTFT <= {sweep.slo and sweep.slo.ttft_s} s"
    if knee is None:
        head = f"throughput: no rate met the SLO ({slo_text}); {verdict}"
    elif sweep.every_level_passed:
        head = (
            f"throughput: no knee found below the top rate: every rate up to {number(knee, 2)} req/s met {slo_text}, "
            f"so the knee is higher (sweep higher rates to find it); {number(figure)} tok/s per node at the top "
            f"rate; {verdict}"
        )
    else:
        head = (
            f"throughput: knee {number(knee, 2)} req/s (the highest rate with {slo_text}) -> {number(figure)} "
            f"tok/s per node; {verdict}{needed_rate(figure, knee, target)}"
        )
    failed = [index for index, level in enumerate(sweep.levels) if not level.passed]
    if failed and failed[0] < len(sweep.levels) - 1:
        rows.append("  (the rows after the first failing rate bisect between the last pass and the first fail)")
    rows.append(
        "  (tok/s as bench_serving counts them: a level's tokens from the end of its warm-up to its last token, so "
        "faster decode raises them at the same rate)"
    )
    late = [level.client for level in sweep.levels if level.client.client_saturated]
    if late:
        rows.append(
            f"  the load generator ran late at {len(late)} of {len(sweep.levels)} rates (p99 lag up to "
            f"{max(client.p99_lag_ms for client in late):.0f} ms, over its {SATURATION_LAG_MS:g} ms budget): latencies "
            "there read up to that much high, so the knee can only be understated; a busy machine does this, not the "
            "server"
        )
    drained = drain_note(sweep.knee.metrics) if sweep.knee else None
    if drained:
        rows.append(f"  {drained}")
    failures = request_failures.lines(request_failures.merge(level.failures for level in sweep.levels))
    if failures:
        rows += ["  requests that failed (all rates; the first answer of each kind):", *(f"  {f}" for f in failures)]
    return "\n".join([head, *rows])


def needed_rate(figure: float | None, knee: float, target: float | None) -> str:
    """The rate the target needs at the knee's tokens per request: the knee, scaled by target over figure."""
    if not figure or not target or figure >= target:
        return ""
    return f" (the goal needs about {number(knee * target / figure, 2)} req/s at the knee's tokens per request)"


def brief(result: dict) -> str:
    sweep = ThroughputResult.from_dict(result)
    knee, figure = sweep.knee_rps, number(sweep.tok_s_per_node)
    if knee is None:
        return "no rate met the SLO"
    if sweep.every_level_passed:
        return f"no knee found below the top rate ({rate(knee)} req/s passed): {figure} tok/s/node there"
    return f"knee {rate(knee)} req/s, {figure} tok/s/node"


def rate(value: Any) -> str:
    """A request rate as people write it: 12.5, 8, 10.25 (not 12.50)."""
    return f"{value:g}" if isinstance(value, int | float) else "-"


def level_note(level: LevelResult, percentile: float) -> str:
    """One swept rate in a few words, as `porter bench` and the progress log show it while the sweep runs."""
    ttft = level.metrics.get(f"p{percentile:g}_ttft_ms")
    verdict = "pass" if level.passed else "fail (" + "; ".join(level.reasons or ["failed"]) + ")"
    late = f"; the load client ran late (p99 {level.client.p99_lag_ms:.1f} ms): latencies overstated"
    lagged = late if level.client.client_saturated else ""
    return (
        f"{rate(level.rps)} req/s: {verdict}, {level.metrics.get('completed', '-')}/{level.offered} "
        f"done, p{percentile:g} TTFT {number(ttft / 1000 if ttft else None, 2)} s, "
        f"{number(level.metrics.get('output_throughput'))} output tok/s{lagged}"
    )


def sweep_progress(spec: ThroughputCheckSpec, on_progress: OnProgress | None) -> Callable[[LevelResult], None] | None:
    """The sweep's on_level as CheckProgress: levels done of the most it can take (every rate, then the bisection
    steps; once a rate fails, exactly the bisection steps remain)."""
    if on_progress is None:
        return None
    rates, done, failed_at = len(set(spec.rps)), [], []

    def on_level(level: LevelResult) -> None:
        done.append(level)
        if not level.passed and not failed_at:
            failed_at.append(len(done))
        total = (failed_at[0] if failed_at else rates) + spec.bisect_steps
        note = level_note(level, spec.slo.percentile)
        on_progress(CheckProgress(len(done), max(total, len(done)), "levels", note, bounded=not failed_at))

    return on_level


def drain_note(knee: dict) -> str | None:
    """A warning when the knee level's figures (duration_s, drain_s) say its tok/s measures the drain."""
    drain, duration = knee.get("drain_s"), knee.get("duration_s")
    if drain is None or not duration or drain <= DRAIN_NOTE_SHARE * duration:
        return None
    return (
        f"at the knee {drain / duration:.0%} of the level's {duration:.1f} s came after its last send (its requests "
        "were still decoding): the tok/s there measures that drain more than the rate; a longer duration_s "
        "measures the rate"
    )


def workload(spec: ThroughputCheckSpec) -> str:
    load = spec.workload
    length = f"{load.duration_s:g} s" if load.duration_s else f"{load.num_prompts} requests"
    return (
        f"throughput workload: {load.input_tokens} input / {load.output_tokens} output tokens per "
        f"request, {load.cache_hit_rate:.0%} of prompt tokens from the prefix cache, Poisson arrivals at "
        f"{json.dumps(spec.rps)} req/s, {length} per rate; the knee is the highest rate whose "
        f"p{spec.slo.percentile:g} TTFT <= {spec.slo.ttft_s:g} s"
    )


def cost(spec: ThroughputCheckSpec, task: Any) -> str:
    load = spec.workload
    sends = [
        level_send_seconds(rate, load.duration_s, load.num_prompts, load.min_requests, load.warmup_s)
        for rate in spec.rps
    ]
    levels = len(spec.rps) + spec.bisect_steps
    span = f"{min(sends):.0f}-{max(sends):.0f}" if round(min(sends)) != round(max(sends)) else f"{max(sends):.0f}"
    return (
        f"run_check throughput: a sweep runs up to {len(spec.rps)} rates and {spec.bisect_steps} bisection steps "
        f"(it stops climbing at the first rate that fails the SLO), each level sending for "
        f"{span} s and then waiting for its requests to finish: up to about "
        f"{levels * max(sends) / 60:.1f} min plus those waits; a configuration's first measurement runs "
        f"{KIND.min_samples} sweeps (a keep decision compares repeated figures)"
    )


def bench_load(spec: ThroughputCheckSpec, result: dict) -> BenchLoad:
    """The sweep's workload at its knee (or its first rate), as many requests as that level offered."""
    load = spec.workload
    sweep = ThroughputResult.from_dict(result)
    rate = sweep.knee_rps or spec.rps[0]
    level = next((level for level in sweep.levels if level.rps == rate), LevelResult())
    prompts = level.offered or load.num_prompts or max(int(rate * (load.duration_s or 1)), 1)
    prefix = round(load.input_tokens * load.cache_hit_rate)
    pacing = f"--request-rate {rate:g} --num-prompts {prompts} --seed {load.seed}"
    return BenchLoad(load.input_tokens, load.output_tokens, prefix, pacing)


KIND = CheckKind(
    name="throughput",
    description="RPS sweep under a TTFT SLO; the knee and the target's metric per node there",
    spec=ThroughputCheckSpec,
    many=False,
    direction="higher",
    min_samples=2,
    run=lambda base_url, spec, task, progress=None: throughput.run_throughput(
        base_url, spec, nodes=task.hardware.nodes, on_level=sweep_progress(spec, progress)
    ).to_dict(),
    headline=headline_field,
    goal=lambda spec: speed_goal(spec.target_tok_s_per_node),
    met=at_least(headline_field, lambda spec: spec.target_tok_s_per_node),
    label=lambda spec: f"throughput ({spec.metric.removesuffix('_throughput')} tok/s/node at knee)",
    render=render,
    brief=brief,
    workload=workload,
    cost=cost,
    relative=lambda spec: spec.target_tok_s_per_node == AS_HIGH_AS_POSSIBLE,
    bench_load=bench_load,
)
