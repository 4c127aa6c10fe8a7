"""What a check kind declares, once: its spec, its run, its headline and target, how it reads, and how a PR shows it.

The declaration type (`CheckKind`) that each kind module (checks/*_kind.py) fills in, the progress a long check
reports as it goes (`CheckProgress`), and the small helpers those declarations share (a result document reads back
as its record through porter.ledger.records.read_record, as every record porter keeps does). The registry (registry.py)
lists the kinds; nothing here runs a check.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Protocol

from pydantic import AfterValidator, Field

from porter.engines.engine import BenchLoad
from porter.schema import Spec, reject_duplicates


class Task(Protocol):
    """What a check kind reads of a task (porter.task.Task is one): its `checks:` section and its hardware. Declared
    here so the checks never import the task schema, which is composed from them."""

    @property
    def checks(self) -> Any: ...

    @property
    def hardware(self) -> Any: ...


@dataclass(frozen=True)
class CheckProgress:
    """Part of a check done, for a person following it: `done` of `total` units (sweep levels, questions,
    requests) and what the latest ones showed. `total` is an upper bound when the check may stop early (a sweep
    stops climbing at its first failing rate)."""

    done: int
    total: int
    unit: str
    note: str
    bounded: bool = False  # `total` is the most it can take, not what it will


OnProgress = Callable[[CheckProgress], None]


class Tally:
    """A check's units (questions, requests) as they finish, told to `on_progress` every tenth and at the last."""

    def __init__(self, total: int, unit: str, on_progress: OnProgress | None, note: Callable[[int, int], str]):
        self.total, self.unit, self.on_progress, self.note = total, unit, on_progress, note  # note(done, right)
        self.done = self.right = 0
        self.every = max(1, -(-total // 10))

    def add(self, right: bool = False) -> None:
        self.done += 1
        self.right += right
        if self.on_progress and (self.done % self.every == 0 or self.done == self.total):
            self.on_progress(CheckProgress(self.done, self.total, self.unit, self.note(self.done, self.right)))


@dataclass(frozen=True)
class CheckKind:
    name: str  # its key under the task's `checks:`, and its run_check choice
    description: str  # one line for the model and `porter check --help`
    spec: type[Spec]  # the model of one entry
    many: bool  # a list of named entries (quality sets), or at most one
    direction: str  # "higher" or "lower": which way is better for the headline
    min_samples: int  # samples a side before its headline may decide a keep
    # base URL, spec, task, progress (None: nobody follows) -> the result document (bench_serving names)
    run: Callable[[str, Any, Task, OnProgress | None], dict]
    headline: Callable[[Any], str]  # field of the result that is the headline figure
    goal: Callable[[Any], Any]  # the target's goal, as the report shows it
    met: Callable[[dict, Any], bool]  # does one result meet the spec's target
    label: Callable[[Any], str]  # the target's name in tables
    render: Callable[[str, dict], str]  # result key, result -> what the model reads (and the report quotes)
    brief: Callable[[dict], str]  # result -> its headline in a few words, for the progress log
    workload: Callable[[Any], str]  # what one run sends, for the prompt
    cost: Callable[[Any, Task], str]  # what one run costs here, for the prompt
    # A relative target: a quality bar against the run's own first healthy configuration, or a speed figure with no
    # goal (as high as the budget allows). `anchored` fixes a relative reference at the value the run measured.
    relative: Callable[[Any], bool] = lambda spec: False
    anchored: Callable[[Any, float], Any] = lambda spec, reference: spec
    bench_load: Callable[[Any, dict], BenchLoad | None] = lambda spec, result: None  # a PR's benchmark client load
    accuracy: Callable[[str, dict, Any], str] | None = None  # key, result, spec -> a PR's accuracy line (None: none)

    @property
    def performance(self) -> bool:
        """Kinds whose headline decides keeps by improvement (quality only gates)."""
        return self.min_samples > 1

    def specs(self, task: Task) -> list[Any]:
        """The task's specs of this kind (one result key each)."""
        value = getattr(task.checks, self.name, None)
        return list(value) if self.many else ([value] if value is not None else [])

    def key(self, spec: Any) -> str:
        """The key its results are kept under: the kind's name, with the entry's name when it has many."""
        return f"{self.name}:{spec.name}" if self.many else self.name

    def field(self) -> tuple[Any, Any]:
        """Its entry in the task's `checks:` section, for pydantic."""
        if self.many:
            unique = AfterValidator(lambda specs: _unique(specs, self.name))
            return Annotated[list[self.spec], unique], Field(default_factory=list, description=self.description)
        return self.spec | None, Field(None, description=self.description)


def _unique(specs: list, kind_name: str) -> list:
    reject_duplicates([spec.name for spec in specs], f"{kind_name} check")
    return specs


def at_least(field: Callable[[Any], str], goal: Callable[[Any], float]) -> Callable[[dict, Any], bool]:
    """A `met` for a figure that must reach its goal."""

    def met(result: dict, spec: Any) -> bool:
        value, target = result.get(field(spec)), goal(spec)
        # a goal that is no figure (as high as the budget allows) is never reached: a run optimises it to the end
        return isinstance(value, int | float) and isinstance(target, int | float) and value >= target

    return met


def speed_goal(target: Any) -> Any:
    """A speed kind's goal: its figure, or what `max` means (as high as the budget allows)."""
    return "as high as the budget allows" if target == "max" else target


def goal_text(target: Any) -> Any:
    """A target as tables and prose show it: its figure (`:g`), or what a relative one means (speed_goal)."""
    target = speed_goal(target)
    return f"{target:g}" if isinstance(target, int | float) else target
