"""The tools the model may call, each declared once (name, description, JSON schema, handler), and the dispatcher.

A handler returns a `Result`: the text the model reads, and the facts (a dict) that the playbook, replay and
the transcript read; the facts never enter the text. The dispatcher checks the arguments against the tool's
schema before the handler runs; a failure the tool declares (`ToolError`, a sandbox or check error, a file
error) becomes text saying what failed and what to do instead; any other exception is porter's own bug: its
traceback goes to `logs/porter-errors.log` in the run directory and the model is told an internal error
happened, and the run goes on. Nothing here ends the run except `finish`. The tools themselves: file_tools.py
(bash and the repos' files), serve_tools.py (flags, serve, logs, checks, tuning) and, here, accept, revert and finish
(the keep rules are ledger/decision.py's, applied by accepting.py).
"""

from __future__ import annotations

import contextlib
import json
import traceback
from typing import Any

import jsonschema

from porter.checks.loadgen import CheckError
from porter.errors import ToolError
from porter.ledger.state import TargetRow, target_report
from porter.loop import accepting, file_tools, observations, serve_tools  # noqa: F401 - importing them registers their tools, in this order
from porter.loop.run_context import RunContext
from porter.loop.toolbox import STRING, TOOLS, Finished, Result, Tool, ToolResult, tool, tool_specs  # noqa: F401 - the API
from porter.redaction import redact
from porter.sandbox import SandboxDied, SandboxError

# Failures a tool declares: their message is for the model. Anything else is a porter bug (logged with traceback).
TOOL_FAILURES = (ToolError, SandboxError, CheckError, OSError, UnicodeError)
STATUS_AFTER = {"run_check", "accept", "revert"}  # results that change what the targets say end with the status


def dispatch(ctx: RunContext, name: str, arguments: dict) -> ToolResult:
    """Run one tool call. Finished propagates; every other failure becomes a ToolResult with ok=False."""
    item = TOOLS.get(name)
    facts: dict = {}
    if item is None:
        ok, text = False, f"unknown tool {name!r}; the tools are {sorted(TOOLS)}"
    elif problem := argument_problem(item, arguments):
        ok, text = False, f"bad arguments for {name}: {problem}. Nothing was run; resend the call to match the schema."
    else:
        try:
            text, facts = item.handler(ctx, **arguments)
            ok = True
        except Finished:
            raise
        except SandboxDied as died:
            ok, text, facts = False, _recover(ctx, name, died), {"sandbox_died": True}
        except TOOL_FAILURES as exc:
            ok, text = False, f"{name} failed: {exc}"
        except Exception as exc:  # noqa: BLE001 - a porter bug must not end the run; it is logged with traceback
            ok, text, facts = False, _internal_error(ctx, name, arguments, exc), {"internal_error": type(exc).__name__}
    facts = {"tool": name, "ok": ok, **facts, "status": run_status(ctx, figures_of_pending=name in STATUS_AFTER)}
    if ok and name in STATUS_AFTER:
        text = f"{text}\n{observations.status(facts['status'], ctx.said)}"
    # As JSON sees them, and a copy: the status holds live dicts a later call in the same turn would change.
    return ToolResult(ok, text, json.loads(json.dumps(facts, default=_as_json)))


def _as_json(value: Any) -> Any:
    """What json.dumps cannot write itself: a target row as its dict, anything else as its text."""
    return value.to_dict() if isinstance(value, TargetRow) else str(value)


def argument_problem(item: Tool, arguments: Any) -> str | None:
    """The first way `arguments` breaks the tool's schema, said with where (None when they fit)."""
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(item.parameters).iter_errors(arguments))
    if error is None:
        return None
    where = "/".join(str(part) for part in error.absolute_path) or "the arguments"
    return f"{where}: {error.message}"


def _internal_error(ctx: RunContext, name: str, arguments: dict, exc: Exception) -> str:
    log = ctx.run_dir / "logs" / "porter-errors.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", encoding="utf-8") as out:
        out.write(redact(f"--- step {ctx.state.step}: {name} {arguments!r}\n{traceback.format_exc()}\n"))
    ctx.transcript.record("note", step=ctx.state.step, text=f"internal error in {name}: {exc!r}; see {log}")
    return (
        f"{name} failed with an internal error in porter ({type(exc).__name__}: {exc}); this is porter's bug, not "
        "your call's. It is logged for the maintainers. Check the state with a cheap call before relying on it, "
        "and try another way."
    )


def _recover(ctx: RunContext, name: str, died: SandboxDied) -> str:
    """A dead container is recreated with the same mounts: every patch lives on the host and survives."""
    ctx.server = None
    ctx.server_fingerprint = None
    ctx.transcript.record("note", step=ctx.state.step, text=f"sandbox died during {name}; restarting it")
    ctx.sandbox.restart()
    return (
        f"{name} failed: the sandbox died ({died}).\nporter recreated it; the repos and the pending change are "
        "intact, the server is stopped: call serve again."
    )


def run_status(ctx: RunContext, figures_of_pending: bool = False) -> dict:
    """The run's status; with `figures_of_pending`, each target also carries the pending change's own figure (its
    fingerprint hashes the trees: asked after a measuring call, not after every command)."""
    state = ctx.state
    pending = ctx.is_pending()
    fingerprint = None
    if pending and figures_of_pending:
        # a tree porter refuses to hash (too large, unsafe .git): the result already says so, the figures go unshown
        with contextlib.suppress(*TOOL_FAILURES):
            fingerprint = ctx.fingerprint()
    return {
        "phase": state.phase(),
        "pending": pending,
        "flags": state.flags,
        "flags_changed": {k: v for k, v in state.flags.items() if state.accepted_flags.get(k) != v},
        "server": _server_status(ctx),
        # beside each accepted figure, the pending change's own, once it has one
        "targets": target_report(ctx.task, state, pending=fingerprint),
        "accepted_checks": sorted(state.checks_on(state.accepted_config)),
    }


def _server_status(ctx: RunContext) -> str:
    if ctx.server is None:
        return "stopped"
    if not ctx.server.healthy:
        return f"crashed: {ctx.server.crash_class}"
    return "healthy" if ctx.server.process.alive() else "exited"


# ---------------------------------------------------------------- keeping and ending


@tool(
    "accept",
    "Keep the pending change (diffs + flags). porter checks the evidence; quality runs if needed.",
    {"summary": STRING, "why": STRING},
    ("summary",),
)
def accept(ctx: RunContext, summary: str, why: str = "") -> Result:
    outcome = accepting.accept(ctx, summary, why)
    return outcome["message"], outcome


@tool("revert", "Drop the pending change: repos back to the last accepted commit, flags back too.")
def revert(ctx: RunContext) -> Result:
    outcome = accepting.revert(ctx, reason="asked by the agent")
    return outcome["message"], outcome


@tool("finish", "End the run (targets met, or nothing more to try).", {"reason": STRING}, ("reason",))
def finish(ctx: RunContext, reason: str) -> Result:
    raise Finished(reason)
