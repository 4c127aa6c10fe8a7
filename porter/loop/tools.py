"""The tools the model may call, each declared once (name, description, JSON schema, handler), and the dispatcher.

A handler returns a `Result`: the text the model reads, and the facts (a dict) that the playbook, replay and
the transcript read; the facts never enter the text. The dispatcher checks the arguments against the tool's
schema before the handler runs; a failure the tool declares (`ToolError`, a sandbox or check error, a file
error) becomes text saying what failed and what to do instead; any other exception is porter's own bug: its
traceback goes to `logs/porter-errors.log` in the run directory and the model is told an internal error
happened, and the run goes on. Nothing here ends the run except `finish`. File tools only touch the declared
repos, through the host copies of the trees. The accept rules live in ledger/decision.py (applied by accepting.py);
checks run from the host.
"""

from __future__ import annotations

import difflib
import json
import re
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from porter.checks import registry
from porter.checks.loadgen import CheckError
from porter.engines import flag_rules, serve
from porter.errors import ToolError
from porter.ledger.state import target_report
from porter.loop import accepting, log_reader, observations
from porter.loop.run_context import RunContext
from porter.models import ToolSpec
from porter.redaction import redact
from porter.sandbox import SandboxDied, SandboxError
from porter.sandbox.guard import MAX_READ_BYTES, MAX_READ_MIB, refuse_patch
from porter.sandbox.trees import safe_git

Result = tuple[str, dict]  # what a handler returns: the text for the model, and the facts for programs
# Failures a tool declares: their message is for the model. Anything else is a porter bug (logged with traceback).
TOOL_FAILURES = (ToolError, SandboxError, CheckError, OSError, UnicodeError)
STATUS_AFTER = {"run_check", "accept", "revert"}  # results that change what the targets say end with the status


class Finished(Exception):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Tool:
    """One tool: what the model is told (name, description, schema) and what runs (handler)."""

    name: str
    description: str
    parameters: dict
    handler: Callable[..., Result]

    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.parameters)


@dataclass
class ToolResult:
    ok: bool
    text: str  # what the model reads
    facts: dict | None = field(default_factory=dict)  # for the playbook, replay and the transcript; never shown


TOOLS: dict[str, Tool] = {}


def tool(name: str, description: str, properties: dict[str, Any] | None = None, required: tuple[str, ...] = ()):
    """Register the decorated handler as the tool `name`; its schema is an object of `properties`."""
    schema = {"type": "object", "properties": properties or {}, "required": list(required)}
    schema["additionalProperties"] = False

    def register(handler: Callable[..., Result]) -> Callable[..., Result]:
        jsonschema.Draft202012Validator.check_schema(schema)
        TOOLS[name] = Tool(name, description, schema, handler)
        return handler

    return register


def tool_specs() -> list[ToolSpec]:
    return [item.spec() for item in TOOLS.values()]


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
    facts = {"tool": name, "ok": ok, **facts, "status": run_status(ctx)}
    if ok and name in STATUS_AFTER:
        text = f"{text}\n{observations.status(facts['status'])}"
    # As JSON sees them, and a copy: the status holds live dicts a later call in the same turn would change.
    return ToolResult(ok, text, json.loads(json.dumps(facts, default=str)))


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


_STR = {"type": "string"}


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


def run_status(ctx: RunContext) -> dict:
    state = ctx.state
    return {
        "phase": state.phase(),
        "pending": ctx.is_pending(),
        "flags": state.flags,
        "flags_changed": {k: v for k, v in state.flags.items() if state.accepted_flags.get(k) != v},
        "server": _server_status(ctx),
        "targets": target_report(ctx.task, state),
        "accepted_checks": sorted(state.checks_on(state.accepted_config)),
    }


def _server_status(ctx: RunContext) -> str:
    if ctx.server is None:
        return "stopped"
    if not ctx.server.healthy:
        return f"crashed: {ctx.server.crash_class}"
    return "healthy" if ctx.server.process.alive() else "exited"


# ---------------------------------------------------------------- sandbox and files


@tool(
    "bash",
    "Run a shell command in the sandbox (bash -lc). Output is capped (head + tail).",
    {"command": _STR, "timeout_s": {"type": "number"}},
    ("command",),
)
def bash(ctx: RunContext, command: str, timeout_s: float = 600) -> Result:
    result = ctx.sandbox.exec(command, timeout=min(float(timeout_s), 3600))
    status = "timed out (killed)" if result.timed_out else f"exit {result.exit_code}"
    return (
        f"{status} after {result.duration_s:.1f} s\n{result.output}",
        {"exit_code": result.exit_code, "timed_out": result.timed_out},
    )


@tool(
    "read_file",
    "Read a file of a declared repo (sandbox path), optionally a line range.",
    {"path": _STR, "start_line": {"type": "integer"}, "end_line": {"type": "integer"}},
    ("path",),
)
def read_file(ctx: RunContext, path: str, start_line: int | None = None, end_line: int | None = None) -> Result:
    host = ctx.host_path(path)
    if not host.is_file():
        raise ToolError(f"{path} does not exist (or is not a file) in repo {ctx.repo_of(path)!r}")
    lines = ctx.guard.read_text(path, cut=True).splitlines()  # bounded: a huge file ends in a note
    first, last = max(1, start_line or 1), min(len(lines), end_line or len(lines))
    numbered = "\n".join(f"{number:6d}  {lines[number - 1]}" for number in range(first, last + 1))
    return f"{path} lines {first}-{last} of {len(lines)}\n{numbered}", {"path": path, "lines": len(lines)}


@tool(
    "edit_file",
    "Replace one exact occurrence of `old` by `new` in a repo file (sandbox path); `old` empty creates the file.",
    {"path": _STR, "old": _STR, "new": _STR},
    ("path", "old", "new"),
)
def edit_file(ctx: RunContext, path: str, old: str, new: str) -> Result:
    host = ctx.host_path(path)
    if old == "":
        if host.exists():
            raise ToolError(f"{path} exists; give the exact text to replace in `old` (empty `old` creates a new file)")
        _refuse_oversized(f"the new file {path}", len(new.encode()))
        ctx.guard.write_text(path, new)
        return (f"created {path}", {"path": path, "created": True})
    if not host.is_file():
        raise ToolError(f"{path} does not exist in repo {ctx.repo_of(path)!r}; check the path with bash `ls`")
    text = ctx.guard.read_text(path)
    count = text.count(old)
    if count == 0:
        raise ToolError(f"`old` was not found in {path}; nothing was changed. {nearest_lines(text, old)}")
    if count > 1:
        raise ToolError(f"`old` occurs {count} times in {path}; nothing was changed. Include more surrounding lines.")
    edited = text.replace(old, new, 1)
    _refuse_oversized(f"{path} after the edit", len(edited.encode()))
    ctx.guard.write_text(path, edited)
    return (f"edited {path} (1 replacement)", {"path": path})


def _refuse_oversized(what: str, size: int) -> None:
    """File tools write what porter can read back whole; a bigger change is not one a person reviews as a patch."""
    if size > MAX_READ_BYTES:
        raise ToolError(
            f"{what} would be {size / 2**20:.1f} MiB, over the {MAX_READ_MIB} MiB a file tool writes in one call; "
            "nothing was changed. Send smaller changes; large generated files come from a tuning command or bash."
        )


def nearest_lines(text: str, wanted: str) -> str:
    """The real lines closest to what the model thought was there, so it can resend the right text."""
    lines = text.splitlines()
    first = wanted.strip().splitlines()[0] if wanted.strip() else ""
    close = difflib.get_close_matches(first, lines, n=1, cutoff=0.5)
    if not close:
        return "No similar line exists; read the file first."
    index = lines.index(close[0])
    window = "\n".join(lines[max(0, index - 2) : index + 3])
    return f"The nearest real lines (around line {index + 1}) are:\n{window}"


@tool(
    "apply_patch",
    "Apply a unified diff (paths relative to the repo root) to one repo; all or nothing.",
    {"repo": _STR, "patch": _STR},
    ("patch",),
)
def apply_patch(ctx: RunContext, patch: str, repo: str | None = None) -> Result:
    name = repo or ctx.only_repo()
    tree = ctx.repo_dir(name)
    if not patch.endswith("\n"):
        patch += "\n"
    _refuse_oversized("the patch", len(patch.encode()))
    refuse_patch(patch, tree)
    check = safe_git.run(tree, ["apply", "--check", "--recount", "-"], stdin=patch)
    if check.returncode != 0:
        raise ToolError(
            f"the patch does not apply to repo {name!r}; nothing was changed.\n{check.stderr.strip()}\n"
            "Read the current file and resend the whole patch against it (or use edit_file)."
        )
    safe_git.run(tree, ["apply", "--recount", "-"], stdin=patch).check_returncode()
    files = ctx.repos[name].changed_files()
    return (f"applied to {name}; changed files now: {files}", {"repo": name})


# ---------------------------------------------------------------- serving and checks


@tool(
    "set_flags",
    "Change serve flags (only the task's tunables, only their allowed values; null = off).",
    {"flags": {"type": "object"}},
    ("flags",),
)
def set_flags(ctx: RunContext, flags: dict) -> Result:
    tunables = ctx.task.serve.tunables
    for flag, value in flags.items():
        if flag not in tunables:
            raise ToolError(f"{flag!r} is not a tunable of this task; tunables: {sorted(tunables)}")
        if value not in tunables[flag]:
            raise ToolError(f"{flag}={json.dumps(value)} is not allowed; allowed values: {json.dumps(tunables[flag])}")
    merged = {**ctx.state.flags, **flags}
    if problem := flag_rules.problem(ctx.task, merged):
        raise ToolError(f"{problem}. Nothing was changed; set the sizes together in one call.")
    changed = {flag: value for flag, value in flags.items() if ctx.state.flags.get(flag) != value}
    ctx.state.flags.update(flags)
    command = serve.render_command(ctx.task, ctx.state.flags)
    return (
        f"flags changed: {json.dumps(changed) if changed else 'none'}. Call serve to apply them. Command: {command}",
        {"changed": changed, "flags": ctx.state.flags},
    )


@tool("serve", "(Re)start the server with the current flags and tree; returns healthy, or the triaged crash.")
def serve_tool(ctx: RunContext) -> Result:
    launch = ctx.relaunch()
    record = accepting.record_serve(ctx, launch).to_dict()
    if not launch.healthy:
        record["flag_mentions"] = flag_mentions(launch.log_path, list(ctx.task.serve.tunables))
    if launch.healthy:
        warnings = [f"{f.category}: {f.key_line}" for f in (launch.triage.findings if launch.triage else [])]
        summary = f"healthy in {launch.seconds:.1f} s. Warnings in the log: {warnings or 'none'}"
    else:
        crash = f"{record['crash_class']}, after {launch.seconds:.1f} s"
        summary = f"the server did not start ({crash}).\n{launch.triage.excerpt}"
    return summary, record


@tool(
    "read_log",
    "Read a server log of this run (the latest launch unless `launch` names one): `grep` a regular expression "
    "(case-insensitive, with `context` lines around each match; with `tail`, the last `tail` matches), the last "
    "`tail` lines, or `start_line` to "
    f"`end_line`. At most {log_reader.MAX_LINES} lines come back; the default is the last {log_reader.DEFAULT_TAIL}.",
    {
        "launch": {"type": "integer", "minimum": 1},
        "grep": _STR,
        "context": {"type": "integer", "minimum": 0, "maximum": 20},
        "tail": {"type": "integer", "minimum": 1},
        "start_line": {"type": "integer", "minimum": 1},
        "end_line": {"type": "integer", "minimum": 1},
    },
)
def read_log(ctx: RunContext, **options: Any) -> Result:
    return log_reader.read_log(ctx.run_dir / "logs", **options)


def flag_mentions(log_path, flags: list[str], per_flag: int = 3) -> dict[str, list[str]]:
    """Log lines that name a tunable ("Attention backend: triton"), a few per flag; the arguments dump, which
    names every flag, is left out. Read as a stream: real logs are large."""
    patterns = {flag: re.compile(rf"\b{flag.replace('-', '[-_ ]')}\b", re.IGNORECASE) for flag in flags}
    found: dict[str, list[str]] = {}
    for line in log_reader.bounded_lines(log_path):
        if "server_args" in line.lower():
            continue
        for flag, pattern in patterns.items():
            lines = found.setdefault(flag, [])
            if len(lines) < per_flag and pattern.search(line):
                lines.append(line.strip()[:300])
    return {flag: lines for flag, lines in found.items() if lines}


@tool(
    "run_check",
    "Run a check against the running server from the host: "
    + "; ".join(f"{name} ({kind.description})" for name, kind in registry.KINDS.items())
    + ".",
    {"kind": {"type": "string", "enum": list(registry.KINDS)}},
    ("kind",),
)
def run_check(ctx: RunContext, kind: str) -> Result:
    results = ctx.run_check(kind)
    lines = [observations.check(key, result) for key, result in results.items()]
    failing = [
        key for key, result in results.items() if registry.kind_of(key).name == "quality" and not result.get("passed")
    ]
    if failing and not ctx.is_pending():
        lines.insert(0, observations.QUALITY_FAILS_FIRST.format(checks=", ".join(failing)))
    return (
        "\n".join(lines),
        {"kind": kind, "results": results, "accepted_quality_fails": failing if not ctx.is_pending() else []},
    )


@tool(
    "tune",
    "Run one of the task's tuning commands in the sandbox; what it writes becomes a pending change.",
    {"name": _STR},
    ("name",),
)
def tune(ctx: RunContext, name: str) -> Result:
    specs = {spec.name: spec for spec in ctx.task.tune}
    if name not in specs:
        raise ToolError(f"no tuning command {name!r}; the task declares {sorted(specs)}")
    spec = specs[name]
    was_serving = ctx.server is not None
    ctx.stop_server()  # tuning needs the devices the server holds
    before = {repo_name: repo.change_digest() for repo_name, repo in ctx.repos.items()}
    result = ctx.sandbox.exec(spec.command, timeout=spec.timeout_s, workdir=spec.workdir)
    ctx.refuse_escaping_links({name: repo.changed_files() for name, repo in ctx.repos.items() if repo.is_dirty()})
    touched = sorted(repo_name for repo_name, repo in ctx.repos.items() if repo.change_digest() != before[repo_name])
    changed = {repo_name: ctx.repos[repo_name].changed_files() for repo_name in touched}
    status = "timed out" if result.timed_out else f"exit {result.exit_code}"
    stopped = "porter stopped the server first (tuning needs the devices); " if was_serving else ""
    outcome = (
        f"it changed {json.dumps(changed)} (now part of the pending change; serve to use it)"
        if changed
        else "it changed no file: what it wrote equals what the tree already had (e.g. the rows already exist)"
    )
    return (
        f"tune {name}: {stopped}{status} in {result.duration_s:.0f} s; {outcome}\n{result.output}",
        {"name": name, "exit_code": result.exit_code, "changed": changed, "server_stopped": was_serving},
    )


# ---------------------------------------------------------------- keeping and ending


@tool(
    "accept",
    "Keep the pending change (diffs + flags). porter checks the evidence; quality runs if needed.",
    {"summary": _STR, "why": _STR},
    ("summary",),
)
def accept(ctx: RunContext, summary: str, why: str = "") -> Result:
    outcome = accepting.accept(ctx, summary, why)
    return outcome["message"], outcome


@tool("revert", "Drop the pending change: repos back to the last accepted commit, flags back too.")
def revert(ctx: RunContext) -> Result:
    outcome = accepting.revert(ctx, reason="asked by the agent")
    return outcome["message"], outcome


@tool("finish", "End the run (targets met, or nothing more to try).", {"reason": _STR}, ("reason",))
def finish(ctx: RunContext, reason: str) -> Result:
    raise Finished(reason)
