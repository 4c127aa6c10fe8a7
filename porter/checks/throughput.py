"""Throughput check: an RPS sweep with an SLO, the knee, and the single-stream output speed.

Covers running Poisson levels against POST /v1/completions (streaming, ignore_eos, usage included)
with common random numbers: every level replays one seeded unit-rate arrival pattern divided by its
rate, with the same prompts, and measures at least `min_requests` requests after the warm-up window.
Each level is judged (p<pct> TTFT <= SLO, completed >= 95% of offered, errors <= 1%); the knee is the
highest passing rate, refined by bisection between the last pass (0 when the first level fails) and the
first fail, and the per-node output and total throughput there are reported, the task's `metric` being
the target's. Single stream: one request at a time, output tokens per second after the first token
((output tokens - 1) / (e2e - ttft)), the median over the requests, on the same seeded prose every run.
Unique parts carry a per-run marker so a server whose cache is warm from an earlier run or level cannot
inflate the hit rate.
Does not build prompts (workload.py) nor time streams (loadgen.py).

The public functions are synchronous (they run their own event loop): call them from a thread when
an event loop is already running.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Annotated, Any, Literal

import aiohttp
from pydantic import Field, PlainValidator, model_validator

from porter.checks import loadgen, metrics, request_failures, workload
from porter.checks.kind import OnProgress, Tally
from porter.ledger.records import Record, read_record
from porter.schema import PositiveFloat, Spec

# A speed target with no figure to reach: the run optimises it until its budget or a measured plateau.
AS_HIGH_AS_POSSIBLE = "max"
THROUGHPUTS = ("output_throughput", "total_throughput")  # the bench_serving throughputs a sweep reports per node
MIN_COMPLETED_SHARE = 0.95
MAX_ERROR_SHARE = 0.01
MIN_DRAIN_S = 120.0
SINGLE_REQUEST_TIMEOUT_S = 900.0


def _speed_target(value: object) -> float | str:
    """A positive figure, or `max`: one clear error otherwise (a union would report each branch)."""
    if value == AS_HIGH_AS_POSSIBLE:
        return AS_HIGH_AS_POSSIBLE
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected a number of tok/s or {AS_HIGH_AS_POSSIBLE} (as high as the budget allows)")
    if not value > 0:
        raise ValueError(f"Input should be greater than 0 (got {value:g})")
    return float(value)


SpeedTarget = Annotated[float | str, PlainValidator(_speed_target)]


def absolute(target: float | str) -> float | None:
    """The figure a target holds, None for `max` (and for porter bench's infinite one)."""
    return float(target) if isinstance(target, int | float) and math.isfinite(target) else None


class WorkloadSpec(Spec):
    input_tokens: int = Field(ge=1, description="Prompt length in tokens.")
    output_tokens: int = Field(ge=1, description="Generated tokens per request (ignore_eos).")
    cache_hit_rate: float = Field(0.0, ge=0, lt=1, description="Share of prompt tokens served from the prefix cache.")
    duration_s: PositiveFloat | None = Field(None, description="Length of each RPS level.")
    num_prompts: int | None = Field(None, ge=1, description="Requests per level, instead of a duration.")
    warmup_s: float = Field(0.0, ge=0, description="Start of each level discarded from the statistics.")
    seed: int = Field(0, description="Seed of the prompts and of the Poisson arrivals.")
    min_requests: int = Field(
        32, ge=1, description="Requests each level measures at least (after warm-up), whatever `duration_s` says."
    )
    max_concurrency: int | None = Field(
        None, ge=1, description="Requests in flight at most (bench_serving's --max-concurrency); unset: no cap."
    )

    @model_validator(mode="after")
    def _duration_or_count(self) -> WorkloadSpec:
        if self.duration_s is None and self.num_prompts is None:
            raise ValueError("a workload needs `duration_s` or `num_prompts`")
        return self


class SloSpec(Spec):
    ttft_s: PositiveFloat = Field(description="Time-to-first-token limit in seconds.")
    percentile: float = Field(99, gt=0, le=100, description="Percentile of TTFT held to the limit.")


class ThroughputCheckSpec(Spec):
    workload: WorkloadSpec
    rps: list[PositiveFloat] = Field(min_length=1, description="Offered request rates, swept in order.")
    slo: SloSpec
    metric: Literal[THROUGHPUTS] = Field(
        description="bench_serving metric the target holds, per node at the knee: output_throughput (generated "
        "tok/s, what serving figures usually quote) or total_throughput (prompt + generated tok/s)."
    )
    target_tok_s_per_node: SpeedTarget = Field(
        description="Tok/s per node of `metric` at the knee to reach, or max: as high as the budget allows."
    )
    bisect_steps: int = Field(2, ge=0, description="Bisection steps between the last pass and the first fail.")


class SingleStreamSpec(Spec):
    input_tokens: int = Field(ge=1)
    output_tokens: int = Field(ge=1)
    num_requests: int = Field(3, ge=1, description="Requests run one at a time; the median is reported.")
    target_output_tok_s: SpeedTarget = Field(
        description="Output tokens per second after the first token to reach, or max: as high as the budget allows."
    )


@dataclass
class LevelResult(Record):
    """One offered rate: its bench_serving figures, whether it met the SLO and, if not, why."""

    rps: float = 0.0
    offered: int = 0
    passed: bool = False
    reasons: list[str] = field(default_factory=list)
    metrics: dict = field(default_factory=dict)
    client: loadgen.LagSummary = field(default_factory=loadgen.LagSummary)
    failures: list[dict] = field(default_factory=list)  # each distinct failure with the server's answer

    def to_dict(self) -> dict:
        """The fields with the bench_serving figures in place of `metrics`."""
        own = asdict(self)
        return {**own.pop("metrics"), **own}

    @classmethod
    def from_dict(cls, document: dict) -> LevelResult:
        """A level from its document (to_dict): what is not a field of its own is a bench_serving figure."""
        own = {item.name for item in fields(cls)}
        level = read_record(cls, document, client=lambda client: read_record(loadgen.LagSummary, client))
        level.metrics = {name: value for name, value in document.items() if name not in own}
        return level


@dataclass
class ThroughputResult(Record):
    """The sweep as its document reads (whose top level also holds the knee's figures): every level, the knee and the
    per-node figures there; the kind reads it back (throughput_kind.py), whatever part a failed check left."""

    model: str = ""
    knee_rps: float | None = None
    slo: SloSpec | None = None
    nodes: int = 1
    metric: str = "output_throughput"  # the bench_serving throughput the target holds: output_ or total_throughput
    output_throughput_per_node: float | None = None
    total_throughput_per_node: float | None = None
    target_tok_s_per_node: float | None = None
    meets_target: bool = False
    client_saturated: bool = False
    every_level_passed: bool = False  # no rate failed: the knee is above the top rate swept, only a lower bound on it
    levels: list[LevelResult] = field(default_factory=list)
    failures: list[dict] = field(default_factory=list)  # every level's, added

    @classmethod
    def of(cls, levels: list[LevelResult], knee: LevelResult | None, **given: Any) -> ThroughputResult:
        """The sweep of `levels` with its figures at `knee`; `given` holds its slo, nodes, metric, target and model."""
        sweep = cls(knee_rps=knee.rps if knee else None, levels=levels, **given)
        for name in THROUGHPUTS:
            setattr(sweep, f"{name}_per_node", knee.metrics[name] / sweep.nodes if knee else 0.0)
        target = sweep.target_tok_s_per_node
        sweep.meets_target = knee is not None and target is not None and sweep.tok_s_per_node >= target
        sweep.client_saturated = any(level.client.client_saturated for level in levels)
        sweep.every_level_passed = bool(levels) and all(level.passed for level in levels)
        sweep.failures = request_failures.merge(level.failures for level in levels)
        return sweep

    @classmethod
    def from_dict(cls, document: dict) -> ThroughputResult:
        """A sweep from its document (to_dict): its knee is the level at its knee rate."""
        return read_record(
            cls, document, slo=SloSpec.model_validate, levels=lambda levels: [*map(LevelResult.from_dict, levels)]
        )

    @property
    def knee(self) -> LevelResult | None:
        return next((level for level in self.levels if level.rps == self.knee_rps), None)

    @property
    def tok_s_per_node(self) -> float | None:
        """The target's metric per node at the knee."""
        return getattr(self, f"{self.metric}_per_node")

    def to_dict(self) -> dict:
        at_knee = dict(self.knee.metrics) if self.knee else {}
        own = {item.name: getattr(self, item.name) for item in fields(self)}
        return {**at_knee, **own, "slo": self.slo.model_dump(), "levels": [level.to_dict() for level in self.levels]}


@dataclass
class SingleStreamResult(Record):
    """Output speed of one request at a time (Artificial Analysis style): the median over the requests; read back
    from its document by the kind (single_stream_kind.py), whatever part of it a check that failed part-way left."""

    output_tok_s: float | None = None
    per_request_tok_s: list[float] = field(default_factory=list)
    median_ttft_ms: float | None = None
    completed: int = 0
    errors: int = 0
    target_output_tok_s: float | None = None
    model: str = ""
    failures: list[dict] = field(default_factory=list)  # each distinct failure with the server's answer

    @property
    def meets_target(self) -> bool:
        target = self.target_output_tok_s
        return target is not None and self.completed > 0 and self.output_tok_s >= target

    def to_dict(self) -> dict:
        return {**asdict(self), "meets_target": self.meets_target}


def judge_level(figures: dict, offered: int, slo: SloSpec) -> tuple[bool, list[str]]:
    """Pass when p<pct> TTFT <= SLO, completed >= 95% of offered and errors <= 1%; else the reasons."""
    reasons: list[str] = []
    ttft_key = "p99_ttft_ms" if slo.percentile == 99 else f"p{slo.percentile:g}_ttft_ms"
    ttft_ms = figures.get(ttft_key)
    if ttft_ms is None:
        reasons.append("no request completed, so there is no TTFT")
    elif ttft_ms > slo.ttft_s * 1000:
        reasons.append(f"p{slo.percentile:g} TTFT {ttft_ms / 1000:.3f} s > SLO {slo.ttft_s:g} s")
    if figures["completed"] < MIN_COMPLETED_SHARE * offered:
        reasons.append(f"completed {figures['completed']}/{offered} < {MIN_COMPLETED_SHARE:.0%} of offered")
    if figures["errors"] > MAX_ERROR_SHARE * offered:
        reasons.append(f"errors {figures['errors']}/{offered} > {MAX_ERROR_SHARE:.0%}")
    return not reasons, reasons


async def find_knee(
    rates: list[float], bisect_steps: int, measure: Callable[[float], Awaitable[LevelResult]]
) -> tuple[LevelResult | None, list[LevelResult]]:
    """Sweep `rates` upwards until one fails, then bisect between the last pass and the first fail.

    The sweep stops at the first failing rate because higher rates only queue more; the knee is the
    highest rate that passed. When the lowest rate already fails, the bisection runs between 0 and it:
    the ladder only brackets the knee, and a knee below its first level is still a figure to compare
    (None only when every rate tried fails).
    """
    levels: list[LevelResult] = []
    last_pass: LevelResult | None = None
    first_fail: LevelResult | None = None
    for rate in sorted(set(rates)):
        level = await measure(rate)
        levels.append(level)
        if not level.passed:
            first_fail = level
            break
        last_pass = level
    if first_fail is None:
        return last_pass, levels
    low, high = (last_pass.rps if last_pass else 0.0), first_fail.rps
    for _ in range(bisect_steps):
        middle = round((low + high) / 2, 6)
        level = await measure(middle)
        levels.append(level)
        if level.passed:
            low, last_pass = middle, level
        else:
            high = middle
    return last_pass, levels


def completion_body(model: str, prompt: str, output_tokens: int, stream: bool = True) -> dict:
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": output_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


class _Sweep:
    """State shared by the levels of one sweep: the session, the model, the spec and the run's salt."""

    def __init__(self, session, base_url: str, model: str, spec: ThroughputCheckSpec, salt: str):
        self.session, self.base_url, self.model, self.spec, self.salt = session, base_url, model, spec, salt
        self.tokenizer = workload.Tokenizer(session, base_url)

    async def measure(self, rps: float) -> LevelResult:
        load = self.spec.workload
        arrivals = workload.level_arrivals(
            rps, load.seed, load.duration_s, load.num_prompts, load.min_requests, load.warmup_s
        )
        plan = await workload.build_workload(
            self.tokenizer,
            arrivals,
            load.input_tokens,
            load.output_tokens,
            load.cache_hit_rate,
            seed=load.seed,
            salt=f"{self.salt}-{rps}",
        )
        await self._prime(plan.primers or ["warm up"])
        planned = [
            loadgen.Planned(
                item.index,
                item.send_at_s,
                "/v1/completions",
                json.dumps(completion_body(self.model, item.prompt, item.output_tokens)).encode(),
            )
            for item in plan.requests
        ]
        drain_s = max(MIN_DRAIN_S, load.duration_s or 0.0)
        records, lag = await loadgen.run_schedule(
            self.session, self.base_url, planned, drain_s, max_concurrency=load.max_concurrency
        )
        measured = [record for record in records if record.scheduled_s >= load.warmup_s]
        figures = metrics.summarize(measured, load.warmup_s, self.spec.slo.percentile)
        figures["exact_input_lengths"] = plan.exact_lengths
        passed, reasons = judge_level(figures, len(measured), self.spec.slo)
        return LevelResult(
            rps, len(measured), passed, reasons, figures, lag.summary(), request_failures.of_records(measured)
        )

    async def _prime(self, prompts: list[str]) -> None:
        """One short request per shared prefix, so the cache holds it before the measured requests."""
        for prompt in prompts:
            body = completion_body(self.model, prompt, 1, stream=False)
            try:
                async with self.session.post(f"{self.base_url}/v1/completions", json=body) as response:
                    await response.read()
            except (OSError, aiohttp.ClientError):
                continue  # the level itself will record the failures with their reasons


def run_throughput(
    base_url: str,
    spec: ThroughputCheckSpec,
    nodes: int = 1,
    on_level: Callable[[LevelResult], None] | None = None,
) -> ThroughputResult:
    """Sweep `spec.rps` against `base_url` and return every level, the knee and the per-node figure."""
    return asyncio.run(_run_throughput(base_url.rstrip("/"), spec, nodes, on_level))


async def _run_throughput(base_url, spec, nodes, on_level) -> ThroughputResult:
    peak_requests = _peak_requests(spec)
    async with loadgen.make_session(peak_requests) as session:
        model_id = await loadgen.resolve_model(session, base_url, None)
        sweep = _Sweep(session, base_url, model_id, spec, salt=str(time.time_ns()))

        async def measure(rps: float) -> LevelResult:
            level = await sweep.measure(rps)
            if on_level is not None:
                on_level(level)
            return level

        knee, levels = await find_knee(spec.rps, spec.bisect_steps, measure)
    target = absolute(spec.target_tok_s_per_node)
    return ThroughputResult.of(
        levels, knee, slo=spec.slo, nodes=nodes, metric=spec.metric, target_tok_s_per_node=target, model=model_id
    )


def _peak_requests(spec: ThroughputCheckSpec) -> int:
    """Connections to keep: every request of the busiest level may be in flight at once."""
    load = spec.workload
    by_duration = max(spec.rps) * load.duration_s * 1.5 + 16 if load.duration_s else math.inf
    return int(min(by_duration, load.num_prompts or math.inf, 8192))


def run_single_stream(
    base_url: str, spec: SingleStreamSpec, on_progress: OnProgress | None = None
) -> SingleStreamResult:
    """Output tokens/s after the first token, one request at a time; the median of `spec.num_requests`."""
    return asyncio.run(_run_single_stream(base_url.rstrip("/"), spec, on_progress))


async def _run_single_stream(base_url: str, spec: SingleStreamSpec, on_progress) -> SingleStreamResult:
    async with loadgen.make_session(1) as session:
        model_id = await loadgen.resolve_model(session, base_url, None)
        tokenizer = workload.Tokenizer(session, base_url)
        records: list[loadgen.RequestRecord] = []
        finished = Tally(spec.num_requests, "requests", on_progress, lambda done, _: _request_note(records[-1]))
        for index in range(spec.num_requests):
            generator = random.Random(f"single-{index}")  # the same text every run: speed depends on content
            marker = workload.level_marker(f"single-{time.time_ns()}-{index}")
            prompt, _ = await workload.text_of_length(tokenizer, spec.input_tokens, generator, lead=marker)
            body = json.dumps(completion_body(model_id, prompt, spec.output_tokens)).encode()
            planned = [loadgen.Planned(index, 0.0, "/v1/completions", body)]
            batch, _ = await loadgen.run_schedule(session, base_url, planned, SINGLE_REQUEST_TIMEOUT_S)
            records += batch
            finished.add()
    speeds = [speed for speed in map(_output_speed, records) if speed is not None]
    ttfts = [record.ttft_s * 1000 for record in records if record.ok]
    return SingleStreamResult(
        output_tok_s=statistics.median(speeds) if speeds else 0.0,
        per_request_tok_s=speeds,
        median_ttft_ms=statistics.median(ttfts) if ttfts else None,
        completed=sum(1 for record in records if record.ok),
        errors=sum(1 for record in records if record.error),
        target_output_tok_s=absolute(spec.target_output_tok_s),
        model=model_id,
        failures=request_failures.of_records(records),
    )


def _output_speed(record: loadgen.RequestRecord) -> float | None:
    """Output tokens per second after the first token; None for a request that gave no such figure."""
    if not record.ok or record.output_tokens <= 1 or record.end_s <= record.first_token_s:
        return None
    return (record.output_tokens - 1) / (record.end_s - record.first_token_s)


def _request_note(record: loadgen.RequestRecord) -> str:
    speed = _output_speed(record)
    return f"last request {speed:,.1f} output tok/s" if speed is not None else f"last request failed: {record.error}"
