"""The one registry of check kinds: each kind is one declaration, and this module lists them.

A kind (`quality`, `single_stream`, `throughput`) declares, in its own module (checks/*_kind.py): its spec
(the model of its entry under the task's `checks:`), how one spec is run against a base URL, which figure of
its result is the headline and which way is better, how many samples a keep decision needs, its target
(goal, met, label), how a result reads for the model and the report, what the workload and the cost of one
run are in the prompt's words. Everything else reads the declaration: the task schema (`ChecksSpec` is
composed here from the kinds), `run_check`'s choices, the prompt, the observations, the report, the CLI.
A new check is a module of its own plus its name in KIND_MODULES. Does not keep samples or decide anything
(porter.ledger) and does not send requests itself (the check modules do).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from pydantic import Field, create_model

from porter.checks.kind import CheckKind, Task
from porter.schema import Spec

# The kinds, each one module of porter/checks declaring KIND, in the order they are measured and reported.
KIND_MODULES = ("quality_kind", "single_stream_kind", "throughput_kind")


def _load(module: str) -> CheckKind:
    return importlib.import_module(f"porter.checks.{module}").KIND


KINDS: dict[str, CheckKind] = {check.name: check for check in map(_load, KIND_MODULES)}


class _ChecksBase(Spec):
    min_improvement: float = Field(
        0.03, ge=0, lt=1, description="Smallest relative gain kept; the measured spread raises the bar above it."
    )
    plateau_candidates: int = Field(
        3,
        ge=1,
        description="With a relative speed target (as high as the budget allows), the run ends at a plateau: this many "
        "candidates in a row, each judged within noise of the accepted configuration (rule no_gain). Three: one such "
        "candidate can be a move that does nothing here; three in a row say the moves left are smaller than what the "
        "measurements resolve, and each costs a launch and repeated sweeps.",
    )


# The task's `checks:` section: one field per registered kind, and the keep rule's minimum gain.
ChecksSpec = create_model("ChecksSpec", __base__=_ChecksBase, **{name: check.field() for name, check in KINDS.items()})  # type: ignore[call-overload]


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


def kind_of(key: str) -> CheckKind:
    """The kind of a result key ("quality:gsm8k" -> quality)."""
    return kind(key.split(":", 1)[0])


def headline_value(item: Declared, result: dict | None) -> float | None:
    value = (result or {}).get(item.kind.headline(item.spec))
    return float(value) if isinstance(value, int | float) else None
