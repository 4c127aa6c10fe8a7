"""The one registry of check kinds: each kind owns its specs, its run, its headline metric and its target.

A kind (`throughput`, `single_stream`, `quality`) says which task specs it covers, how one of them is run
against a base URL, which figure of its result is the headline, whether higher or lower is better, how
many samples a keep decision needs, and what the target row shows. A new check (a latency SLO, say) is
a module of its own plus one entry here. Does not keep samples or decide anything (state.py,
accepting.py) and does not send requests itself (the check modules do).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from porter.task import QualityCheckSpec, SingleStreamSpec, Task, ThroughputCheckSpec


@dataclass(frozen=True)
class CheckKind:
    name: str
    description: str
    direction: str  # "higher" or "lower": which way is better for the headline
    min_samples: int  # samples a side before its headline may decide a keep
    specs: Callable[[Task], list[Any]]  # the task's specs of this kind (one result key each)
    key: Callable[[Any], str]  # result key of one spec: "throughput", "quality:gsm8k"
    run: Callable[[str, Any, Task], dict]  # base URL, spec, task -> the result as a dict
    headline: Callable[[Any], str]  # field of the result that is the headline figure
    goal: Callable[[Any], Any]  # the target's goal, as the report shows it
    met: Callable[[dict, Any], bool]  # does one result meet the spec's target
    label: Callable[[Any], str]  # the target's name in tables

    @property
    def performance(self) -> bool:
        """Kinds whose headline decides keeps by improvement (quality only gates)."""
        return self.min_samples > 1


def _run_throughput(base_url: str, spec: ThroughputCheckSpec, task: Task) -> dict:
    from porter.checks.throughput import run_throughput

    return run_throughput(base_url, spec, nodes=task.hardware.nodes).to_dict()


def _run_single_stream(base_url: str, spec: SingleStreamSpec, task: Task) -> dict:
    from porter.checks.throughput import run_single_stream

    return run_single_stream(base_url, spec).to_dict()


def _run_quality(base_url: str, spec: QualityCheckSpec, task: Task) -> dict:
    from porter.checks.quality import run_quality

    return run_quality(base_url, spec).to_dict()


def throughput_headline(spec: ThroughputCheckSpec) -> str:
    return f"{spec.metric}_per_node"


def _at_least(field: Callable[[Any], str], goal: Callable[[Any], float]) -> Callable[[dict, Any], bool]:
    def met(result: dict, spec: Any) -> bool:
        value = result.get(field(spec))
        return isinstance(value, int | float) and value >= goal(spec)

    return met


def _quality_goal(spec: QualityCheckSpec) -> Any:
    return spec.minimum if spec.minimum is not None else f"{spec.reference} - {spec.tolerance}"


KINDS: dict[str, CheckKind] = {
    "quality": CheckKind(
        name="quality",
        description="accuracy on a GSM8K-style or multiple-choice set, with a 95% interval, against its bar",
        direction="higher",
        min_samples=1,
        specs=lambda task: list(task.checks.quality),
        key=lambda spec: f"quality:{spec.name}",
        run=_run_quality,
        headline=lambda spec: "score",
        goal=_quality_goal,
        met=lambda result, spec: bool(result.get("passed")),
        label=lambda spec: f"quality {spec.name}",
    ),
    "single_stream": CheckKind(
        name="single_stream",
        description="output tok/s of one request at a time, after the first token (median of the requests)",
        direction="higher",
        min_samples=2,
        specs=lambda task: [task.checks.single_stream] if task.checks.single_stream else [],
        key=lambda spec: "single_stream",
        run=_run_single_stream,
        headline=lambda spec: "output_tok_s",
        goal=lambda spec: spec.target_output_tok_s,
        met=_at_least(lambda spec: "output_tok_s", lambda spec: spec.target_output_tok_s),
        label=lambda spec: "single stream (output tok/s)",
    ),
    "throughput": CheckKind(
        name="throughput",
        description="RPS sweep under a TTFT SLO; the knee and the target's metric per node there",
        direction="higher",
        min_samples=2,
        specs=lambda task: [task.checks.throughput] if task.checks.throughput else [],
        key=lambda spec: "throughput",
        run=_run_throughput,
        headline=throughput_headline,
        goal=lambda spec: spec.target_tok_s_per_node,
        met=_at_least(throughput_headline, lambda spec: spec.target_tok_s_per_node),
        label=lambda spec: f"throughput ({spec.metric.removesuffix('_throughput')} tok/s/node at knee)",
    ),
}


@dataclass(frozen=True)
class Declared:
    """One check the task declares: its kind, its spec and the key its results are kept under."""

    kind: CheckKind
    spec: Any
    key: str


def kind(name: str) -> CheckKind:
    if name not in KINDS:
        raise ValueError(f"unknown check {name!r}; the checks are {sorted(KINDS)}")
    return KINDS[name]


def declared(task: Task, kind_name: str | None = None) -> list[Declared]:
    """Every check the task declares (of one kind), in the registry's order."""
    kinds = [kind(kind_name)] if kind_name else list(KINDS.values())
    return [Declared(k, spec, k.key(spec)) for k in kinds for spec in k.specs(task)]


def by_key(task: Task, key: str) -> Declared:
    for item in declared(task):
        if item.key == key:
            return item
    raise ValueError(f"the task declares no check {key!r}")


def headline_value(item: Declared, result: dict | None) -> float | None:
    value = (result or {}).get(item.kind.headline(item.spec))
    return float(value) if isinstance(value, int | float) else None
