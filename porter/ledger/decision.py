"""The keep-or-revert rules as pure functions: records in, a Decision out (which rule decided, and the margin).

A pending change (source diffs and flag changes since the last accept, possibly several moves stacked and
judged together) is kept when it moves the run forward, by evidence the agent's own edits cannot print:
- past a crash: only when the accepted configuration's own launch crashed too, and the change's crash is
  another and its start-up reached a later stage by the engine's own stage lines (a change that spells one
  of those lines itself gets no credit for it); a change that crashes where the accepted configuration
  started is never kept;
- a crash fix: a source change that turns a crash of the accepted trees (with the pending flags) into a
  healthy start is its own commit, whatever then becomes of the flags it unblocked;
- quality restored: a quality check that fails on the accepted configuration passes on the change, beyond
  both intervals, and no target the accepted configuration meets is lost beyond noise;
- a better figure: the median of the pending configuration's samples beats the median of the accepted
  configuration's samples on the same harness (two samples a side at least) by more than a bar derived from
  their measured spread (plus, for a figure read at a sweep's knee, 1.5 times the knee bracket the compared
  sweeps ran: ledger/noise.py says why; never below the task's minimum), with every quality check within
  tolerance. Another figure compared that got worse beyond its bar is a trade, kept only when each of its
  pending samples still meets its target.
A run whose speed targets are relative (as high as the budget allows) ends at a plateau: its last candidates, each
judged within noise of the accepted configuration (`plateau`).
Every Decision names its rule and states its margin. Measures nothing, serves nothing and commits nothing:
porter/loop/accepting.py gathers the evidence these functions read and applies what they decide.
"""

from __future__ import annotations

from porter.checks import registry
from porter.checks.quality import QualityResult
from porter.ledger import noise
from porter.ledger.records import Attempt, Decision, Sample, StartUp
from porter.ledger.state import RunState, TargetRow
from porter.task import Task


def past_crash(before: StartUp, after: StartUp, forged: list[str]) -> Decision:
    """A change that still crashes, where the accepted configuration crashed (`before`): kept only when its crash
    is another and start-up reached a later stage of the engine's own (`forged`: stages the change prints itself)."""
    if before.signature == after.signature:
        reason = f"the server still fails with {after.crash_class} (same signature {after.signature})"
        return Decision(False, "no_progress", reason)
    if forged:
        reason = (
            f"the change itself prints the engine's stage lines ({', '.join(forged)}): its log says nothing of how "
            "far start-up got, so the crash changing is not progress"
        )
        return Decision(False, "no_progress", reason)
    reached = f"stage {before.stage} -> {after.stage}: {_stages(before)} -> {_stages(after)}"
    if (after.stage or 0) <= (before.stage or 0):
        reason = (
            f"the crash changed ({before.crash_class} -> {after.crash_class}) but start-up did not get further "
            f"({reached}): not progress"
        )
        return Decision(False, "no_progress", reason)
    reason = (
        f"{before.crash_class} (signature {before.signature}) is gone; start-up now gets further by the engine's "
        f"own stages ({reached}) and stops at {after.crash_class}"
    )
    return Decision(True, "crash_progress", reason)


def _stages(record: StartUp) -> str:
    return ", ".join(record.stages) or "none"


def crash_fixed(crash: StartUp, healthy: StartUp) -> str:
    """The evidence of a crash fix: the crash the accepted trees had with these flags, then a healthy start."""
    return (
        f"with these flags the accepted tree crashed ({crash.crash_class}, {crash.log}: {crash.key_line}); "
        f"with the change it starts healthy in {healthy.seconds:.0f} s ({healthy.log})"
    )


def quality_restored(
    task: Task, accepted: dict[str, dict], pending: dict[str, dict], before: dict, after: dict
) -> Decision | None:
    """Quality checks that fail on the accepted configuration and pass on the change beyond both 95% intervals:
    kept unless a speed target the accepted configuration meets got worse beyond noise and misses it (speed
    figures are compared only where the change has them: none is demanded first). None when nothing was restored."""
    before_q = {key: QualityResult.from_dict(result) for key, result in accepted.items()}
    after_q = {key: QualityResult.from_dict(result) for key, result in pending.items()}
    restored = [
        key
        for key, was in before_q.items()
        if not was.passed and key in after_q and after_q[key].passed and (after_q[key].ci_low or 0) > (was.ci_high or 1)
    ]
    if not restored:
        return None
    shown = "; ".join(
        f"{key} {before_q[key].score:.3f} (95% CI {before_q[key].ci_low:.3f}-{before_q[key].ci_high:.3f}, failed) -> "
        f"{after_q[key].score:.3f} (95% CI {after_q[key].ci_low:.3f}-{after_q[key].ci_high:.3f}, passed)"
        for key in restored
    )
    others = "; ".join(
        f"{key} {before_q[key].score:.3f} -> {after_q[key].score:.3f}"
        for key in sorted(set(before_q) & set(after_q) - set(restored))
        if before_q[key].score is not None and after_q[key].score is not None
    )
    others = f"; the other quality checks pass on the change: {others}" if others else ""
    comparisons = compare(task, before, after)
    speed = "; ".join(c.describe() for c in comparisons)
    if missed := _missed(task, comparisons, after):
        reason = f"quality restored ({shown}), but {missed} got worse beyond noise and would miss its target: {speed}"
        return Decision(False, "loss", reason, comparisons=comparisons)
    kept = f"quality restored: {shown}, beyond both intervals{others}"
    kept += f"; speed on both sides: {speed}" if speed else ""
    return Decision(True, "quality_restored", kept, comparisons=comparisons)


def short_of(again: StartUp, accepted: StartUp | None) -> str | None:
    """How the change served with the accepted flags falls short of the accepted configuration (None: it does not)."""
    if again.healthy or accepted is None:
        return None
    if accepted.healthy:
        return f"no longer starts ({again.crash_class}), while the accepted configuration did"
    if (again.stage or 0) < (accepted.stage or 0):
        return f"stops earlier (stage {again.stage} < {accepted.stage}) than the accepted configuration"
    return None


def failed_quality(quality: dict[str, dict]) -> list[str]:
    """The quality checks (key -> latest result) that failed their bar."""
    return [key for key, result in quality.items() if not QualityResult.from_dict(result).passed]


def compare(task: Task, before: dict[str, list[Sample]], after: dict[str, list[Sample]]) -> list[noise.Comparison]:
    """Each speed figure measured on both sides (check key -> comparable samples), against its noise bar."""
    comparisons = []
    for key, pending in after.items():
        accepted = before.get(key) or []
        if not pending or not accepted:
            continue
        item = registry.by_key(task, key)
        # Sweeps quantise their knee: the bar adds the brackets the compared sweeps ran to the noise bound.
        resolution = noise.knee_resolution([s.result for s in accepted + pending])
        old, new = [s.value for s in accepted], [s.value for s in pending]
        metric = item.kind.headline(item.spec)
        comparisons.append(noise.compare(key, metric, old, new, task.checks.min_improvement, resolution=resolution))
    return comparisons


def improvement(task: Task, before: dict[str, list[Sample]], after: dict[str, list[Sample]]) -> Decision | None:
    """Compare each speed figure measured on both sides; None when no figure has samples on both sides. A gain
    beyond the bar keeps; a figure worse beyond its bar is a trade when each of its pending samples still meets
    its target, and reverts the change otherwise."""
    comparisons = compare(task, before, after)
    if not comparisons:
        return None
    shown = "; ".join(c.describe() for c in comparisons)
    if not any(c.better for c in comparisons):
        return Decision(False, "no_gain", f"no improvement beyond noise: {shown}", comparisons=comparisons)
    if missed := _missed(task, comparisons, after):
        reason = f"{missed} got worse beyond noise and would miss its target, against a gain elsewhere: {shown}"
        return Decision(False, "loss", reason, comparisons=comparisons)
    worse = [c for c in comparisons if c.worse]
    if worse:
        shown += ". Kept as a trade: " + "; ".join(
            f"{c.key} got worse ({c.change:+.1%}) but each of its {len(c.pending)} samples "
            f"({', '.join(f'{v:.4g}' for v in c.pending)}) still meets its target {_goal(task, c.key)}"
            for c in worse
        )
        return Decision(True, "trade", shown, comparisons=comparisons)
    return Decision(True, "gain", shown, comparisons=comparisons)


def _missed(task: Task, comparisons: list[noise.Comparison], after: dict[str, list[Sample]]) -> str:
    """The figures that got worse beyond noise and whose pending samples do not all meet their target, named with
    their change ("" when none did)."""
    missed = [c for c in comparisons if c.worse and not holds_target(task, c.key, after[c.key])]
    return " and ".join(f"{c.key} ({c.change:+.1%})" for c in missed)


def _goal(task: Task, key: str) -> object:
    item = registry.by_key(task, key)
    return item.kind.goal(item.spec)


def holds_target(task: Task, key: str, samples: list[Sample]) -> bool:
    """Whether every pending sample of a figure that got worse still meets its target (a trade that keeps it)."""
    item = registry.by_key(task, key)
    return all(item.kind.met(sample.result, item.spec) for sample in samples)


SPEED_RULES = ("gain", "trade", "loss", "no_gain")  # the rules that judge a candidate by its speed figures


def plateau(attempts: list[Attempt], candidates: int) -> list[Attempt] | None:
    """The last `candidates` candidates judged by their speed figures, when each was within noise of the accepted
    configuration: no figure better beyond its bar (rule no_gain) and none worse beyond it. None otherwise. A crash,
    a failed quality check or a revert the agent asked for says nothing of the figures, so it neither counts nor
    breaks the run of candidates."""
    judged = [attempt for attempt in attempts if attempt.rule in SPEED_RULES]
    last = judged[-candidates:]
    if len(last) < candidates:
        return None
    within = all(attempt.rule == "no_gain" and not any(c.worse for c in attempt.comparisons) for attempt in last)
    return last if within else None


def plateau_reason(task: Task, state: RunState, judged: list[Attempt], rows: list[TargetRow]) -> str:
    """The plateau and the best configuration with its evidence: its changes from the task's flags, its commits,
    and every target's median and samples measured on it."""
    changed = {k: v for k, v in state.accepted_flags.items() if task.serve.flags.get(k) != v}
    commits = [f"{name} {commit}" for attempt in state.kept_attempts() for name, commit in attempt.commits.items()]
    evidence = "; ".join(
        f"{row.target} {_figure(row.value)} (samples {', '.join(_figure(v) for v in row.samples)})" for row in rows
    )
    candidates = "; ".join(
        f"step {attempt.step} {'; '.join(attempt.moves) or attempt.summary}: "
        + ", ".join(f"{c.key} {c.change:+.1%}" for c in attempt.comparisons)
        for attempt in judged
    )
    flags = task.engine.describe_flags(changed) or "the task's flags"
    return (
        f"plateau: the last {len(judged)} candidates were each within noise of the accepted configuration "
        f"({candidates}). Best configuration {state.accepted_config}: {flags}; "
        f"commits: {', '.join(commits) or 'none'}; "
        f"measured on it: {evidence}"
    )


def _figure(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
