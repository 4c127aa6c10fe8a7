"""The read_log tool's grep over one server log, run in a child process under a time bound.

The pattern is the model's: Python's backtracking engine takes exponential time on some patterns (`(a+)+$` on a
line of 40 `a` and a `!` needs about 2^40 steps), and a match in progress cannot be interrupted from another
thread. So the scan runs in a child interpreter (stdlib only, quick to start) that porter kills when the bound
passes: a base time plus a time per MiB of log, far above what a plain pattern needs. The child streams the
log in bounded lines and answers JSON: the matching lines with their context and the number of matches. Does
not render what the model reads (log_reader.py does) nor choose the log.

Child protocol: `python -m porter.loop.log_grep` reads {"path", "pattern", "context", "last", "max_lines"} on stdin
and writes {"lines": [[number, text], ...], "matches": N} on stdout.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import deque
from collections.abc import Iterator
from pathlib import Path

MAX_READ_LINE = 1 << 16  # characters of one log line read at most; the rest is skipped
GREP_BASE_S = 10.0
GREP_S_PER_MIB = 0.1  # a plain pattern scans a MiB in a few ms; a backtracking one never finishes


class GrepTimeout(Exception):
    """The pattern did not finish within the bound; the message says what to do instead."""


def bounded_lines(path: str | Path, limit: int = MAX_READ_LINE, start: int = 0) -> Iterator[str]:
    """The file's lines from byte `start`, each cut at `limit` characters: the server (in the sandbox) writes the
    log, and one endless line read whole would exhaust porter's memory."""
    with open(path, encoding="utf-8", errors="replace") as log:
        log.seek(start)
        while line := log.readline(limit):
            if not line.endswith("\n"):
                while (rest := log.readline(limit)) and not rest.endswith("\n"):
                    pass  # the rest of a cut line is skipped, a piece at a time
            yield line.rstrip("\n")


def grep(path: Path, pattern: str, context: int, last: int | None, max_lines: int) -> tuple[list, int]:
    """(shown lines as (number, text), matches), in a child process killed after the bound (GrepTimeout)."""
    request = {"path": str(path), "pattern": pattern, "context": context, "last": last, "max_lines": max_lines}
    bound = GREP_BASE_S + GREP_S_PER_MIB * path.stat().st_size / (1 << 20)
    package_root = str(Path(__file__).resolve().parents[len(__name__.split(".")) - 1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", __name__]
    try:
        done = subprocess.run(
            command, input=json.dumps(request), capture_output=True, text=True, timeout=bound, env=env
        )
    except subprocess.TimeoutExpired:
        raise GrepTimeout(
            f"grep {pattern!r} was stopped after {bound:.0f} s over {path.name} ({path.stat().st_size:,} bytes): the "
            "pattern backtracks without end on some line (nested repetition such as (a+)+ or (a|a)* does). Nothing "
            "was shown; use plain text or a single repetition"
        ) from None
    if done.returncode != 0:
        raise GrepTimeout(f"grep {pattern!r} failed: {done.stderr.strip()[-500:]}")
    answer = json.loads(done.stdout)
    return [tuple(item) for item in answer["lines"]], answer["matches"]


def _scan(path: str, pattern: str, context: int, last: int | None, max_lines: int) -> tuple[list, int]:
    wanted = re.compile(pattern, re.IGNORECASE)
    before: deque[tuple[int, str]] = deque(maxlen=context)
    if last is not None:
        return _scan_last(path, wanted, before, context, min(last, max_lines), max_lines)
    shown: dict[int, str] = {}
    matches, after = 0, 0
    for index, line in enumerate(bounded_lines(path), start=1):
        if wanted.search(line):
            matches += 1
            if len(shown) < max_lines:
                shown.update(before)
                shown[index] = line
                after = context
        elif after and len(shown) < max_lines:
            shown[index] = line
            after -= 1
        before.append((index, line))
    return sorted(shown.items())[:max_lines], matches


def _scan_last(path: str, wanted: re.Pattern, before: deque, context: int, last: int, max_lines: int):
    """The last `last` matching lines, each with its context: a block per match, the oldest dropped."""
    blocks: deque[list[tuple[int, str]]] = deque(maxlen=last)
    matches, after = 0, 0
    for index, line in enumerate(bounded_lines(path), start=1):
        if wanted.search(line):
            matches += 1
            blocks.append([*before, (index, line)])
            after = context
        elif after:
            blocks[-1].append((index, line))
            after -= 1
        before.append((index, line))
    return sorted(dict(item for block in blocks for item in block).items())[-max_lines:], matches


def main() -> None:
    lines, matches = _scan(**json.load(sys.stdin))
    json.dump({"lines": lines, "matches": matches}, sys.stdout)


if __name__ == "__main__":
    main()
