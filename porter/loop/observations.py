"""Check results as the model reads them: decision-ready text rendered once from the structured result.

A throughput sweep becomes a per-level table (offered rate, requests done of offered, output and total
tok/s, the SLO's TTFT percentile, pass or why not) with the knee and the target; single stream one line;
quality one line with its interval; the run's targets one line each with a stale mark. The numbers
come from the result dicts the checks return (bench_serving names); the facts themselves travel beside
this text for programs. Does not measure (checks/) and does not decide (accepting.py).
"""

from __future__ import annotations

import json
from typing import Any

from porter.checks.loadgen import SATURATION_LAG_MS

# A knee level that spends more than this share of its duration draining after the last send reports a
# throughput set by how long decode took to finish, not by the rate (bench_serving counts to the last token).
DRAIN_NOTE_SHARE = 0.5


def number(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def check(key: str, result: dict) -> str:
    if key not in ("throughput", "single_stream"):
        return quality(key, result)
    text = throughput(result) if key == "throughput" else single_stream(result)
    samples = result.get("samples") or 0
    if samples > 1:
        text += (
            f"\n  {samples} samples of this check on this configuration, median {number(result.get('median'))}: porter "
            "measures a configuration more than once, so that a keep decision compares repeated figures (the "
            "figures above are the latest sample)"
        )
    return text


def throughput(result: dict) -> str:
    slo = result.get("slo") or {}
    percentile = f"p{slo.get('percentile', 99):g}"
    ttft_key, ttft_header = f"{percentile}_ttft_ms", f"{percentile} TTFT s"
    rows = [f"  {'req/s':>6}  {'done':>9}  {'output tok/s':>12}  {'total tok/s':>11}  {ttft_header:>11}  pass"]
    levels = result.get("levels") or []
    for level in levels:
        done = f"{level.get('completed', '-')}/{level.get('offered', '-')}"
        ttft = level.get(ttft_key)
        verdict = "yes" if level.get("passed") else "no: " + "; ".join(level.get("reasons") or ["failed"])
        rows.append(
            f"  {number(level.get('rps'), 2):>6}  {done:>9}  {number(level.get('output_throughput')):>12}  "
            f"{number(level.get('total_throughput')):>11}  {number(ttft / 1000 if ttft else None, 2):>11}  {verdict}"
        )
    knee = result.get("knee_rps")
    figure, target = headline(result)
    met = "met" if result.get("meets_target") else "NOT met"
    slo_text = f"{percentile} TTFT <= {slo.get('ttft_s')} s"
    if knee is None:
        head = f"throughput: no rate met the SLO ({slo_text}); target {number(target)}: NOT met"
    else:
        head = (
            f"throughput: knee {number(knee, 2)} req/s (the highest rate with {slo_text}) -> {number(figure)} "
            f"tok/s per node; target {number(target)}: {met}"
        )
    failed = [index for index, level in enumerate(levels) if not level.get("passed")]
    if failed and failed[0] < len(levels) - 1:
        rows.append("  (the rows after the first failing rate bisect between the last pass and the first fail)")
    rows.append(
        "  (tok/s as bench_serving counts them: a level's tokens from the end of its warm-up to its last token, so "
        "faster decode raises them at the same rate)"
    )
    late = [level["client"] for level in levels if (level.get("client") or {}).get("client_saturated")]
    if late:
        lag = max(max(client.get("p99_send_lag_ms") or 0, client.get("p99_loop_lag_ms") or 0) for client in late)
        rows.append(
            f"  the load generator ran late at {len(late)} of {len(levels)} rates (p99 lag up to {lag:.0f} ms, over "
            f"its {SATURATION_LAG_MS:g} ms budget): latencies there read up to that much high, so the knee can only "
            "be understated; a busy machine does this, not the server"
        )
    drained = drain_note(result) if knee is not None else None
    if drained:
        rows.append(f"  {drained}")
    return "\n".join([head, *rows])


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


def headline(result: dict) -> tuple[Any, Any]:
    """(figure per node at the knee, target): the task's target metric, whichever naming the result uses."""
    metric = result.get("metric")
    figure = result.get(f"{metric}_per_node") if metric else None
    if figure is None:
        figure = result.get("total_throughput_per_node", result.get("total_tok_s_per_node"))
    target = result.get("target_tok_s_per_node", result.get("target_total_tok_s_per_node"))
    return figure, target


def single_stream(result: dict) -> str:
    per_request = ", ".join(number(value) for value in result.get("per_request_tok_s") or [])
    met = "met" if result.get("meets_target") else "NOT met"
    errors = f"; {result['errors']} errors" if result.get("errors") else ""
    return (
        f"single stream: {number(result.get('output_tok_s'))} output tok/s (median of {result.get('completed')} "
        f"requests: {per_request or '-'}; median TTFT {number(result.get('median_ttft_ms'), 0)} ms{errors}); "
        f"target {number(result.get('target_output_tok_s'))}: {met}"
    )


def quality(key: str, result: dict) -> str:
    interval = f"95% CI {number(result.get('ci_low'), 3)}-{number(result.get('ci_high'), 3)}"
    verdict = "passed" if result.get("passed") else "FAILED"
    return f"{key}: {number(result.get('score'), 3)} ({interval}, n={result.get('n')}): {verdict}"


def targets(rows: list[dict]) -> str:
    """The run's targets, one line each: value, goal, met, and a stale mark when measured on another config."""
    lines = []
    for row in rows:
        stale = " (stale: measured on another configuration; measure again)" if row.get("stale") else ""
        met = "met" if row.get("met") else "not met"
        lines.append(f"- {row['target']}: {number(row.get('value'), 3)} (goal {row.get('goal')}): {met}{stale}")
    return "\n".join(lines)


def status(run_status: dict) -> str:
    """The run's status after a measuring call: targets of the accepted configuration, pending change, server."""
    pending = run_status.get("pending")
    changed = run_status.get("flags_changed") or {}
    pending_text = "none" if not pending else f"yes (flags changed: {json.dumps(changed)})" if changed else "yes"
    return (
        f"Targets of the accepted configuration:\n{targets(run_status.get('targets') or [])}\n"
        f"Pending change: {pending_text}. Server: {run_status.get('server')}."
    )
