"""What a person watching `porter run` sees while it runs: a live panel on a terminal, plain lines otherwise.

The panel (rich Live, redrawn a few times a second) shows the phase, the step, the action in flight and
how long it has run, every target with its value, goal and a stale mark, kept and reverted changes,
launches, tokens and dollars. When stdout is not a terminal (CI, a pipe, a log file) each step prints
one plain line instead. Reads the run state; changes nothing. The end-of-run summary is console.py's.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from porter.loop.run_context import RunContext
from porter.loop.tools import run_status
from porter.models import ToolCall
from porter.ops import console as plain
from porter.terminal import printable


class LiveStatus:
    """on_step / on_action hooks for agent.run_loop; use as a context manager around the loop."""

    def __init__(self, ctx: RunContext, stream: TextIO | None = None, enabled: bool = True):
        self.ctx = ctx
        stream = stream or sys.stdout
        live = enabled and stream.isatty()
        self.live = Live(self, console=Console(file=stream), refresh_per_second=4) if live else None
        self.action: str | None = None
        self.action_started = 0.0
        self.targets = run_status(ctx)["targets"]  # read between calls, not at every redraw (it asks git)

    def __enter__(self) -> LiveStatus:
        if self.live:
            self.live.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.live:
            self.live.refresh()
            self.live.stop()

    def on_action(self, ctx: RunContext, call: ToolCall | None) -> None:
        self.action = None if call is None else describe_call(call)
        self.action_started = time.monotonic()
        if call is None:
            self.targets = run_status(ctx)["targets"]

    def on_step(self, ctx: RunContext) -> None:
        if self.live:
            self.live.refresh()
        else:
            plain.show_step(ctx)

    def __rich__(self) -> Panel:
        return render_panel(self.ctx, self.targets, self.action, time.monotonic() - self.action_started)


def describe_call(call: ToolCall) -> str:
    detail = call.arguments.get("command") or call.arguments.get("kind") or call.arguments.get("path") or ""
    detail = str(detail).splitlines()[0][:60] if detail else ""
    return printable(f"{call.name} {detail}".strip())  # the model wrote it: no terminal control reaches the screen


def render_panel(ctx: RunContext, targets: list[dict], action: str | None, elapsed_s: float) -> Panel:
    state, limits = ctx.state, ctx.task.agent.limits
    kept = len(state.kept_attempts())
    doing = f"{action} ({elapsed_s:.0f} s)" if action else "waiting for the model"
    tokens = state.tokens["input"] + state.tokens["cache_read"] + state.tokens["output"]
    head = Text.assemble(
        ("phase ", "dim"),
        (state.phase(), "bold"),
        ("   step ", "dim"),
        f"{state.step}/{limits.max_steps}",
        ("   now ", "dim"),
        (doing, "cyan"),
    )
    spend = Text.assemble(
        ("kept ", "dim"),
        str(kept),
        ("   reverted ", "dim"),
        str(len(state.attempts) - kept),
        ("   launches ", "dim"),
        f"{state.relaunches}/{limits.max_relaunches}",
        ("   tokens ", "dim"),
        f"{tokens:,}",
        ("   cost ", "dim"),
        plain.money(ctx),
    )
    return Panel(Group(head, targets_table(targets), spend), title=f"porter: {ctx.task.name}", expand=False)


def targets_table(targets: list[dict]) -> Table:
    table = Table(box=None, pad_edge=False)
    for column in ("target", "value", "goal", "met"):
        table.add_column(column)
    for row in targets:
        value = row["value"]
        shown = "-" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)
        if row.get("stale"):
            shown += " (stale)"
        table.add_row(row["target"], shown, str(row["goal"]), "[green]yes[/]" if row["met"] else "[red]no[/]")
    return table
