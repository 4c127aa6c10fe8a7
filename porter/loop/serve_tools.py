"""The tools that serve and measure: set_flags, serve, read_log, run_check, tune.

set_flags takes any flag the engine's own parser accepts and any environment variable of the serve process
($NAME), checking a flag or value outside the task's tunables with that parser in the sandbox first
(engines/parser_check.py); serve launches and triages; read_log reads the run's server logs bounded; run_check
measures from the host through the check registry; tune runs a task-declared tuning command. Each tool's
schema stands next to its handler (toolbox.tool). The keep rules are ledger/decision.py's.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from pydantic import ValidationError

from porter.checks import registry
from porter.engines import flag_rules, serve
from porter.engines.parser_check import ask_parser
from porter.errors import ToolError
from porter.loop import accepting, log_reader, measuring, observations
from porter.loop.run_context import RunContext
from porter.loop.toolbox import STRING, Result, tool
from porter.redaction import environment_problems
from porter.sandbox.foreign_changes import unseen_paths
from porter.schema import render_flags, serve_env
from porter.task import ServeSpec
from porter.triage.log_digest import decode_steps, digest
from porter.upstream_facts import merge_into_tree


@tool(
    "set_flags",
    "Change serve settings: any flag the engine's own parser accepts (name without dashes -> value; true = the "
    "bare flag; null = left out) and any environment variable of the serve process as $NAME -> value (null = "
    "unset). The task's tunables are its search space, not a fence: a flag or value outside them is first checked "
    "by the engine's parser in the sandbox, and refused with the parser's message.",
    {"flags": {"type": "object"}},
    ("flags",),
)
def set_flags(ctx: RunContext, flags: dict) -> Result:
    for name, value in flags.items():
        if not isinstance(value, str | int | float | bool | type(None)):
            raise ToolError(f"{name}: a value is a string, a number, true/false or null, got {json.dumps(value)}")
    try:
        ServeSpec.model_validate({"command": ctx.task.serve.command, "flags": flags})  # names: kebab-case or $NAME
    except ValidationError as exc:
        raise ToolError(f"{exc.errors()[0]['msg'].removeprefix('Value error, ')}. Nothing was changed.") from None
    if problems := environment_problems(serve_env(flags), ctx.task.agent.api_key_env):
        raise ToolError(f"refused: {'; '.join(problems)}; a host secret never enters the serve process")
    if problems := unseen_paths(ctx.task, serve_env(flags)):
        raise ToolError(f"refused: {'; '.join(problems)}. Put such code in a declared repo. Nothing was changed.")
    merged = {**ctx.state.flags, **flags}
    if problem := flag_rules.problem(ctx.task, merged):
        raise ToolError(f"{problem}. Nothing was changed; set the sizes together in one call.")
    tunables = ctx.task.serve.tunables
    undeclared = {k: v for k, v in flags.items() if not k.startswith("$") and v not in tunables.get(k, ())}
    if undeclared:
        answer = ask_parser(ctx.sandbox, ctx.task, [merged])
        refusal = answer.problem or (answer.verdicts[0] if answer.verdicts else None)
        if refusal:
            raise ToolError(f"the engine's parser refuses {json.dumps(undeclared)}: {refusal}. Nothing was changed.")
    changed = {flag: value for flag, value in flags.items() if ctx.state.flags.get(flag) != value}
    ctx.state.flags.update(flags)
    command = serve.render_command(ctx.task, ctx.state.flags)
    env = serve_env(ctx.state.flags)
    shown = f" Environment: {json.dumps(env)}." if env else ""
    outside = (
        f" Outside the task's search space, accepted by the engine's parser: {json.dumps(undeclared)}."
        if undeclared
        else ""
    )
    return (
        f"flags changed: {json.dumps(changed) if changed else 'none'}. Call serve to apply them.{outside} "
        f"Command: {command}.{shown}",
        {"changed": changed, "flags": ctx.state.flags, "undeclared": undeclared},
    )


@tool(
    "serve",
    "(Re)start the server with the current flags and tree; returns healthy, or the triaged crash. `reduced`: the "
    "engine's own reduced start-up instead (random weights, the first few layers), a fraction of a full one, to judge "
    "a fix of a crash at load or in the first forward pass; porter first checks that the last full start-up's crash "
    "reproduces reduced. Never evidence to accept: a keep needs a full start-up.",
    {"reduced": {"type": "boolean"}},
)
def serve_tool(ctx: RunContext, reduced: bool = False) -> Result:
    if reduced:
        return serve_reduced(ctx)
    launch = ctx.relaunch()
    record = accepting.record_serve(ctx, launch).to_dict()
    if not launch.healthy:
        record["flag_mentions"] = flag_mentions(launch.log_path, list(ctx.task.serve.tunables))
    if launch.healthy:
        findings = launch.triage.findings if launch.triage else []
        noted = "".join(f"\nFinding {finding.category}: {finding.key_line}" for finding in findings)
        logged = digest(enumerate(log_reader.bounded_lines(launch.log_path), start=1), ctx.task.engine.kernel_lines)
        summary = f"healthy in {launch.seconds:.1f} s.{noted}\n{logged.render()}"
    else:
        crash = f"{record['crash_class']}, after {launch.seconds:.1f} s"
        summary = f"the server did not start ({crash}).\n{launch.triage.excerpt}"
    return summary, record


def serve_reduced(ctx: RunContext) -> Result:
    """A reduced start-up and its verdict on the crash of the last full start-up (of the pending change, else of the
    accepted configuration), once porter has seen whether that crash reproduces reduced."""
    last = (ctx.state.pending.serve if ctx.is_pending() else None) or ctx.state.accepted.serve
    crashed = last if last and not last.healthy and last.fingerprint in ctx.state.configs else None
    if crashed and crashed.fingerprint not in ctx.state.reduced and crashed.fingerprint != ctx.fingerprint():
        with ctx.in_place(ctx.state.configs[crashed.fingerprint]):
            if ctx.fingerprint() == crashed.fingerprint:  # the image may have changed since
                _reduced_start(ctx)
    launch, facts = _reduced_start(ctx)
    outcome = "healthy" if launch.healthy else launch.crash_class
    crash, there = (crashed.crash_class, ctx.state.reduced.get(crashed.fingerprint)) if crashed else (None, None)
    if crash is None:
        verdict = "no crash to judge: the last full start-up did not crash"
    elif there != crash:
        verdict = (
            f"cannot judge this crash: {crash} of the full start-up does not reproduce reduced ({there or 'not run'} "
            "there); it needs the checkpoint's tensors or the left-out layers (the NextN layer sits at index "
            "num_hidden_layers and moves with them): only a full start-up judges a fix"
        )
    elif ctx.fingerprint() == crashed.fingerprint:
        verdict = f"{crash} reproduces reduced: after a fix, serve reduced judges it"
    else:
        passed = {crash: f"the fix does not pass: {crash} again", "healthy": "the fix passes reduced"}
        verdict = passed.get(outcome, f"the crash changed: {crash} -> {outcome}") + "; a keep needs a full start-up"
    shown = f"healthy in {launch.seconds:.1f} s" if launch.healthy else f"{outcome}, after {launch.seconds:.1f} s"
    excerpt = "" if launch.healthy else f"\n{launch.triage.excerpt}"
    flags = shlex.join(render_flags(ctx.task.engine.reduced_flags()))  # as the serve command writes them
    return (
        f"reduced start-up ({flags}; random weights, stopped after start-up): {shown}. Verdict: {verdict}.{excerpt}",
        {**facts, "reduced": True, "outcome": outcome, "crash": crash, "reproduces": there == crash,
         "verdict": verdict},
    )  # fmt: skip


def _reduced_start(ctx: RunContext) -> tuple[serve.Launch, dict]:
    """A reduced start-up and its record (the crash's class and findings, for a rule that fixes it)."""
    launch = ctx.relaunch(reduced=True)
    ctx.state.reduced[ctx.server_fingerprint] = "healthy" if launch.healthy else launch.crash_class
    record = accepting.start_up(ctx, launch).to_dict()
    ctx.stop_server()  # random weights: nothing on it is worth measuring
    return launch, record


@tool(
    "read_log",
    "Read a server log of this run (the latest launch unless `launch` names one): `grep` a regular expression "
    "(case-insensitive, with `context` lines around each match; with `tail`, the last `tail` matches), the last "
    "`tail` lines, or `start_line` to "
    f"`end_line`. At most {log_reader.MAX_LINES} lines come back; the default is the last {log_reader.DEFAULT_TAIL}.",
    {
        "launch": {"type": "integer", "minimum": 1},
        "grep": STRING,
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
    log = ctx.server.log_path if ctx.server else None
    start = log.stat().st_size if log and log.exists() else 0
    results = measuring.measure(ctx, kind)
    lines = [observations.check(key, result, ctx.said) for key, result in results.items()]
    if kind == "single_stream" and log and log.exists() and log.stat().st_size > start:
        steps = decode_steps(log_reader.bounded_lines(log, start=start), results["single_stream"].get("output_tok_s"))
        lines.insert(1, steps)
    failing = [
        key for key, result in results.items() if registry.kind_of(key).name == "quality" and not result.get("passed")
    ]
    if failing and not ctx.is_pending():
        first = observations.QUALITY_FAILS_FIRST.format(checks=", ".join(failing))
        lines.insert(0, observations.once(ctx.said, "quality_fails", first, f"Quality still fails: {failing}."))
    return (
        "\n".join(lines),
        {"kind": kind, "results": results, "accepted_quality_fails": failing if not ctx.is_pending() else []},
    )


@tool(
    "tune",
    "Run one of the task's tuning commands in the sandbox; what it writes becomes a pending change.",
    {"name": STRING},
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
    merged = _merge_tuned(ctx, spec) if spec.aiter_tuned_output and result.exit_code == 0 else []
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
        f"tune {name}: {stopped}{status} in {result.duration_s:.0f} s; {outcome}\n{''.join(merged)}{result.output}",
        {"name": name, "exit_code": result.exit_code, "changed": changed, "server_stopped": was_serving},
    )


def _merge_tuned(ctx: RunContext, spec) -> list[str]:
    """Lines saying how the tuner's rows merged into aiter's shipped tables (upstream_facts.merge_into_tree)."""
    try:
        merge = merge_into_tree(ctx.sandbox.repo_dir("aiter"), spec.aiter_tuned_output)
    except (ValueError, OSError) as exc:
        raise ToolError(f"tune {spec.name}: its rows were not merged into aiter's tables: {exc}") from None
    return [f"merged into aiter's tables: {merge.counts}\n", *(line + "\n" for line in merge.lines)]
