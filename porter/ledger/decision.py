"""The keep-or-revert rules as pure functions: records in, a Decision out (which rule decided, and the margin).

A pending change (source diffs and flag changes since the last accept, possibly several moves stacked and
judged together) is kept when it moves the run forward:
- past a crash: the old crash signature is gone and start-up got further (a later stage in the log); a
  source fix kept without its still-crashing flags must, served with the accepted flags, get at least as
  far as the accepted configuration did;
- a better figure: the median of the pending configuration's samples beats the median of the accepted
  configuration's samples on the same harness (two samples a side at least) by more than a bar derived from
  their measured spread (plus, for a figure read at a sweep's knee, 1.5 times the knee bracket the compared
  sweeps ran: ledger/noise.py says why; never below the task's minimum), with every quality check within
  tolerance. Another figure compared that got worse beyond its bar is a trade, kept only when each of its
  pending samples still meets its target.
Measures nothing, serves nothing and commits nothing: porter/loop/accepting.py gathers the evidence these
functions read and applies what they decide.
"""

from __future__ import annotations

from porter.checks import registry
from porter.ledger import noise
from porter.ledger.records import Decision, Sample, StartUp
from porter.task import Task


def past_crash(before: StartUp | None, after: StartUp) -> Decision:
    """A change that still crashes: kept only when its crash is another and start-up got further than `before`."""
    if before is None:
        return Decision(False, "no_progress", f"the server still fails with {after.crash_class}; nothing moved forward")
    if before.signature == after.signature:
        reason = f"the server still fails with {after.crash_class} (same signature {after.signature})"
        return Decision(False, "no_progress", reason)
    if (after.stage or 0) <= (before.stage or 0):
        reason = (
            f"the crash changed ({before.crash_class} -> {after.crash_class}) but start-up did not get further "
            f"(stage {before.stage} -> {after.stage}): not progress"
        )
        return Decision(False, "no_progress", reason)
    reason = (
        f"{before.crash_class} (signature {before.signature}) is gone; start-up now gets further "
        f"(stage {before.stage} -> {after.stage}) and stops at {after.crash_class}"
    )
    return Decision(True, "crash_progress", reason)


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
    return [key for key, result in quality.items() if not result.get("passed")]


def improvement(task: Task, before: dict[str, list[Sample]], after: dict[str, list[Sample]]) -> Decision | None:
    """Compare each speed figure measured on both sides (check key -> comparable samples); None when no figure
    has samples on both sides. A gain beyond the bar keeps; a figure worse beyond its bar is a trade when each
    of its pending samples still meets its target, and reverts the change otherwise."""
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
    if not comparisons:
        return None
    shown = "; ".join(c.describe() for c in comparisons)
    facts = [c.to_dict() for c in comparisons]
    if not any(c.better for c in comparisons):
        return Decision(False, "no_gain", f"no improvement beyond noise: {shown}", comparisons=facts)
    worse = [c for c in comparisons if c.worse]
    missed = [c for c in worse if not holds_target(task, c.key, after[c.key])]
    if missed:
        names = " and ".join(f"{c.key} ({c.change:+.1%})" for c in missed)
        reason = f"{names} got worse beyond noise and would miss its target, against a gain elsewhere: {shown}"
        return Decision(False, "loss", reason, comparisons=facts)
    if worse:
        shown += ". Kept as a trade: " + "; ".join(
            f"{c.key} got worse ({c.change:+.1%}) but each of its {len(c.pending)} samples still meets its target"
            for c in worse
        )
        return Decision(True, "trade", shown, comparisons=facts)
    return Decision(True, "gain", shown, comparisons=facts)


def holds_target(task: Task, key: str, samples: list[Sample]) -> bool:
    """Whether every pending sample of a figure that got worse still meets its target (a trade that keeps it)."""
    item = registry.by_key(task, key)
    return all(item.kind.met(sample.result, item.spec) for sample in samples)
