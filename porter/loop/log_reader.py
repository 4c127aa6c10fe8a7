"""The `read_log` tool's reading: grep, tail or a line range over the server logs of this run, bounded.

The logs live on the host (`RUN/logs/serve-NNN.log`, one per launch), out of the sandbox's reach, so the
model reads them through porter. Every answer is bounded (MAX_LINES lines of at most MAX_LINE_CHARS
characters, or one line asked for alone, whole up to MAX_READ_LINE; a cut line says how to read it whole);
the lines several ranks wrote alike show once, with their count (triage/log_digest.py). A log is read as a
stream, so a multi-gigabyte log costs time, never memory; a grep (the model's regular expression) runs in a
child process under a time bound (porter/loop/log_grep.py); terminal control sequences are stripped
(porter/terminal.py). Does not triage (porter/triage) and does not decide what a log means.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import deque
from collections.abc import Iterator
from pathlib import Path

from porter.errors import ToolError
from porter.loop import log_grep
from porter.loop.log_grep import MAX_READ_LINE, bounded_lines
from porter.terminal import printable
from porter.triage.log_digest import Folded, fold_ranks

MAX_LINES = 200
MAX_LINE_CHARS = 400
DEFAULT_TAIL = 60
LOG_NAME = re.compile(r"^serve-(\d+)(?:-reduced)?\.log$")


def launches(log_dir: Path) -> dict[int, Path]:
    """Launch number -> its log, oldest first."""
    found = {int(m.group(1)): path for path in log_dir.glob("serve-*.log") if (m := LOG_NAME.match(path.name))}
    return dict(sorted(found.items()))


def read_log(
    log_dir: Path,
    launch: int | None = None,
    grep: str | None = None,
    context: int = 0,
    tail: int | None = None,
    start_line: int | None = None,
    end_line: int | None = None,
) -> tuple[str, dict]:
    logs = launches(log_dir)
    if not logs:
        raise ToolError("there is no server log yet: call serve first")
    number = launch if launch is not None else max(logs)
    if number not in logs:
        raise ToolError(f"there is no log of launch {number}; the launches of this run are {list(logs)}")
    path = logs[number]
    if grep is not None:
        shown, note = _grep(path, grep, context, tail)
    elif start_line is not None or end_line is not None:
        shown, note = _range(path, start_line or 1, end_line)
    else:
        shown, note = _tail(path, tail or DEFAULT_TAIL)
    total = sum(1 for _ in _lines(path))
    folded = fold_ranks(shown)
    header = f"{path.name} (launch {number}; launches {list(logs)}; {total} lines): {note}"
    if len(folded) < len(shown):  # on a line of its own: the header is what a replay compares
        header += f"\n{len(shown)} lines shown as {len(folded)}: a line several ranks wrote alike once, with its count"
    limit = MAX_READ_LINE if len(folded) == 1 else MAX_LINE_CHARS  # one line asked for comes whole
    body = "\n".join(f"{line.number:7d}  {_clean(line, number, limit)}" for line in folded)
    return f"{header}\n{body}" if body else header, {"launch": number, "lines": total, "shown": len(shown)}


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    return enumerate(bounded_lines(path), start=1)


def _clean(line: Folded, launch: int, limit: int) -> str:
    text = printable(line.text)
    if len(text) > limit:
        whole = json.dumps({"launch": launch, "start_line": line.number, "end_line": line.number})
        text = f"{text[:limit]} [... {len(text) - limit} more characters; read_log {whole} shows the line whole]"
    line.text = text
    return line.shown(limit=None)


def _grep(path: Path, pattern: str, context: int, last: int | None) -> tuple[list[tuple[int, str]], str]:
    _pattern(pattern)
    try:
        lines, matches = log_grep.grep(path, pattern, context, last, MAX_LINES)
    except log_grep.GrepTimeout as exc:
        raise ToolError(str(exc)) from None
    if last is not None:
        return lines, f"{matches} lines match {pattern!r}; the last {min(last, MAX_LINES, matches)} shown"
    cut = " (the first shown; narrow the pattern, or add tail for the last ones)" if len(lines) >= MAX_LINES else ""
    return lines, f"{matches} lines match {pattern!r}{cut}"


def _pattern(pattern: str) -> re.Pattern:
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error as error:
        raise ToolError(f"grep {pattern!r} is not a valid regular expression ({error})") from None


def _range(path: Path, first: int, last: int | None) -> tuple[list[tuple[int, str]], str]:
    last = last if last is not None else first + MAX_LINES - 1
    if last < first:
        raise ToolError(f"end_line {last} is before start_line {first}")
    last = min(last, first + MAX_LINES - 1)
    lines = list(itertools.islice(_lines(path), first - 1, last))
    return lines, f"lines {first}-{last}" + ("" if last - first + 1 < MAX_LINES else f" (at most {MAX_LINES})")


def _tail(path: Path, count: int) -> tuple[list[tuple[int, str]], str]:
    count = min(count, MAX_LINES)
    return list(deque(_lines(path), maxlen=count)), f"the last {count} lines"
