"""What a run knows between steps, and the task's targets read against the evidence it kept.

Covers the run state saved to `state.json` after every step (flags, accepted commits, the start-ups of
the accepted and the pending configuration, every check sample with the configuration it was measured
on, the attempts, spend), turned into JSON once, here, and the questions asked of it: which samples
belong to a configuration, their medians, and each target's value on the accepted configuration, marked
stale when the only figure is from another one. Does not run anything: the loop measures and applies,
ledger/decision.py decides.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from porter.checks import registry
from porter.errors import RunDirError
from porter.ledger.records import Attempt, Configuration, Reference, Sample, SetAside, Side, Tokens, read_record
from porter.ledger.transcript import read_state
from porter.sandbox.trees.tracked import RepoState
from porter.task import FlagValue, Task


@dataclass
class RunState:
    run_id: str
    task_path: str
    flags: dict[str, FlagValue]
    accepted_flags: dict[str, FlagValue]
    repos: dict[str, RepoState] = field(default_factory=dict)
    accepted: Side = field(default_factory=Side)
    pending: Side = field(default_factory=Side)
    samples: list[Sample] = field(default_factory=list)
    configs: dict[str, Configuration] = field(default_factory=dict)  # fingerprint -> what it is
    accepted_config: str | None = None  # fingerprint of the accepted configuration: set at start, keep, revert
    attempts: list[Attempt] = field(default_factory=list)
    step: int = 0
    relaunches: int = 0
    reduced_launches: int = 0  # of the relaunches, the engine's reduced start-ups (serve reduced)
    set_aside: SetAside | None = None  # while an earlier configuration runs in place: the flags and repos to put back
    reduced: dict[str, str] = field(default_factory=dict)  # fingerprint -> its reduced start-up: healthy or the crash
    server_s: float = 0.0  # seconds servers were up (start-up included), for server hours
    cost_usd: float = 0.0
    cost_known: bool = True
    tokens: Tokens = field(default_factory=Tokens)
    wall_s: float = 0.0  # wall time of earlier sessions of this run (resume adds to it)
    server_process: dict | None = None  # Process.record() of the running server: what resume must kill
    messages: list[dict] = field(default_factory=list)
    finished: str | None = None
    solved: bool = False
    fresh: bool = False  # --fresh: measure everything, reuse nothing from the cache
    # check key -> a relative quality bar's reference: the score of the first healthy accepted configuration
    # (anchor_references)
    references: dict[str, Reference] = field(default_factory=dict)

    def to_dict(self) -> dict:
        configs = {name: config.to_dict() for name, config in self.configs.items()}
        return {**asdict(self), "configs": configs, "attempts": [attempt.to_dict() for attempt in self.attempts]}

    @classmethod
    def from_dict(cls, data: dict) -> RunState:
        return read_record(
            cls,
            data,
            repos=lambda repos: {name: RepoState(**repo) for name, repo in repos.items()},
            accepted=Side.from_dict,
            pending=Side.from_dict,
            samples=lambda samples: [Sample.from_dict(sample) for sample in samples],
            configs=lambda configs: {name: Configuration.from_dict(config) for name, config in configs.items()},
            attempts=lambda attempts: [Attempt.from_dict(attempt) for attempt in attempts],
            tokens=Tokens.from_dict,
            set_aside=SetAside.from_dict,
            references=lambda references: {key: Reference.from_dict(value) for key, value in references.items()},
        )

    @classmethod
    def read(cls, run_dir) -> RunState:
        """The state of a run directory; a broken or foreign state.json is a RunDirError naming it."""
        data = read_state(run_dir)
        try:
            return cls.from_dict(data)
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise RunDirError(f"{run_dir}/state.json does not match this porter's run state: {exc}") from None

    def remember(self, config: Configuration) -> str:
        """Keep what a fingerprint stands for (the report and the cache read it); returns the fingerprint."""
        self.configs.setdefault(config.fingerprint, config)
        return config.fingerprint

    def phase(self) -> str:
        if self.accepted.serve is None or not self.accepted.serve.healthy:
            return "bring-up"
        if not self.samples_on(self.accepted_config):
            return "baseline"
        return "optimisation"

    def samples_on(self, config: str | None, key: str | None = None) -> list[Sample]:
        """Samples measured on one configuration (of one check), oldest first."""
        return [s for s in self.samples if s.config == config and (key is None or s.key == key)]

    def checks_on(self, config: str | None) -> dict[str, dict]:
        """The latest result of each check on one configuration, with its median and sample count."""
        latest: dict[str, dict] = {}
        for sample in self.samples_on(config):
            samples = self.samples_on(config, sample.key)
            counted = sum(s.value is not None for s in samples)
            latest[sample.key] = {**sample.result, "median": median_of(samples), "samples": counted}
        return latest

    @property
    def full_launches(self) -> int:
        """The launches that started a configuration of the run (a reduced one starts none)."""
        return self.relaunches - self.reduced_launches

    def kept_attempts(self) -> list[Attempt]:
        return [attempt for attempt in self.attempts if attempt.kept]


def median_of(samples: list[Sample]) -> float | None:
    values = [s.value for s in samples if s.value is not None]
    return statistics.median(values) if values else None


@dataclass
class TargetRow:
    """One target read against the evidence (target_report): its figure on the accepted configuration, or the
    latest from another one, marked stale and never met. As JSON (the status tool's result, the transcript) it is
    `to_dict`, the pending change's figure spelled pending_value / pending_met."""

    target: str  # the kind's label
    key: str
    metric: str
    goal: Any
    value: Any = None  # a speed's median, a score's latest
    met: bool = False
    stale: bool = False  # the figure is from another configuration (a target never measured is not stale)
    measured_on: str | None = None  # the configuration the figure is from
    samples: list = field(default_factory=list)
    cached: int = 0  # how many of the samples came from the measurement cache
    relative: bool = False
    open: bool = False  # no goal to reach: improved while the budget lasts
    pending: tuple[Any, bool | None] | None = None  # the pending change's (figure, would meet), when asked about

    def to_dict(self) -> dict:
        plain = asdict(self)
        if (pending := plain.pop("pending")) is not None:
            plain["pending_value"], plain["pending_met"] = pending
        return plain


def target_report(task: Task, state: RunState | None, pending: str | None = None) -> list[TargetRow]:
    """One row per target. Without a state (or an empty one) the rows carry the goals only. With the fingerprint of
    a `pending` change, a row also carries the change's own figure and whether it would meet the goal ((None, None)
    where the change has no figure for that target)."""
    rows = []
    for item in registry.declared(task):
        row = TargetRow(item.kind.label(item.spec), item.key, item.kind.headline(item.spec), item.kind.goal(item.spec))
        row.relative = item.kind.relative(item.spec)
        row.open = row.relative and item.kind.performance
        if isinstance(state, RunState):
            reference = state.references.get(item.key) if row.relative else None
            if reference:
                row.goal = item.kind.goal(item.kind.anchored(item.spec, reference.value))
            _fill(row, item, state)
            if pending and pending != state.accepted_config:
                row.pending = _judge(row, item, state.samples_on(pending, item.key))
        rows.append(row)
    return rows


def _fill(row: TargetRow, item: registry.Declared, state: RunState) -> None:
    fresh = state.samples_on(state.accepted_config, item.key)
    anywhere = [s for s in state.samples if s.key == item.key]
    if not anywhere:
        return
    measured = fresh or state.samples_on(anywhere[-1].config, item.key)  # stale: the latest other configuration
    row.measured_on = measured[-1].config
    row.stale = not fresh
    row.samples = [s.value for s in measured]
    row.cached = sum(1 for s in measured if s.cached)
    row.value, met = _judge(row, item, measured)
    row.met = not row.stale and bool(met)


def _judge(row: TargetRow, item: registry.Declared, measured: list[Sample]) -> tuple[Any, bool | None]:
    """(figure, goal reached) of one configuration's samples of a target: a speed's median, a score's latest;
    (None, None) without samples. An open target is reached by any figure: the best the run has."""
    if not measured:
        return None, None
    if item.kind.performance:
        value = median_of(measured)
        if value is None:
            return None, False
        return value, row.open or (isinstance(row.goal, int | float) and value >= row.goal)
    return measured[-1].value, item.kind.met(measured[-1].result, item.spec)


def all_targets_met(task: Task, state: RunState, allow_stale: bool = False) -> bool:
    """Every target met on the accepted configuration (with allow_stale: met by the latest figure anywhere)."""
    rows = target_report(task, state)
    return bool(rows) and all(_met_ignoring_staleness(task, row, state) if allow_stale else row.met for row in rows)


def _met_ignoring_staleness(task: Task, row: TargetRow, state: RunState) -> bool:
    if not row.stale:
        return row.met
    if row.open:
        return True  # measured somewhere: the re-measure on the accepted configuration gives its figure
    item = registry.by_key(task, row.key)
    latest = [s for s in state.samples if s.key == row.key][-1]
    return item.kind.met(latest.result, item.spec)


def anchor_references(task: Task, state: RunState) -> list[str]:
    """Fix each relative quality bar at its score on the accepted configuration, the first time that configuration
    started healthy and has the check's sample; returns the keys anchored now."""
    serve = state.accepted.serve
    if serve is None or not serve.healthy:
        return []
    anchored = []
    for item in registry.declared(task):
        if item.kind.performance or not item.kind.relative(item.spec) or item.key in state.references:
            continue
        samples = state.samples_on(state.accepted_config, item.key)
        if samples and samples[0].value is not None:
            state.references[item.key] = Reference(samples[0].value, state.accepted_config)
            anchored.append(item.key)
    return anchored
