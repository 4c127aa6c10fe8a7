"""What `porter run` says to a person: each tool call in a few words (what it was, how it ended), the run's
opening and closing lines, and the summary table at the end.

Covers wording only (the progress log writes the lines, live_status.py draws the panel); reads the run state,
changes nothing. Text the model or a server wrote is shown as written, never as terminal controls or markup.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

from porter.checks import registry
from porter.checks.render import number, target_value
from porter.ledger.state import RunState, TargetRow, target_report
from porter.loop.run_context import RunContext
from porter.loop.tools import ToolResult
from porter.models import ToolCall
from porter.models.base import Record
from porter.report.progress_log import duration
from porter.terminal import printable

console = Console(stderr=True, highlight=False, soft_wrap=True)
MAX_DETAIL_CHARS = 60


def say(text: str) -> None:
    """One message to the person, shown as written: quoted errors and paths never drive the terminal or markup."""
    console.print(printable(text), markup=False)


def money(ctx: RunContext) -> str:
    return f"${ctx.state.cost_usd:.2f}" if ctx.state.cost_known else "$? (price unknown)"


def call_label(call: ToolCall) -> str:
    """The action as a person names it: `serve`, `run_check throughput`, `bash make -j8`, `tune moe-fp4`."""
    arguments = call.arguments
    detail = arguments.get("command") or arguments.get("kind") or arguments.get("name") or arguments.get("path")
    detail = str(detail).strip().splitlines()[0][:MAX_DETAIL_CHARS] if detail else ""
    return printable(f"{call.name} {detail}".strip())  # the model wrote it: no terminal control reaches the screen


@dataclass
class CallFacts(Record):
    """What a tool's result says for programs, as far as its few words name it (each tool sets its own)."""

    results: dict = field(default_factory=dict)  # run_check: each check's result document
    changed: dict = field(default_factory=dict)  # set_flags: each flag's new value; tune: each repo's files
    exit_code: int | None = None  # bash, tune
    timed_out: bool = False  # bash
    seconds: float = 0.0  # serve, and how it went
    healthy: bool = False
    crash_class: str | None = None
    stage: int | None = None


def call_outcome(ctx: RunContext, call: ToolCall, result: ToolResult) -> tuple[str, bool]:
    """(how the call ended in a few words, whether those words already say how long it took)."""
    facts = CallFacts.from_dict(result.facts or {})
    if not result.ok:
        return "failed: " + _first_line(result.text.removeprefix(f"{call.name} failed: ")), False
    if call.name == "serve":
        return _served(ctx, facts), True
    if call.name == "run_check":
        return "; ".join(_checked(key, value) for key, value in facts.results.items()), False
    if call.name == "set_flags":
        words = [_flag(flag, value) for flag, value in facts.changed.items()]
        return f"flags changed: {' '.join(words)}" if words else "no flag changed", False
    if call.name == "bash":
        return ("timed out" if facts.timed_out else f"exit {facts.exit_code}"), False
    if call.name == "tune":
        changed = sorted(f"{repo}/{path}" for repo, paths in facts.changed.items() for path in paths)
        return f"exit {facts.exit_code}; changed {', '.join(changed) if changed else 'no file'}", False
    return _first_line(result.text), False


def _served(ctx: RunContext, facts: CallFacts) -> str:
    took = duration(facts.seconds)
    if facts.healthy:
        return f"healthy in {took}"
    stages = len(ctx.task.engine.stages)
    return f"crashed ({facts.crash_class}) after stage {facts.stage} of {stages}, in {took}"


def _checked(key: str, result: dict) -> str:
    words = registry.kind_of(key).brief(result)
    samples = result.get("samples") or 0
    return f"{words}; median of {samples} samples {number(result.get('median'))}" if samples > 1 else words


def _flag(flag: str, value: object) -> str:
    """A flag in CLI form (`--tp 4`, `--enable-x`, `--dp off`), or a serve-process variable (`$NAME`) as `NAME=v`."""
    if flag.startswith("$"):
        return f"unset {flag[1:]}" if value is None else f"{flag[1:]}={shlex.quote(str(value))}"
    if value in (None, False):
        return f"--{flag} off"
    return f"--{flag}" if value is True else f"--{flag} {shlex.quote(str(value))}"


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else "done"


def target_lines(ctx: RunContext) -> list[tuple[str, str]]:
    """(target, its value against its goal) for each target, as the run's closing lines say them."""
    lines = []
    for row in target_report(ctx.task, ctx.state):
        shown = "not measured" if row.value is None else target_value(row.value)
        verdict = "met" if row.met else "NOT met"
        stale = " (measured on another configuration)" if row.stale else ""
        lines.append((f"target {row.target}", f"{shown}{stale}, goal {row.goal}: {verdict}"))
    return lines


def run_summary(ctx: RunContext) -> str:
    state = ctx.state
    kept = len(state.kept_attempts())
    tokens = state.tokens.input + state.tokens.cache_read + state.tokens.output
    return (
        f"{state.finished}; {'solved' if state.solved else 'not solved'}; kept {kept}, reverted "
        f"{len(state.attempts) - kept}; {plural(state.step, 'step')}, {launches(state)}, "
        f"{plural(tokens, 'token')}, {money(ctx)}"
    )


def launches(state: RunState) -> str:
    """Full start-ups, with the reduced ones (serve reduced) said apart: only a full one starts a configuration."""
    full = plural(state.full_launches, "launch")
    return f"{full} and {state.reduced_launches} reduced" if state.reduced_launches else full


def plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}" + ("" if count == 1 else "es" if noun.endswith("ch") else "s")


def targets_table(rows: list[TargetRow], **options: Any) -> Table:
    """Each target's value (a stale mark when measured on another configuration), goal and whether it is met: the
    live panel's and the closing summary's table."""
    table = Table(**options)
    for column in ("target", "value", "goal", "met"):
        table.add_column(column)
    for row in rows:
        shown = target_value(row.value) + (" (stale)" if row.stale else "")
        table.add_row(row.target, shown, str(row.goal), "[green]yes[/]" if row.met else "[red]no[/]")
    return table


def show_summary(ctx: RunContext) -> None:
    console.print(targets_table(target_report(ctx.task, ctx.state), title=f"{ctx.task.name}: {ctx.state.finished}"))
    kept = ctx.state.kept_attempts()
    console.print(
        f"kept changes: {len(kept)}, reverted: {len(ctx.state.attempts) - len(kept)}; "
        f"steps {ctx.state.step}; {launches(ctx.state)}; cost {money(ctx)}"
    )
    console.print(f"run directory: {ctx.run_dir}")
