"""The accept rules, in code: what porter keeps and what it reverts, on same-configuration evidence.

A pending change (source diffs and flag changes since the last accept, possibly several moves stacked
and judged together) is kept when it moves the run forward:
- past a crash: the old crash signature is gone and start-up got further (a later stage in the log);
  a source fix kept without its still-crashing flags is first served with the accepted flags and
  must get at least as far as the accepted configuration did;
- a better figure: the median of the pending configuration's samples beats the median of the
  accepted configuration's samples on the same harness (two samples a side at least) by more than a
  bar derived from their measured spread (plus, for a figure read at a sweep's knee, 1.5 times the
  knee bracket the compared sweeps ran: porter.ledger.noise says why; never below the task's minimum), with
  every quality check within tolerance. Another figure compared that got worse beyond its bar is a
  trade, kept only when each of its pending samples still meets its target.
Before anything is kept, the sandbox's filesystem outside the declared trees must be unchanged. A revert
keeps the dropped edits as diffs in the run directory (reverted/), never as commits.
After a keep, porter re-measures the targets the new accepted configuration has no figure for, so the
next decision and the final verdict never rest on another configuration's numbers. Does not run the
loop or talk to the model.
"""

from __future__ import annotations

import json

from porter.checks import registry
from porter.engines.serve import Launch
from porter.engines.startup_stage import startup_stage
from porter.ledger import evidence, noise
from porter.ledger.state import Evidence, all_targets_met, target_report
from porter.loop import observations
from porter.loop.run_context import RunContext, ToolError
from porter.redaction import redact
from porter.sandbox import SandboxError
from porter.sandbox import foreign_changes as sandbox_diff
from porter.sandbox.trees.tracked import commit_message

REVERTED_DIFF_LIMIT = 1 << 20  # a reverted edit larger than this (a tree full of build output) is not kept
TOPOLOGY_FLAGS = {"tp", "dp", "tp-size", "dp-size", "tensor-parallel-size", "data-parallel-size", "enable-dp-attention"}


def serve_record(ctx: RunContext, launch: Launch) -> dict:
    triage = launch.triage
    return {
        "healthy": launch.healthy,
        "crash_class": launch.crash_class,
        "signature": triage.signature if triage else None,
        "key_line": triage.key_line if triage else None,
        "stage": None if launch.healthy else startup_stage(launch.log_path, triage.key_line_no if triage else None),
        "seconds": round(launch.seconds, 2),
        "log": str(launch.log_path.relative_to(ctx.run_dir)),
        "fingerprint": ctx.server_fingerprint,
        "findings": [finding_dict(f) for f in (triage.findings if triage else [])],
    }


def record_serve(ctx: RunContext, launch: Launch) -> dict:
    """Store a start-up outcome as evidence of the configuration it ran."""
    record = serve_record(ctx, launch)
    if ctx.is_pending():
        ctx.state.pending.serve = record
        if not launch.healthy and ctx.state.pending.first_crash is None:
            ctx.state.pending.first_crash = launch.crash_class
            ctx.state.pending.first_crash_serve = record
    else:
        ctx.state.accepted.serve = record
        evidence.sync_accepted(ctx)
    return record


def finding_dict(finding) -> dict:
    return {
        "category": finding.category,
        "key_line": finding.key_line,
        "implicated": finding.implicated,
        "confidence": finding.confidence,
        "facts": finding.facts,
    }


def headline_metrics(ctx: RunContext) -> dict[str, float | None]:
    """The one figure per check that the timeline shows: the medians on the accepted configuration."""
    return {row["key"]: row["value"] for row in target_report(ctx.task, ctx.state) if not row["stale"]}


def describe_check(key: str, result: dict) -> str:
    if key.startswith("quality:"):
        interval = f"95% CI {result.get('ci_low')}-{result.get('ci_high')}, n={result.get('n')}"
        return f"{key}: {result.get('score')} ({interval}) passed: {result.get('passed')}"
    last = f"knee {result.get('knee_rps')} RPS, " if key == "throughput" else ""
    metric = f"{result.get('metric')}_per_node" if key == "throughput" else "output_tok_s"
    return (
        f"{key}: {last}{metric} {_number(result.get(metric))} in this run; median {_number(result.get('median'))} "
        f"over {result.get('samples')} sample(s) of this configuration (target met by this run: "
        f"{result.get('meets_target')})"
    )


def accept(ctx: RunContext, summary: str, why: str) -> dict:
    if not ctx.is_pending():
        raise ToolError("there is no pending change to accept (no diff, no flag change)")
    current = ctx.fingerprint()
    served = ctx.state.pending.serve
    if not served or served.get("fingerprint") != current:
        raise ToolError("the pending change has not been served as it is now; call serve, then accept")
    foreign = sandbox_diff.foreign_changes(ctx)
    if foreign:
        raise ToolError(
            "accept refused: the sandbox changed outside the repos, where no patch, revert or fingerprint sees it:\n  "
            + "\n  ".join(foreign[:30])
            + "\nUndo these (a reinstall or edit outside the repos is not a change porter can keep), or make the "
            "change inside a declared repo; outputs the engine writes itself belong in sandbox.build_products."
        )
    accepted_crash = _crash_of(ctx.state.accepted)
    if not served["healthy"]:
        return _accept_past_crash(ctx, summary, why, accepted_crash, served)
    _ensure_quality(ctx, current)
    failed = [key for key, result in _quality(ctx, current).items() if not result.get("passed")]
    if failed:
        return revert(ctx, reason=f"quality below the bar: {', '.join(failed)}; the change is not kept")
    if accepted_crash:
        return _keep(ctx, summary, why, f"{accepted_crash} is gone: the server now starts", flags_too=True)
    return _accept_improvement(ctx, summary, why, current)


def _accept_past_crash(ctx: RunContext, summary: str, why: str, accepted_crash: str | None, served: dict) -> dict:
    before = ctx.state.accepted.serve if accepted_crash else ctx.state.pending.first_crash_serve
    verdict = crash_progress(before, served)
    if verdict:
        return revert(ctx, reason=verdict)
    text = (
        f"{before['crash_class']} (signature {before.get('signature')}) is gone; start-up now gets further "
        f"(stage {before.get('stage')} -> {served.get('stage')}) and stops at {served['crash_class']}"
    )
    if ctx.state.flags != ctx.state.accepted_flags:
        # The accepted flags must still get at least as far with the change: it is what would be committed.
        again = _serve_with_accepted_flags(ctx)
        shortfall = _short_of(again, ctx.state.accepted.serve) or _quality_short(ctx, again)
        if shortfall:
            return revert(ctx, reason=f"with the accepted flags the change {shortfall}")
        text += f"; served again with the accepted flags: {_outcome(again)}"
        if again["healthy"]:  # the source fix alone serves: keep it, the crashing flags stay pending
            ctx.state.accepted.serve = again
            return _keep(ctx, summary, why, text, flags_too=False)
    # Flags that crash are only kept if the accepted configuration crashed anyway.
    return _keep(ctx, summary, why, text, flags_too=accepted_crash is not None)


def _quality_short(ctx: RunContext, again: dict) -> str | None:
    """Quality of the change served with the accepted flags, measured before anything is committed."""
    if not again["healthy"] or not ctx.task.checks.quality:
        return None
    results = evidence.measure(ctx, "quality", config=again["fingerprint"])
    failed = [key for key, result in results.items() if not result.get("passed")]
    return f"starts but fails quality ({', '.join(failed)})" if failed else None


def crash_progress(before: dict | None, after: dict) -> str | None:
    """Why a crash is not progress over `before` (None when it is): same signature, or no later stage."""
    if before is None:
        return f"the server still fails with {after['crash_class']}; nothing moved forward"
    if before.get("signature") == after.get("signature"):
        return f"the server still fails with {after['crash_class']} (same signature {after.get('signature')})"
    if (after.get("stage") or 0) <= (before.get("stage") or 0):
        return (
            f"the crash changed ({before['crash_class']} -> {after['crash_class']}) but start-up did not get further "
            f"(stage {before.get('stage')} -> {after.get('stage')}): not progress"
        )
    return None


def _serve_with_accepted_flags(ctx: RunContext) -> dict:
    pending_flags = dict(ctx.state.flags)
    ctx.state.flags = dict(ctx.state.accepted_flags)
    try:
        launch = ctx.relaunch()
        record = serve_record(ctx, launch)
    finally:
        ctx.state.flags = pending_flags
    ctx.transcript.record("note", step=ctx.state.step, text=f"served with the accepted flags: {_outcome(record)}")
    return record


def _short_of(again: dict, accepted: dict | None) -> str | None:
    if again["healthy"] or not accepted:
        return None
    if accepted.get("healthy"):
        return f"no longer starts ({again['crash_class']}), while the accepted configuration did"
    if (again.get("stage") or 0) < (accepted.get("stage") or 0):
        return f"stops earlier (stage {again.get('stage')} < {accepted.get('stage')}) than the accepted configuration"
    return None


def _outcome(record: dict) -> str:
    return "healthy" if record["healthy"] else f"{record['crash_class']} at stage {record.get('stage')}"


def _accept_improvement(ctx: RunContext, summary: str, why: str, current: str) -> dict:
    accepted = evidence.sync_accepted(ctx)
    comparisons, missing = [], []
    for item in [d for d in registry.declared(ctx.task) if d.kind.performance]:
        pending = _samples(ctx, item, current)
        if not pending:
            continue
        if len(pending) < item.kind.min_samples:
            evidence.measure(ctx, item.kind.name, extra=item.kind.min_samples - len(pending))
            pending = _samples(ctx, item, current)
        before = _samples(ctx, item, accepted)
        if len(before) < item.kind.min_samples:
            missing.append(item.key)
            continue
        metric = item.kind.headline(item.spec)
        # Sweeps quantise their knee: the bar adds the brackets the compared sweeps ran to the noise bound.
        resolution = noise.knee_resolution([s["result"] for s in before + pending])
        old, new = [s["value"] for s in before], [s["value"] for s in pending]
        minimum = ctx.task.checks.min_improvement
        comparisons.append(noise.compare(item.key, metric, old, new, minimum, resolution=resolution))
    if not comparisons and not missing:
        raise ToolError("no throughput or single_stream result for the pending change; run_check one, then accept")
    if not comparisons:
        raise ToolError(
            f"the accepted configuration has fewer than two {missing} samples to compare with: revert, serve, "
            "run_check it, then redo the change"
        )
    shown = "; ".join(c.describe() for c in comparisons)
    if not any(c.better for c in comparisons):
        return revert(ctx, reason=f"no improvement beyond noise: {shown}", comparisons=comparisons)
    worse = [c for c in comparisons if c.worse]
    missed = [c for c in worse if not _holds_target(ctx, c.key, current)]
    if missed:
        names = " and ".join(f"{c.key} ({c.change:+.1%})" for c in missed)
        reason = f"{names} got worse beyond noise and would miss its target, against a gain elsewhere: {shown}"
        return revert(ctx, reason=reason, comparisons=comparisons)
    if worse:
        shown += ". Kept as a trade: " + "; ".join(
            f"{c.key} got worse ({c.change:+.1%}) but each of its {len(c.pending)} samples still meets its target"
            for c in worse
        )
    return _keep(ctx, summary, why, shown, flags_too=True, comparisons=comparisons)


def _holds_target(ctx: RunContext, key: str, config: str) -> bool:
    """Whether every pending sample of a figure that got worse still meets its target (a trade that keeps it)."""
    item = registry.by_key(ctx.task, key)
    return all(item.kind.met(sample["result"], item.spec) for sample in _samples(ctx, item, config))


def _samples(ctx: RunContext, item: registry.Declared, config: str | None) -> list[dict]:
    harness = evidence.harness(item)
    samples = ctx.state.samples_on(config, item.key)
    return [s for s in samples if s["harness"] == harness and s["value"] is not None]


def _ensure_quality(ctx: RunContext, fingerprint: str) -> None:
    if ctx.task.checks.quality and len(_quality(ctx, fingerprint)) < len(ctx.task.checks.quality):
        ctx.run_check("quality")


def _quality(ctx: RunContext, fingerprint: str) -> dict[str, dict]:
    return {key: result for key, result in ctx.state.checks_on(fingerprint).items() if key.startswith("quality:")}


def _crash_of(record: Evidence) -> str | None:
    return None if not record.serve or record.serve.get("healthy") else record.serve.get("crash_class")


def moves_of(ctx: RunContext, flags: bool = True) -> list[str]:
    """The moves a pending change stacks: each group of related flags (unless left out), each repo's edits."""
    state = ctx.state
    groups: dict[str, dict] = {}
    for flag, value in state.flags.items() if flags else ():
        if state.accepted_flags.get(flag) != value:
            group = "topology" if flag in TOPOLOGY_FLAGS else flag
            group = "speculative" if flag.startswith("speculative-") else group
            groups.setdefault(group, {})[flag] = value
    moves = [", ".join(f"--{k} {v}" for k, v in flags.items()) for flags in groups.values()]
    moves += [f"{name}: {', '.join(repo.changed_files())}" for name, repo in ctx.repos.items() if repo.is_dirty()]
    return moves


def _keep(ctx, summary, why, proof: str, flags_too: bool, comparisons=()) -> dict:
    state = ctx.state
    flag_changes = {k: v for k, v in state.flags.items() if state.accepted_flags.get(k) != v}
    moves = moves_of(ctx, flags=flags_too)
    if len(moves) > 1:
        proof += f". Judged as a stack of {len(moves)} moves, kept together: " + "; ".join(moves)
    failed = _what_failed(ctx)
    crash = (state.pending.first_crash_serve or {}).get("crash_class") or _crash_of(state.accepted)
    commits = {}
    for name, repo in ctx.repos.items():
        if repo.is_dirty():
            files = ", ".join(repo.changed_files())
            changed = f"{files}" + (f"\nServe flags changed alongside: {flag_changes}" if flag_changes else "")
            message = commit_message(summary, failed, why or summary, changed, proof)
            commits[name] = repo.accept(state.repos[name], message)
    if flags_too:
        state.accepted_flags = dict(state.flags)
        state.accepted = Evidence(serve=state.pending.serve)
    kept_flags = flag_changes if flags_too else {}
    fingerprint = (state.pending.serve or {}).get("fingerprint")
    # A source fix kept without its flags leaves those flags pending, with no evidence yet.
    state.pending = Evidence()
    evidence.sync_accepted(ctx)
    refreshed, refresh_error = _refresh(ctx)
    facts = {"comparisons": [c.to_dict() for c in comparisons], "moves": moves, "stack": len(moves) > 1}
    _attempt(ctx, summary, "kept", proof, commits, kept_flags, crash=crash, fingerprint=fingerprint, **facts)
    ctx.transcript.record(
        "accept", step=state.step, summary=summary, evidence=proof, commits=commits, flags=kept_flags,
        flags_kept=flags_too, refreshed=refreshed, **facts,
    )  # fmt: skip
    message = f"kept: {proof}. Commits: {commits or 'none (flags only)'}; flags kept: {kept_flags or 'none'}."
    quality = _quality(ctx, fingerprint) if fingerprint else {}
    if quality:
        shown = "; ".join(observations.quality(key, result) for key, result in quality.items())
        message += f" Quality on this configuration, measured before keeping it: {shown}."
    if not flags_too and flag_changes:
        message += f" The flag changes {flag_changes} stay pending until the server starts with them."
    if refreshed:
        message += f" Re-measured on the accepted configuration (their figures were another's): {refreshed}."
    if refresh_error:
        message += f" Re-measuring the stale targets failed: {refresh_error}"
    return {
        "message": message,
        "kept": True,
        "commits": commits,
        "evidence": proof,
        "refreshed": refreshed,
        "all_targets_met": all_targets_met(ctx.task, state) and not ctx.is_pending(),
        "targets": target_report(ctx.task, state),
        **facts,
    }


def _refresh(ctx: RunContext) -> tuple[list[str], str | None]:
    try:
        return evidence.refresh_stale(ctx), None
    except (ToolError, SandboxError) as exc:
        return [], str(exc)


def confirm_targets(ctx: RunContext) -> bool:
    """Solved only on the accepted configuration's own figures: stale targets are re-measured first."""
    state = ctx.state
    if ctx.is_pending() or not all_targets_met(ctx.task, state, allow_stale=True):
        return False
    if all_targets_met(ctx.task, state):
        return True
    try:
        if ctx.server is None or ctx.server_fingerprint != evidence.sync_accepted(ctx):
            record_serve(ctx, ctx.relaunch())
        refreshed = evidence.refresh_stale(ctx)
    except (ToolError, SandboxError) as exc:
        ctx.transcript.record("note", step=state.step, text=f"could not re-measure the stale targets: {exc}")
        return False
    ctx.transcript.record("note", step=state.step, text=f"re-measured stale targets before finishing: {refreshed}")
    return all_targets_met(ctx.task, state)


def _what_failed(ctx: RunContext) -> str:
    crash = ctx.state.pending.first_crash_serve or (
        None if _crash_of(ctx.state.accepted) is None else ctx.state.accepted.serve
    )
    if crash:
        return (
            f"The server failed to start: {crash['crash_class']}.\n    {crash.get('key_line')}\n(log: {crash['log']})"
        )
    rows = [row for row in target_report(ctx.task, ctx.state) if not row["met"]]
    return "Below target: " + "; ".join(f"{row['target']} {_number(row['value'])} < {row['goal']}" for row in rows)


def _number(value) -> str:
    return f"{value:.1f}" if isinstance(value, float) else str(value)


def revert(ctx: RunContext, reason: str, comparisons=()) -> dict:
    state = ctx.state
    moves = moves_of(ctx)
    dirty = {name: repo for name, repo in ctx.repos.items() if repo.is_dirty()}
    saved = {name: _keep_reverted_diff(ctx, name, repo) for name, repo in dirty.items()}
    files = {name: repo.revert() for name, repo in dirty.items()}
    flag_changes = {k: v for k, v in state.flags.items() if state.accepted_flags.get(k) != v}
    state.flags = dict(state.accepted_flags)
    crash = state.pending.first_crash
    state.pending = Evidence()
    ctx.stop_server()
    facts = {"comparisons": [c.to_dict() for c in comparisons], "moves": moves, "stack": len(moves) > 1}
    facts["reverted_diffs"] = {name: path for name, path in saved.items() if path}
    _attempt(ctx, f"reverted: {reason}", "reverted", reason, {}, flag_changes, crash, **facts)
    ctx.transcript.record("revert", step=state.step, reason=reason, files=files, flags=flag_changes, **facts)
    message = (
        f"reverted ({reason}). Dropped the pending edits to: {files or 'none'}; dropped the flag values "
        f"{json.dumps(flag_changes) if flag_changes else 'none'} (flags are back to the accepted ones). "
        "The server was stopped; call serve before measuring again."
    )
    if len(moves) > 1:
        message += f" The stack of {len(moves)} moves was judged together: {'; '.join(moves)}."
    if facts["reverted_diffs"]:
        shown = ", ".join(f"{name}: {path}" for name, path in facts["reverted_diffs"].items())
        message += f" The dropped edits are kept in the run as diffs, not commits ({shown})."
    return {"message": message, "kept": False, "reason": reason, "files": files, **facts}


def _keep_reverted_diff(ctx: RunContext, name: str, repo) -> str | None:
    """Keep a reverted edit in the run directory (reverted/step-NNN-REPO.diff, redacted), so that a fix that
    worked but was not kept (its flags brought no gain, say) is not lost; None when it is too large to keep."""
    diff = repo.bounded_diff(REVERTED_DIFF_LIMIT)
    if diff is None:
        return None
    path = ctx.run_dir / "reverted" / f"step-{ctx.state.step:03d}-{name}.diff"
    path.parent.mkdir(exist_ok=True)
    path.write_text(redact(diff.decode(errors="replace")))
    return str(path.relative_to(ctx.run_dir))


def _attempt(ctx, summary, outcome, proof, commits, flags, crash=None, fingerprint=None, **facts) -> None:
    state = ctx.state
    state.attempts.append(
        {
            "step": state.step,
            "fingerprint": fingerprint,
            "summary": summary,
            "outcome": outcome,
            "evidence": proof,
            "commits": commits,
            "flags": flags,
            "crash_class": crash,
            "cost_usd": round(state.cost_usd, 4),
            "tokens": state.tokens["input"] + state.tokens["output"],
            "metrics": headline_metrics(ctx) if outcome == "kept" else {},
            **facts,
        }
    )
