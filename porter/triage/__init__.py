"""Crash and start-up logs -> the class of failure, the line that names it, and a condensed excerpt.

`triage_file` / `triage_text` read a log in one streaming pass with constant memory
and return a `Triage`: the category (one of rules.CATEGORIES, or "ok" for a log with no error and no
finding), the key line and its number, the implicated file/function/kernel, a signature stable across
runs of the same failure, an excerpt within a token budget (characters / 4) that always contains the
key line, and every class seen as a `Finding` with structured facts for rule-based fixers and a confidence
(an `other` finding is unclassified: the excerpt says so and shows the strongest evidence). When findings
compete, the precedence is the rule scores in rules.py. `triage_main` is the `porter triage` command.
Modules: lines.py (Aho-Corasick prefilter, prefixes), rules.py (classes, precedence), status.py (status
codes), facts.py, scanner.py (the pass), excerpt.py, summary.py (the answer). Does not fix anything or talk to a model.
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from porter.terminal import printable
from porter.triage.scanner import CHUNK_BYTES, Scanner
from porter.triage.summary import Triage, build_triage

__all__ = ["Triage", "triage_file", "triage_main", "triage_text"]


def _scan(chunks: Iterable[tuple[bytes, bool]], token_budget: int) -> Triage:
    scanner = Scanner()
    for chunk, continues in chunks:
        scanner.feed(chunk, continues)
    scanner.finish()
    return build_triage(scanner, token_budget)


def _file_chunks(stream) -> Iterator[tuple[bytes, bool]]:
    """(chunk, continues): chunks that end at a line end, at most two reads long. A line longer than a chunk (tqdm
    redraws with \\r and no newline) is cut after its last \\r, or anywhere when it has none, and `continues`
    says the next chunk goes on with it; the last line of the file need not end with a newline."""
    carry = b""
    while True:
        block = stream.read(CHUNK_BYTES)
        if not block:
            break
        block = carry + block
        cut = block.rfind(b"\n") + 1
        if cut:
            carry = block[cut:]
            yield block[:cut], False
        elif len(block) >= CHUNK_BYTES:
            cut = block.rfind(b"\r") + 1 or len(block)
            carry = block[cut:]
            yield block[:cut] + b"\n", True
        else:
            carry = block
    if carry:
        yield carry + b"\n", False


def triage_file(path: str | Path, token_budget: int = 4000) -> Triage:
    """Triage a log file of any size in constant memory."""
    with open(path, "rb") as stream:
        return _scan(_file_chunks(stream), token_budget)


def triage_text(text: str, token_budget: int = 4000) -> Triage:
    """Triage a log held in a string."""
    data = text.encode("utf-8", "replace")
    return _scan(_file_chunks(io.BytesIO(data)), token_budget)


def render_text(result: Triage) -> str:
    """What a person reads: the excerpt (it opens with the class and key line), then the facts."""
    lines = [result.excerpt.rstrip("\n"), f"signature: {result.signature}"]
    for finding in result.findings:
        lines.append(f"facts[{finding.category}]: {json.dumps(finding.facts, default=str, sort_keys=True)}")
    return "\n".join(lines)


def triage_main(logfile: str, as_json: bool) -> int:
    """`porter triage LOGFILE [--json]` (`-` reads stdin). Returns the exit code: 0, or 2 for a missing file."""
    try:
        if logfile == "-":
            result = _scan(_file_chunks(sys.stdin.buffer), 4000)
        else:
            result = triage_file(logfile)
    except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        print(f"porter: cannot read log {logfile!r}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(printable(render_text(result)))  # a log's escape sequences stop here, not in the terminal
    if as_json:
        print(json.dumps(result.to_dict(), default=str))
    return 0
