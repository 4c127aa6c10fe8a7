"""The accept rules, in code: what porter keeps and what it reverts.

A pending change (source diffs and flag changes since the last accept) is kept when it moves the run
forward: the crash class of the accepted configuration is gone, or a throughput / single-stream figure
improved beyond noise with every quality check within tolerance. Evidence against it reverts it, and the
model is told why; missing evidence is a ToolError that says what to measure. A source fix that got a
crash past its class while the new flags still crash is kept without the flags, so the accepted
configuration always stays one that served. Does not run the loop or talk to the model.
"""

from __future__ import annotations

import json

from porter.repos import commit_message
from porter.run_context import RunContext, ToolError
from porter.serve import Launch
from porter.state import IMPROVEMENT_MARGIN, PERF_METRICS, Evidence, all_targets_met, improvement, target_report


def record_serve(ctx: RunContext, launch: Launch) -> dict:
    """Store a start-up outcome as evidence of the configuration it ran."""
    triage = launch.triage
    record = {
        "healthy": launch.healthy,
        "crash_class": launch.crash_class,
        "signature": triage.signature if triage else None,
        "key_line": triage.key_line if triage else None,
        "seconds": round(launch.seconds, 2),
        "log": str(launch.log_path.relative_to(ctx.run_dir)),
        "fingerprint": ctx.server_fingerprint,
        "findings": [finding_dict(f) for f in (triage.findings if triage else [])],
    }
    if ctx.is_pending():
        ctx.state.pending.serve = record
        if not launch.healthy and ctx.state.pending.first_crash is None:
            ctx.state.pending.first_crash = launch.crash_class
            ctx.state.pending.first_crash_serve = record
    else:
        ctx.state.accepted.serve = record
    return record


def finding_dict(finding) -> dict:
    return {
        "category": finding.category,
        "key_line": finding.key_line,
        "implicated": finding.implicated,
        "confidence": finding.confidence,
        "facts": finding.facts,
    }


def headline_metrics(checks: dict[str, dict]) -> dict[str, float | None]:
    """The one figure per check that the timeline shows."""
    headline = {kind: (checks.get(kind) or {}).get(metric) for kind, metric in PERF_METRICS.items() if kind in checks}
    headline.update({key: result.get("score") for key, result in checks.items() if key.startswith("quality:")})
    return headline


def describe_check(key: str, result: dict) -> str:
    if key == "throughput":
        return (
            f"throughput: knee {result.get('knee_rps')} RPS, {result.get('total_tok_s_per_node')} total tok/s/node "
            f"(target met: {result.get('meets_target')})"
        )
    if key == "single_stream":
        return f"single stream: {result.get('output_tok_s')} output tok/s (target met: {result.get('meets_target')})"
    return (
        f"{key}: {result.get('score')} (95% CI {result.get('ci_low')}-{result.get('ci_high')}, n={result.get('n')}) "
        f"passed: {result.get('passed')}"
    )


def accept(ctx: RunContext, summary: str, why: str) -> dict:
    if not ctx.is_pending():
        raise ToolError("there is no pending change to accept (no diff, no flag change)")
    current = ctx.fingerprint()
    serve_record = ctx.state.pending.serve
    if not serve_record or serve_record.get("fingerprint") != current:
        raise ToolError("the pending change has not been served as it is now; call serve, then accept")
    accepted_crash = _crash_of(ctx.state.accepted)
    if not serve_record["healthy"]:
        return _accept_past_crash(ctx, summary, why, accepted_crash, serve_record)
    _ensure_quality(ctx, current)
    failed = [key for key, result in _quality(ctx.state.pending, current).items() if not result.get("passed")]
    if failed:
        return revert(ctx, reason=f"quality below the bar: {', '.join(failed)}; the change is not kept")
    if accepted_crash:
        return _keep(ctx, summary, why, f"{accepted_crash} is gone: the server now starts", flags_too=True)
    return _accept_improvement(ctx, summary, why, current)


def _accept_past_crash(ctx, summary, why, accepted_crash, serve_record) -> dict:
    before = accepted_crash or ctx.state.pending.first_crash
    after = serve_record["crash_class"]
    if before is None or before == after:
        return revert(ctx, reason=f"the server still fails with {after}; nothing moved forward")
    evidence = f"{before} is gone; the server now stops later, at {after}"
    # Flags that crash are only kept if the accepted configuration crashed anyway.
    return _keep(ctx, summary, why, evidence, flags_too=accepted_crash is not None)


def _accept_improvement(ctx, summary, why, current) -> dict:
    changes = {}
    for kind in PERF_METRICS:
        after = ctx.state.pending.checks.get(kind)
        if after and after.get("fingerprint") == current:
            changes[kind] = improvement(kind, ctx.state.accepted.checks.get(kind), after)
    if not changes:
        raise ToolError("no throughput or single_stream result for the pending change; run_check one, then accept")
    if any(change is None for change in changes.values()):
        missing = [kind for kind, change in changes.items() if change is None]
        raise ToolError(
            f"no {missing} measurement of the accepted configuration to compare with: revert, serve, "
            "run_check it, then redo the change"
        )
    worse = {kind: change for kind, change in changes.items() if change < -IMPROVEMENT_MARGIN}
    better = {kind: change for kind, change in changes.items() if change > IMPROVEMENT_MARGIN}
    if worse or not better:
        shown = ", ".join(f"{kind} {change:+.1%}" for kind, change in changes.items())
        return revert(ctx, reason=f"no improvement beyond the {IMPROVEMENT_MARGIN:.0%} noise margin ({shown})")
    evidence = "; ".join(_before_after(ctx, kind) for kind in better)
    return _keep(ctx, summary, why, evidence, flags_too=True)


def _before_after(ctx: RunContext, kind: str) -> str:
    metric = PERF_METRICS[kind]
    before, after = ctx.state.accepted.checks[kind][metric], ctx.state.pending.checks[kind][metric]
    return f"{kind} {metric}: {before:.1f} -> {after:.1f} ({after / before - 1:+.1%})"


def _ensure_quality(ctx: RunContext, fingerprint: str) -> None:
    if ctx.task.checks.quality and len(_quality(ctx.state.pending, fingerprint)) < len(ctx.task.checks.quality):
        ctx.run_check("quality")


def _quality(evidence: Evidence, fingerprint: str) -> dict[str, dict]:
    return {
        key: result
        for key, result in evidence.checks.items()
        if key.startswith("quality:") and result.get("fingerprint") == fingerprint
    }


def _crash_of(evidence: Evidence) -> str | None:
    return None if not evidence.serve or evidence.serve.get("healthy") else evidence.serve.get("crash_class")


def _keep(ctx: RunContext, summary: str, why: str, evidence: str, flags_too: bool) -> dict:
    state = ctx.state
    served = ctx.server_fingerprint is not None and ctx.server_fingerprint == ctx.fingerprint()
    flag_changes = {k: v for k, v in state.flags.items() if state.accepted_flags.get(k) != v}
    failed = _what_failed(ctx)
    crash = (state.pending.first_crash_serve or {}).get("crash_class") or _crash_of(state.accepted)
    commits = {}
    for name, repo in ctx.repos.items():
        if repo.is_dirty():
            files = ", ".join(repo.changed_files())
            changed = f"{files}" + (f"\nServe flags changed alongside: {flag_changes}" if flag_changes else "")
            message = commit_message(summary, failed, why or summary, changed, evidence)
            commits[name] = repo.accept(state.repos[name], message)
    if served:  # committing changes the fingerprint (HEAD moves), not what the running server was built from
        ctx.server_fingerprint = ctx.fingerprint()
    if flags_too:
        state.accepted_flags = dict(state.flags)
        state.accepted = Evidence(serve=state.pending.serve, checks={**state.accepted.checks, **state.pending.checks})
    kept_flags = flag_changes if flags_too else {}
    fingerprint = (state.pending.serve or {}).get("fingerprint")
    # A source fix kept without its flags leaves those flags pending, with no evidence yet.
    state.pending = Evidence()
    _attempt(ctx, summary, "kept", evidence, commits, kept_flags, crash=crash, fingerprint=fingerprint)
    ctx.transcript.record(
        "accept",
        step=state.step,
        summary=summary,
        evidence=evidence,
        commits=commits,
        flags=kept_flags,
        flags_kept=flags_too,
    )
    message = f"kept: {evidence}. Commits: {commits or 'none (flags only)'}; flags kept: {kept_flags or 'none'}."
    if not flags_too and flag_changes:
        message += f" The flag changes {flag_changes} stay pending until the server starts with them."
    solved = all_targets_met(ctx.task, state.accepted.checks) and not ctx.is_pending()
    return {
        "message": message,
        "kept": True,
        "commits": commits,
        "evidence": evidence,
        "all_targets_met": solved,
        "targets": target_report(ctx.task, state.accepted.checks),
    }


def _what_failed(ctx: RunContext) -> str:
    crash = ctx.state.pending.first_crash_serve or (
        None if _crash_of(ctx.state.accepted) is None else ctx.state.accepted.serve
    )
    if crash:
        return (
            f"The server failed to start: {crash['crash_class']}.\n    {crash.get('key_line')}\n(log: {crash['log']})"
        )
    rows = [row for row in target_report(ctx.task, ctx.state.accepted.checks) if not row["met"]]
    return "Below target: " + "; ".join(f"{row['target']} {_number(row['value'])} < {row['goal']}" for row in rows)


def _number(value) -> str:
    return f"{value:.1f}" if isinstance(value, float) else str(value)


def revert(ctx: RunContext, reason: str) -> dict:
    state = ctx.state
    files = {name: repo.revert() for name, repo in ctx.repos.items() if repo.is_dirty()}
    flag_changes = {k: v for k, v in state.flags.items() if state.accepted_flags.get(k) != v}
    state.flags = dict(state.accepted_flags)
    crash = state.pending.first_crash
    state.pending = Evidence()
    ctx.stop_server()
    _attempt(ctx, f"reverted: {reason}", "reverted", reason, {}, flag_changes, crash)
    ctx.transcript.record("revert", step=state.step, reason=reason, files=files, flags=flag_changes)
    message = (
        f"reverted ({reason}). Dropped the pending edits to: {files or 'none'}; dropped the flag values "
        f"{json.dumps(flag_changes) if flag_changes else 'none'} (flags are back to the accepted ones). "
        "The server was stopped; call serve before measuring again."
    )
    return {"message": message, "kept": False, "reason": reason, "files": files}


def _attempt(ctx, summary, outcome, evidence, commits, flags, crash=None, fingerprint=None) -> None:
    state = ctx.state
    state.attempts.append(
        {
            "step": state.step,
            "fingerprint": fingerprint,
            "summary": summary,
            "outcome": outcome,
            "evidence": evidence,
            "commits": commits,
            "flags": flags,
            "crash_class": crash,
            "cost_usd": round(state.cost_usd, 4),
            "tokens": state.tokens["input"] + state.tokens["output"],
            "metrics": headline_metrics(state.accepted.checks) if outcome == "kept" else {},
        }
    )
