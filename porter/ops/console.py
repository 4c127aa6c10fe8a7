"""What `porter run` shows a person: a live status line per step and the summary table at the end.

Covers rendering only (rich); reads the run state, changes nothing.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from porter.ledger.state import target_report
from porter.loop.run_context import RunContext
from porter.terminal import printable

console = Console(stderr=True, highlight=False, soft_wrap=True)


def say(text: str) -> None:
    """One message to the person, shown as written: quoted errors and paths never drive the terminal or markup."""
    console.print(printable(text), markup=False)


def money(ctx: RunContext) -> str:
    return f"${ctx.state.cost_usd:.2f}" if ctx.state.cost_known else "$? (price unknown)"


def status_line(ctx: RunContext) -> str:
    state = ctx.state
    serve = state.pending.serve or state.accepted.serve
    crash = (serve.crash_class if serve else None) or "-"
    changed = {k: v for k, v in state.flags.items() if ctx.task.serve.flags.get(k) != v}
    met = sum(row["met"] for row in target_report(ctx.task, state))
    total = len(target_report(ctx.task, {}))
    tokens = state.tokens["input"] + state.tokens["output"]
    return (
        f"step {state.step} | {state.phase()} | flags {changed or 'baseline'} | last crash {crash} | "
        f"targets met {met}/{total} | kept {len(state.kept_attempts())} | "
        f"tokens {tokens} {money(ctx)} | relaunches {state.relaunches}"
    )


def show_step(ctx: RunContext) -> None:
    console.print(printable(status_line(ctx)), markup=False)  # flags and crash classes come from the model


def summary_table(ctx: RunContext) -> Table:
    table = Table(title=f"{ctx.task.name}: {ctx.state.finished}")
    for column in ("target", "value", "goal", "met"):
        table.add_column(column)
    for row in target_report(ctx.task, ctx.state):
        value = row["value"]
        shown = f"{value:.3f}" if isinstance(value, float) else str(value)
        shown += " (stale: measured on another configuration)" if row["stale"] else ""
        table.add_row(row["target"], shown, str(row["goal"]), "yes" if row["met"] else "no")
    return table


def show_summary(ctx: RunContext) -> None:
    console.print(summary_table(ctx))
    kept = ctx.state.kept_attempts()
    console.print(
        f"kept changes: {len(kept)}, reverted: {len(ctx.state.attempts) - len(kept)}; "
        f"steps {ctx.state.step}; relaunches {ctx.state.relaunches}; cost {money(ctx)}"
    )
    console.print(f"run directory: {ctx.run_dir}")
