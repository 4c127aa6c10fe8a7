"""The single-stream check kind, declared once: output tok/s of one request at a time, after the first token.

Its spec is throughput.SingleStreamSpec (at most one, `checks.single_stream`); one run sends its requests one
after another (throughput.run_single_stream); the headline is the median output tok/s, higher is better,
and a keep decision compares two samples a side at least. It reads as one line, and a line per distinct
failure with the server's answer.
"""

from __future__ import annotations

from porter.checks import request_failures
from porter.checks.kind import CheckKind, at_least, speed_goal
from porter.checks.render import number
from porter.checks.throughput import AS_HIGH_AS_POSSIBLE, SingleStreamResult, SingleStreamSpec, run_single_stream
from porter.engines.engine import BenchLoad


def render(key: str, result: dict) -> str:
    stream = SingleStreamResult.from_dict(result)
    per_request = ", ".join(number(value) for value in stream.per_request_tok_s)
    met = "met" if stream.meets_target else "NOT met"
    errors = f"; {stream.errors} errors" if stream.errors else ""
    target = stream.target_output_tok_s
    verdict = (
        f"target {number(target)}: {met}" if target is not None else "no target figure: as high as the budget allows"
    )
    head = (
        f"single stream: {number(stream.output_tok_s)} output tok/s (median of {stream.completed} requests: "
        f"{per_request or '-'}; median TTFT {number(stream.median_ttft_ms, 0)} ms{errors}); {verdict}"
    )
    return "\n".join([head, *(f"  {line}" for line in request_failures.lines(stream.failures))])


def brief(result: dict) -> str:
    stream = SingleStreamResult.from_dict(result)
    return f"{number(stream.output_tok_s)} output tok/s (median of {stream.completed} requests)"


def workload(spec: SingleStreamSpec) -> str:
    return (
        f"single stream: {spec.input_tokens} input / {spec.output_tokens} output tokens, one request at a "
        f"time, median output tok/s of {spec.num_requests} requests"
    )


def cost(spec: SingleStreamSpec, task) -> str:
    return (
        f"run_check single_stream: {spec.num_requests} requests one after another, "
        f"{KIND.min_samples} times on a configuration's first measurement"
    )


KIND = CheckKind(
    name="single_stream",
    description="output tok/s of one request at a time, after the first token (median of the requests)",
    spec=SingleStreamSpec,
    many=False,
    direction="higher",
    min_samples=2,
    run=lambda base_url, spec, task, progress=None: run_single_stream(base_url, spec, on_progress=progress).to_dict(),
    headline=lambda spec: "output_tok_s",
    goal=lambda spec: speed_goal(spec.target_output_tok_s),
    met=at_least(lambda spec: "output_tok_s", lambda spec: spec.target_output_tok_s),
    label=lambda spec: "single stream (output tok/s)",
    render=render,
    brief=brief,
    workload=workload,
    cost=cost,
    relative=lambda spec: spec.target_output_tok_s == AS_HIGH_AS_POSSIBLE,
    bench_load=lambda spec, result: BenchLoad(
        spec.input_tokens, spec.output_tokens, 0, f"--max-concurrency 1 --num-prompts {spec.num_requests}"
    ),
)
