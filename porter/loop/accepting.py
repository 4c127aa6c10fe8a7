"""Accept and revert, applied: gather the evidence a decision needs, ask ledger/decision.py, then act on it.

Covers recording a start-up as evidence of the configuration it ran; `accept` (refusals first: nothing
pending, not served as it is, the sandbox changed outside the repos; then the evidence each rule reads:
quality measured when missing, speed samples topped up to the kind's minimum, a source fix served again
with the accepted flags) and its application: one commit per repo with a message a reviewer can act on,
the accepted flags and configuration moved, the stale targets re-measured, an attempt recorded; `revert`
(the dropped edits kept as diffs in the run's reverted/, never as commits); and deciding that a run ends: its
targets confirmed, or its relative targets at a plateau, said with the best configuration and its evidence.
The rules themselves are ledger/decision.py's. Does not run the loop or talk to the model.
"""

from __future__ import annotations

import json

from porter.checks import registry
from porter.engines.serve import Launch
from porter.engines.startup_stage import forged_stages, startup_stage
from porter.errors import ToolError
from porter.ledger import decision, evidence
from porter.ledger.records import RULES, Attempt, Decision, Side, StartUp
from porter.ledger.state import all_targets_met, target_report
from porter.loop import measuring, observations
from porter.loop.run_context import RunContext
from porter.redaction import redact
from porter.sandbox import SandboxError
from porter.sandbox.foreign_changes import foreign_changes
from porter.sandbox.trees.tracked import commit_message

REVERTED_DIFF_LIMIT = 1 << 20  # a reverted edit larger than this (a tree full of build output) is not kept


def start_up(ctx: RunContext, launch: Launch) -> StartUp:
    """A launch as the record a decision reads."""
    triage = launch.triage
    record = StartUp(
        healthy=launch.healthy,
        seconds=round(launch.seconds, 2),
        log=str(launch.log_path.relative_to(ctx.run_dir)),
        fingerprint=ctx.server_fingerprint,
        crash_class=launch.crash_class,
        signature=triage.signature if triage else None,
        key_line=triage.key_line if triage else None,
        findings=[finding_dict(f) for f in (triage.findings if triage else [])],
    )
    if not launch.healthy:
        key_line = triage.key_line_no if triage else None
        record.stage, record.stages = startup_stage(launch.log_path, ctx.task.engine, key_line)
    return record


def record_serve(ctx: RunContext, launch: Launch) -> StartUp:
    """Store a start-up outcome as evidence of the configuration it ran."""
    record = start_up(ctx, launch)
    if ctx.is_pending():
        ctx.state.pending.serve = record
        if not launch.healthy and ctx.state.pending.first_crash is None:
            ctx.state.pending.first_crash = record
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


def accept(ctx: RunContext, summary: str, why: str) -> dict:
    if not ctx.is_pending():
        raise ToolError("there is no pending change to accept (no diff, no flag change)")
    current = ctx.fingerprint()
    served = ctx.state.pending.serve
    if served is None or served.fingerprint != current:
        raise ToolError("the pending change has not been served as it is now; call serve, then accept")
    foreign = foreign_changes(ctx.sandbox, ctx.task, ctx.run_dir)
    if foreign:
        raise ToolError(
            "accept refused: the sandbox changed outside the repos, where no patch, revert or fingerprint sees it:\n  "
            + "\n  ".join(foreign[:30])
            + "\nUndo these (a reinstall or edit outside the repos is not a change porter can keep), or make the "
            "change inside a declared repo; outputs the engine writes itself belong in sandbox.build_products."
        )
    if not served.healthy and ctx.state.accepted.crash_class is None:
        for name, repo in ctx.repos.items():  # its words stay with the edits they describe, kept or not later
            if repo.is_dirty():
                ctx.state.pending.said.setdefault(name, [summary, why])
        raise ToolError(
            f"accept refused: the accepted configuration starts and the pending change does not ({served.crash_class});"
            " a change is kept past a crash only when the accepted configuration crashed too. The pending change is "
            "left as it is: fix the crash and serve, or revert."
        )
    baseline = ctx.state.accepted_config
    fix = None
    if served.healthy:
        _ensure_quality(ctx, current)  # a crash fix is kept only if the start it gives answers correctly
        if not decision.failed_quality(_quality(ctx, current)):
            fix = _commit_crash_fix(ctx, summary, why, served)
    verdict = _decide(ctx, served, current, baseline)
    if fix and not verdict.keep:
        verdict.reason += f". The crash fix stays kept, as its own commit ({fix})"
    if verdict.keep:
        return _keep(ctx, summary, why, verdict)
    return revert(ctx, reason=verdict.reason, verdict=verdict)


def _decide(ctx: RunContext, served: StartUp, current: str, baseline: str | None) -> Decision:
    accepted_crash = ctx.state.accepted.crash_class
    if not served.healthy:
        return _past_crash(ctx, served)
    _ensure_quality(ctx, current)
    failed = decision.failed_quality(_quality(ctx, current))
    if failed:
        return Decision(False, "quality_failed", f"quality below the bar: {', '.join(failed)}; the change is not kept")
    if accepted_crash:
        before = ctx.state.accepted.serve
        reason = f"{accepted_crash} (signature {before.signature}, {before.log}) is gone: the server now starts"
        return Decision(True, "crash_gone", reason)
    before, after, missing = _speed_samples(ctx, current, baseline, top_up=False)
    restored = decision.quality_restored(ctx.task, _quality(ctx, baseline), _quality(ctx, current), before, after)
    return restored or _improvement(ctx, current, baseline)


def _commit_crash_fix(ctx: RunContext, summary: str, why: str, served: StartUp) -> dict[str, str] | None:
    """A source change that turned a crash of the accepted trees (with the pending flags) into a healthy start is
    its own commit, before the flags it unblocked are judged: kept whatever becomes of them."""
    state, crash = ctx.state, ctx.state.pending.first_crash
    dirty = [name for name, repo in ctx.repos.items() if repo.is_dirty()]
    if crash is None or not dirty or state.flags == state.accepted_flags:
        return None
    seen, accepted = state.configs.get(crash.fingerprint), state.configs.get(state.accepted_config)
    if seen is None or accepted is None or seen.repos != accepted.repos or seen.flags != dict(state.flags):
        return None  # the crash came from the pending edits themselves, or from other flags: no evidence of a fix
    proof = decision.crash_fixed(crash, served)
    commits = _commit(ctx, summary, why, _what_failed(ctx), proof)  # what failed: the crash just fixed
    state.pending.first_crash = None
    ctx.mark_accepted()
    _attempt(
        ctx,
        f"fix {crash.crash_class}",
        "kept",
        proof,
        commits,
        {},
        crash=crash.crash_class,
        rule="crash_fix",
        fingerprint=served.fingerprint,
        moves=[f"{name}: fix" for name in dirty],
    )
    ctx.transcript.record(
        "accept",
        step=state.step,
        summary=f"fix {crash.crash_class}",
        evidence=proof,
        commits=commits,
        flags={},
        rule="crash_fix",
    )
    return commits


def _past_crash(ctx: RunContext, served: StartUp) -> Decision:
    printed = {stage for repo in ctx.repos.values() for stage in _forged(ctx, repo)}
    forged = [stage for stage, _ in ctx.task.engine.stages if stage in printed]  # in start-up order
    verdict = decision.past_crash(ctx.state.accepted.serve, served, forged)
    if not verdict.keep:
        return verdict
    if ctx.state.flags != ctx.state.accepted_flags:
        # The accepted flags must still get at least as far with the change: it is what would be committed.
        again = _serve_with_accepted_flags(ctx)
        shortfall = decision.short_of(again, ctx.state.accepted.serve) or _quality_short(ctx, again)
        if shortfall:
            return Decision(False, "no_progress", f"with the accepted flags the change {shortfall}")
        verdict.reason += f"; served again with the accepted flags: {again.outcome()}"
        if again.healthy:  # the source fix alone serves: keep it, the crashing flags stay pending
            ctx.state.accepted.serve = again
            verdict.flags_too = False
            return verdict
    return verdict  # flags that crash are kept: the accepted configuration crashed anyway


def _forged(ctx: RunContext, repo) -> list[str]:
    diff = repo.bounded_diff(REVERTED_DIFF_LIMIT) if repo.is_dirty() else b""
    return forged_stages(ctx.task.engine, (diff or b"").decode(errors="replace"))


def _quality_short(ctx: RunContext, again: StartUp) -> str | None:
    """Quality of the change served with the accepted flags, measured before anything is committed."""
    if not again.healthy or not ctx.task.checks.quality:
        return None
    failed = decision.failed_quality(measuring.measure(ctx, "quality", config=again.fingerprint))
    return f"starts but fails quality ({', '.join(failed)})" if failed else None


def _serve_with_accepted_flags(ctx: RunContext) -> StartUp:
    pending_flags = dict(ctx.state.flags)
    ctx.state.flags = dict(ctx.state.accepted_flags)
    try:
        record = start_up(ctx, ctx.relaunch())
    finally:
        ctx.state.flags = pending_flags
    ctx.transcript.record("note", step=ctx.state.step, text=f"served with the accepted flags: {record.outcome()}")
    return record


def _speed_samples(ctx: RunContext, current: str, baseline: str | None, top_up: bool) -> tuple[dict, dict, list]:
    """The speed figures measured on both sides (check key -> samples), topped up to the kind's minimum when asked,
    and the checks whose accepted side has too few samples."""
    before, after, missing = {}, {}, []
    for item in [d for d in registry.declared(ctx.task) if d.kind.performance]:
        pending = evidence.comparable(ctx.state, item, current)
        if not pending:
            continue
        if top_up and len(pending) < item.kind.min_samples:
            measuring.measure(ctx, item.kind.name, extra=item.kind.min_samples - len(pending))
            pending = evidence.comparable(ctx.state, item, current)
        earlier = evidence.comparable(ctx.state, item, baseline)
        if len(earlier) < item.kind.min_samples or len(pending) < item.kind.min_samples:
            missing.append(item.key)
            continue
        before[item.key], after[item.key] = earlier, pending
    return before, after, missing


def _improvement(ctx: RunContext, current: str, baseline: str | None) -> Decision:
    before, after, missing = _speed_samples(ctx, current, baseline, top_up=True)
    verdict = decision.improvement(ctx.task, before, after)
    if verdict is None and not missing:
        raise ToolError("no throughput or single_stream result for the pending change; run_check one, then accept")
    if verdict is None:
        raise ToolError(
            f"the accepted configuration has fewer than two {missing} samples to compare with: revert, serve, "
            "run_check it, then redo the change"
        )
    return verdict


def _ensure_quality(ctx: RunContext, fingerprint: str) -> None:
    if ctx.task.checks.quality and len(_quality(ctx, fingerprint)) < len(ctx.task.checks.quality):
        measuring.measure(ctx, "quality")


def _quality(ctx: RunContext, fingerprint: str | None) -> dict[str, dict]:
    return {key: result for key, result in ctx.state.checks_on(fingerprint).items() if key.startswith("quality:")}


def moves_of(ctx: RunContext, flags: bool = True) -> list[str]:
    """The moves a pending change stacks: each group of related flags (unless left out), each repo's edits."""
    state = ctx.state
    groups: dict[str, dict] = {}
    for flag, value in state.flags.items() if flags else ():
        if state.accepted_flags.get(flag) != value:
            groups.setdefault(ctx.task.engine.group_of(flag), {})[flag] = value
    moves = [", ".join(f"--{k} {v}" for k, v in flags.items()) for flags in groups.values()]
    moves += [f"{name}: {', '.join(repo.changed_files())}" for name, repo in ctx.repos.items() if repo.is_dirty()]
    return moves


def _keep(ctx: RunContext, summary: str, why: str, verdict: Decision) -> dict:
    state = ctx.state
    flags_too, proof = verdict.flags_too, verdict.reason
    flag_changes = {k: v for k, v in state.flags.items() if state.accepted_flags.get(k) != v}
    moves = moves_of(ctx, flags=flags_too)
    if len(moves) > 1:
        proof += f". Judged as a stack of {len(moves)} moves, kept together: " + "; ".join(moves)
    crash = (state.pending.first_crash.crash_class if state.pending.first_crash else None) or state.accepted.crash_class
    alongside = f"\nServe flags changed alongside: {flag_changes}" if flag_changes else ""
    commits = _commit(ctx, summary, why, _what_failed(ctx), proof, alongside)
    if flags_too:
        state.accepted_flags = dict(state.flags)
        state.accepted = Side(serve=state.pending.serve)
    kept_flags = flag_changes if flags_too else {}
    fingerprint = state.pending.serve.fingerprint if state.pending.serve else None
    # A source fix kept without its flags leaves those flags pending, with no evidence yet.
    state.pending = Side()
    ctx.mark_accepted()
    refreshed, refresh_error = _refresh(ctx)
    compared = [c.to_dict() for c in verdict.comparisons]  # as the transcript and the tool result carry them
    facts = {"comparisons": compared, "moves": moves, "stack": len(moves) > 1, "rule": verdict.rule}
    kept = {**facts, "comparisons": verdict.comparisons}
    _attempt(ctx, summary, "kept", proof, commits, kept_flags, crash=crash, fingerprint=fingerprint, **kept)
    ctx.transcript.record(
        "accept", step=state.step, summary=summary, evidence=proof, commits=commits, flags=kept_flags,
        flags_kept=flags_too, refreshed=refreshed, **facts,
    )  # fmt: skip
    message = (
        f"kept by rule {verdict.rule} ({RULES[verdict.rule]}): {proof}. Commits: {commits or 'none (flags only)'};"
    )
    message += f" flags kept: {kept_flags or 'none'}."
    quality = _quality(ctx, fingerprint) if fingerprint else {}
    if quality:
        shown = "; ".join(observations.check(key, result, ctx.said) for key, result in quality.items())
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


def _commit(ctx: RunContext, summary: str, why: str, failed: str, proof: str, alongside: str = "") -> dict[str, str]:
    """One commit per repo with a pending edit, repo -> commit: all or nothing (a refusal in the second repo must not
    leave the first committed). The subject is the agent's own summary of that repo's edit, as a maintainer writes
    it; what failed and the evidence are in the body."""
    dirty = {name: repo for name, repo in ctx.repos.items() if repo.is_dirty()}
    for repo in dirty.values():
        repo.refuse_oversized(repo.changed_files())
    commits = {}
    for name, repo in dirty.items():
        subject, reason = ctx.state.pending.said.get(name, [summary, why])
        message = commit_message(subject, failed, reason or subject, ", ".join(repo.changed_files()) + alongside, proof)
        commits[name] = repo.accept(ctx.state.repos[name], message)
    return commits


def _refresh(ctx: RunContext) -> tuple[list[str], str | None]:
    try:
        return measuring.refresh_stale(ctx), None
    except (ToolError, SandboxError) as exc:
        return [], str(exc)


def confirm_targets(ctx: RunContext) -> str | None:
    """Why the run ends now, or None: every target met on the accepted configuration's own figures (stale targets
    re-measured first), or, with relative speed targets, a plateau (ledger/decision.py) with every other target met."""
    state = ctx.state
    if ctx.is_pending() or not all_targets_met(ctx.task, state, allow_stale=True):
        return None
    if not all_targets_met(ctx.task, state):
        try:
            if ctx.server is None or ctx.server_fingerprint != state.accepted_config:
                record_serve(ctx, ctx.relaunch())
            refreshed = measuring.refresh_stale(ctx)
        except (ToolError, SandboxError) as exc:
            ctx.transcript.record("note", step=state.step, text=f"could not re-measure the stale targets: {exc}")
            return None
        ctx.transcript.record("note", step=state.step, text=f"re-measured stale targets before finishing: {refreshed}")
        if not all_targets_met(ctx.task, state):
            return None
    rows = target_report(ctx.task, state)
    if not any(row.open for row in rows):  # a target with no goal to reach keeps the run going until its end
        return "every target is met by the accepted configuration"
    judged = decision.plateau(state.attempts, ctx.task.checks.plateau_candidates)
    return decision.plateau_reason(ctx.task, state, judged, rows) if judged else None


def _what_failed(ctx: RunContext) -> str:
    state = ctx.state
    crash = state.pending.first_crash or (state.accepted.serve if state.accepted.crash_class else None)
    if crash:
        return f"The server failed to start: {crash.crash_class}.\n    {crash.key_line}\n(log: {crash.log})"
    rows = [row for row in target_report(ctx.task, state) if not row.met or row.open]
    return "Below target: " + "; ".join(
        f"{row.target} {_number(row.value)}" + (f" < {row.goal}" if not row.open else f" ({row.goal})") for row in rows
    )


def _number(value) -> str:
    return f"{value:.1f}" if isinstance(value, float) else str(value)


def revert(ctx: RunContext, reason: str, verdict: Decision | None = None) -> dict:
    state = ctx.state
    moves = moves_of(ctx)
    dirty = {name: repo for name, repo in ctx.repos.items() if repo.is_dirty()}
    saved = {name: _keep_reverted_diff(ctx, name, repo) for name, repo in dirty.items()}
    files = {name: repo.revert() for name, repo in dirty.items()}
    flag_changes = {k: v for k, v in state.flags.items() if state.accepted_flags.get(k) != v}
    state.flags = dict(state.accepted_flags)
    crash = state.pending.first_crash.crash_class if state.pending.first_crash else None
    state.pending = Side()
    ctx.stop_server()
    ctx.mark_accepted()
    rule = verdict.rule if verdict else "asked"
    compared = verdict.comparisons if verdict else []
    facts = {"comparisons": [c.to_dict() for c in compared], "moves": moves, "stack": len(moves) > 1, "rule": rule}
    facts["reverted_diffs"] = kept_diffs = {name: path for name, path in saved.items() if path}
    _attempt(
        ctx, f"reverted: {reason}", "reverted", reason, {}, flag_changes, crash, **{**facts, "comparisons": compared}
    )
    ctx.transcript.record("revert", step=state.step, reason=reason, files=files, flags=flag_changes, **facts)
    message = (
        f"reverted by rule {rule} ({RULES[rule]}): {reason}. Dropped the pending edits to: {files or 'none'}; "
        "dropped the flag values "
        f"{json.dumps(flag_changes) if flag_changes else 'none'} (flags are back to the accepted ones). "
        "The server was stopped; call serve before measuring again."
    )
    if len(moves) > 1:
        message += f" The stack of {len(moves)} moves was judged together: {'; '.join(moves)}."
    if kept_diffs:
        shown = ", ".join(f"{name}: {path}" for name, path in kept_diffs.items())
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
    metrics = {row.key: row.value for row in target_report(ctx.task, state) if not row.stale}
    state.attempts.append(
        Attempt(
            step=state.step,
            summary=summary,
            outcome=outcome,
            evidence=proof,
            fingerprint=fingerprint,
            commits=commits,
            flags=flags,
            crash_class=crash,
            cost_usd=round(state.cost_usd, 4),
            tokens=state.tokens.input + state.tokens.output,
            metrics=metrics if outcome == "kept" else {},
            **facts,
        )
    )
