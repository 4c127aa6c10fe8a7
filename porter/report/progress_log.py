"""The run's progress log, `RUN_DIR/progress.log`: a line per action with its clock time, what it did and how long
it took, for a person who tails it overnight (`17:06:03  run_check throughput  knee 12.5 req/s, ...  3 min 12 s`).

Covers the line itself (redacted, without terminal controls: a model's bash command ends up here), the work in
flight (what, since when, how far: the terminal's progress bar reads it), a line per unit of long work as it ends
(a sweep's level, a tenth of a quality set, a start-up stage), and a heartbeat: a line whenever the log has been
silent for `every_s`, saying what still runs and for how long. Start-up stages are read from the server's log as
it grows, by the engine's own stage lines (porter/engines/<engine>.py `stages`); only porter's stage names are
written, never the log's text. What a finished tool call says is console.py's; the terminal panel live_status.py's.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from porter.engines.engine import Engine
from porter.redaction import redact
from porter.terminal import printable

HEARTBEAT_SHARE = 0.6  # a heartbeat goes out this far into a silence: a late-woken thread still beats in time
MAX_TICK_S = 0.5
MAX_RESULT_CHARS = 400
MAX_READ_BYTES = 1 << 20  # of a growing server log per tick: a flood is read a slice at a time, never whole
MAX_LINE_CHARS = 4096


def duration(seconds: float) -> str:
    """41 s, 3 min 12 s, 2 h 05 min: as a person reads a duration in a log."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def format_line(clock: dt.datetime, action: str, result: str, seconds: float | None) -> str:
    """`HH:MM:SS  action  result  duration` on one line; text that came from a model or a server is made safe."""
    text = " / ".join(part.strip() for part in str(result).splitlines() if part.strip())
    if len(text) > MAX_RESULT_CHARS:
        text = text[: MAX_RESULT_CHARS - 3] + "..."
    fields = [clock.strftime("%H:%M:%S"), action, text] + ([duration(seconds)] if seconds is not None else [])
    return printable(redact("  ".join(field for field in fields if field))).replace("\n", " / ")


@dataclass
class Work:
    """What runs now: its label (`serve`, `run_check throughput`, `model`), since when, and how far it got."""

    label: str
    started: float  # monotonic
    note: str = ""
    done: int = 0
    total: int | None = None  # None: no count to show (a bash command, the model thinking)
    unit: str = ""
    bounded: bool = False  # the total is an upper bound (a sweep may stop early)
    context: str = ""  # which part runs (a check's sample, the last stage), for the heartbeat

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def left_s(self) -> float | None:
        """Time left at the pace so far; None before the first unit is done."""
        if not self.total or self.done <= 0 or self.done >= self.total:
            return None
        return self.elapsed_s() / self.done * (self.total - self.done)

    def count(self) -> str:
        if self.total is None:
            return ""
        return f"{self.done} of {'up to ' if self.bounded and self.done < self.total else ''}{self.total} {self.unit}"


class StageWatch:
    """The server log of the start-up in flight (the first `serve-*.log` to appear after it began), read as it
    grows for the engine's stage lines."""

    def __init__(self, logs_dir: Path, engine: Engine):
        self.logs_dir, self.engine = logs_dir, engine
        self.names = [name for name, _ in engine.stages]
        self.before = set(self._logs())
        self.path: Path | None = None
        self.offset, self.partial, self.seen = 0, b"", []

    def _logs(self) -> list[Path]:
        return sorted(self.logs_dir.glob("serve-*.log")) if self.logs_dir.is_dir() else []

    def new_stages(self) -> list[str]:
        """The stages the log printed since the last call, in the engine's order."""
        if self.path is None:
            fresh = [path for path in self._logs() if path not in self.before]
            if not fresh:
                return []
            self.path = fresh[-1]
        with open(self.path, "rb") as log:
            log.seek(self.offset)
            chunk = log.read(MAX_READ_BYTES)
        self.offset += len(chunk)
        lines = (self.partial + chunk).split(b"\n")
        self.partial = lines.pop()[-MAX_LINE_CHARS:]
        _, seen = self.engine.stage_reached([line[:MAX_LINE_CHARS].decode("utf-8", "replace") for line in lines])
        new = [stage for stage in seen if stage not in self.seen]
        self.seen += new
        return new


class ProgressLog:
    """The log file and the work in flight; a context manager that runs the heartbeat thread."""

    def __init__(self, path: Path, every_s: float, echo: Callable[[str], None]):
        self.path, self.every_s, self.echo = path, every_s, echo
        self.lock = threading.RLock()
        self.work: Work | None = None
        self.watch: StageWatch | None = None
        self.last_line = time.monotonic()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._beat, name="porter-progress", daemon=True)

    def __enter__(self) -> ProgressLog:
        self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stopping.set()
        self.thread.join(timeout=5)

    def write(self, action: str, result: str, seconds: float | None = None) -> None:
        line = format_line(dt.datetime.now(), action, result, seconds)
        with self.lock:
            with open(self.path, "a", encoding="utf-8") as log:
                log.write(line + "\n")
            self.last_line = time.monotonic()
            self.echo(line)

    def begin(self, label: str, note: str = "", watch: StageWatch | None = None) -> None:
        """Work starts; nothing is written until it ends, reports progress, or the log has been silent too long."""
        with self.lock:
            self.work = Work(label, time.monotonic(), note)
            self.watch = watch
            if watch is not None:
                self.work.total, self.work.unit = len(watch.names), "stages"

    def part(self, context: str) -> None:
        """A new part of the work in flight starts (a check's next sample): its count starts over."""
        with self.lock:
            if self.work is not None:
                self.work.done, self.work.total, self.work.note, self.work.context = 0, None, "", context

    def advance(self, done: int, total: int, unit: str, note: str, bounded: bool = False, context: str = "") -> None:
        """A unit of the work in flight ended: its line, with the count and the time so far."""
        with self.lock:
            work = self.work or Work("porter", time.monotonic())
            self.work = work
            work.done, work.total, work.unit, work.note, work.bounded = done, total, unit, note, bounded
            work.context = context
            self.write(work.label, f"{f'{context}: ' if context else ''}{note} ({work.count()})", work.elapsed_s())

    def end(self, result: str, timed: bool = True) -> None:
        """The work in flight ended with `result` (which says its own duration when `timed` is False); the stages
        its log printed since the last heartbeat are written first (a start-up can end between two beats)."""
        with self.lock:
            self._stages()
            work, self.work, self.watch = self.work, None, None
            label = work.label if work else "porter"
            self.write(label, result, work.elapsed_s() if work and timed else None)

    def _beat(self) -> None:
        tick = min(MAX_TICK_S, self.every_s / 8)
        while not self.stopping.wait(tick):
            self.beat()

    def beat(self) -> None:
        """One heartbeat: new start-up stages, then a line if the log has been silent for most of `every_s`."""
        with self.lock:
            work = self.work
            if work is None:
                return
            self._stages()
            if time.monotonic() - self.last_line >= self.every_s * HEARTBEAT_SHARE:
                self.write(work.label, heartbeat(work), work.elapsed_s())

    def _stages(self) -> None:
        """A line for each start-up stage the watched log printed since the last look."""
        work, watch = self.work, self.watch
        if work is None or watch is None:
            return
        try:
            stages = watch.new_stages()
        except OSError:  # the log went away (a sandbox restart): the heartbeat goes on without stages
            stages, self.watch = [], None
        for stage in stages:
            work.done, work.context = watch.names.index(stage) + 1, f"last {stage}"
            work.note = f"reached {stage}"
            self.write(work.label, f"{work.note} ({work.count()})", work.elapsed_s())


def heartbeat(work: Work) -> str:
    """What a silent stretch of work says: that it still runs, how far it got, and where."""
    words = ["still running"]
    if work.count():
        words.append(f"{work.count()} done")
    if work.context:
        words.append(work.context)
    elif work.note and not work.count():
        words.append(work.note)
    return "; ".join(words)
