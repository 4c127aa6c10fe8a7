"""What a person following `porter run` sees: the progress log's lines and, on a terminal, a live panel.

`LiveStatus` is the hooks the agent loop calls (a step ended, a tool call starts or ends) and the watcher the
checks report to (a sample starts, a level or a tenth of the questions ends): each writes the run's progress log
(progress_log.py: RUN_DIR/progress.log, a line per action with its clock time, result and duration, and a
heartbeat while work runs). When stdout is a terminal, a panel redrawn a few times a second shows the phase, the
step, the action in flight and how long it has run, a progress bar with the time left for long work (sweep levels,
quality questions, start-up stages), every target with its value, goal and a stale mark, kept and reverted
changes, launches, tokens and dollars; the log's lines scroll above it. Otherwise (CI, a pipe, a file) the log's
lines are printed as they are written. Reads the run state; changes nothing but the progress log.
"""

from __future__ import annotations

import datetime as dt
import sys

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from porter.checks.kind import CheckProgress
from porter.ledger.state import TargetRow
from porter.loop.run_context import RunContext
from porter.loop.tools import ToolResult, run_status
from porter.models import ToolCall
from porter.report import console as words
from porter.report.progress_log import ProgressLog, StageWatch, Work, duration
from porter.terminal import printable


class LiveStatus:
    """on_step / on_action hooks for agent.run_loop and the run's check watcher; a context manager around the loop
    (and the outputs written after it), so the heartbeat covers all of it."""

    def __init__(self, ctx: RunContext, enabled: bool = True):
        self.ctx = ctx
        stream = sys.stdout
        live = enabled and stream.isatty()
        self.live = Live(self, console=Console(file=stream), refresh_per_second=4) if live else None
        echo = self._above_panel if self.live else (lambda line: print(line, file=stream, flush=True))
        self.log = ProgressLog(ctx.run_dir / "progress.log", ctx.task.outputs.progress_every_s, echo)
        self.sample = ""  # which sample of which check runs, for its progress lines
        self.targets = run_status(ctx)["targets"]  # read between calls, not at every redraw (it asks git)

    def __enter__(self) -> LiveStatus:
        if self.live:
            self.live.start()
        self.log.__enter__()
        self.ctx.check_watcher = self
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.ctx.check_watcher = None
        self.log.__exit__(*exc_info)
        if self.live:
            self.live.refresh()
            self.live.stop()

    def _above_panel(self, line: str) -> None:
        self.live.console.print(line, markup=False, highlight=False, soft_wrap=True)

    # ------------------------------------------------------------ the run's own lines

    def opened(self, agent: str, resumed: bool, seconds: float) -> None:
        state, task = self.ctx.state, self.ctx.task
        how = f"resumed {state.run_id} at step {state.step}" if resumed else f"started {state.run_id}"
        today = dt.date.today().isoformat()
        self.log.write("run", f"{how} on {today} (agent {agent}, {task.sandbox.kind} sandbox)", seconds)
        self.waiting_for_model()

    def closing(self) -> None:
        self.log.begin("outputs", "writing the patch series, the PR drafts and report.md")

    def closed(self, session_s: float, note: str = "") -> None:
        """The run's last lines: how it ended, then each target against its goal."""
        self.log.end("wrote the patch series, the PR drafts and report.md")
        self.log.write("run", words.run_summary(self.ctx) + (f"; {note}" if note else ""), session_s)
        for target, verdict in words.target_lines(self.ctx):
            self.log.write(target, verdict)

    def waiting_for_model(self) -> None:
        state = self.ctx.state
        tokens = state.tokens.input + state.tokens.cache_read + state.tokens.output
        spent = f"; {tokens:,} tokens, {words.money(self.ctx)} so far" if tokens else ""
        self.log.begin("model", f"waiting for the reply to step {state.step + 1}{spent}")

    # ------------------------------------------------------------ the loop's hooks

    def on_action(self, ctx: RunContext, call: ToolCall, result: ToolResult | None) -> None:
        if result is None:
            watch = StageWatch(ctx.run_dir / "logs", ctx.task.engine) if call.name == "serve" else None
            self.log.begin(words.call_label(call), watch=watch)
            return
        outcome, says_duration = words.call_outcome(ctx, call, result)
        self.log.end(outcome, timed=not says_duration)
        self.targets = run_status(ctx)["targets"]

    def on_step(self, ctx: RunContext) -> None:
        if self.live:
            self.live.refresh()
        self.waiting_for_model()

    # ------------------------------------------------------------ the checks' watcher

    def waiting(self, key: str, holder: str) -> None:
        self._checking(key)
        self.log.write(self.log.work.label, f"{key}: waiting for the node's measurement lock, held by {holder}")
        self.log.part(f"{key}: waiting for the measurement lock")

    def sample_started(self, key: str, number: int, samples: int) -> None:
        self._checking(key)
        self.sample = f"{key}, sample {number} of {samples}" if samples > 1 else key
        self.log.part(self.sample)

    def _checking(self, key: str) -> None:
        work = self.log.work
        if work is None or work.label == "model":  # a check outside a tool call: the accepted configuration's
            self.log.begin(f"re-measure {key}")

    def progressed(self, key: str, step: CheckProgress) -> None:
        self.log.advance(step.done, step.total, step.unit, step.note, step.bounded, self.sample or key)

    # ------------------------------------------------------------ the panel

    def __rich__(self) -> Panel:
        return render_panel(self.ctx, self.targets, self.log.work)


def render_panel(ctx: RunContext, targets: list[TargetRow], work: Work | None) -> Panel:
    state, limits = ctx.state, ctx.task.agent.limits
    kept = len(state.kept_attempts())
    doing = f"{work.label} ({duration(work.elapsed_s())})" if work else "between steps"
    tokens = state.tokens.input + state.tokens.cache_read + state.tokens.output
    head = labelled(
        ("phase", (state.phase(), "bold")), ("step", f"{state.step}/{limits.max_steps}"), ("now", (doing, "cyan"))
    )
    reduced = f" ({state.reduced_launches} reduced)" if state.reduced_launches else ""  # within the budget
    spend = labelled(
        ("kept", str(kept)),
        ("reverted", str(len(state.attempts) - kept)),
        ("launches", f"{state.relaunches}/{limits.max_relaunches}{reduced}"),
        ("tokens", f"{tokens:,}"),
        ("cost", words.money(ctx)),
    )
    parts = [head, *progress_rows(work), words.targets_table(targets, box=None, pad_edge=False), spend]
    return Panel(Group(*parts), title=f"porter: {ctx.task.name}", expand=False)


def labelled(*fields: tuple[str, str | tuple[str, str]]) -> Text:
    """One line of `label value` pairs three spaces apart, the labels dim (a value may carry its own style)."""
    parts: list = []
    for label, value in fields:
        parts += [(f"   {label} " if parts else f"{label} ", "dim"), value]
    return Text.assemble(*parts)


def progress_rows(work: Work | None) -> list:
    """A bar with the count and the time left, for work that counts its units (levels, questions, stages)."""
    if work is None or not work.total:
        return []
    left = work.left_s()
    grid = Table.grid(padding=(0, 1))
    grid.add_row(
        ProgressBar(total=work.total, completed=work.done, width=30),
        Text(work.count()),
        Text(f"{duration(left)} left" if left is not None else "time left: -", style="dim"),
    )
    note = Text(printable(work.note), style="dim", overflow="ellipsis", no_wrap=True)  # may quote a server
    return [grid, note] if work.note else [grid]
