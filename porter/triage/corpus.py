"""Scoring triage against labelled crash logs (`case_NNN.json`: log, category, key_line, ...).

Covers loading a folder of labelled cases and deciding whether a reported line is the labelled key
line: labels are copied from issue threads, so they may drop the log prefix, wrap the line in
backticks or elide parts with `...`; a line matches when the label's `...`-separated fragments appear
in it in order, or when the line (20+ characters) is contained in the label. Used by
benchmarks/triage_corpus.py and the corpus tests; the logs themselves are never copied into the repo.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from porter.triage.lines import fold_key, split_prefix

EXCERPT_NUMBER_COLUMN = re.compile(r"^\s*\d*[|>] ")
EXCERPT_REPEAT_NOTE = re.compile(r"\s+\[x\d+(?: from \d+ ranks)?, last at line \d+\]$")


REPO_ROOT = Path(__file__).resolve().parents[2]


def crashlogs_dir() -> Path:
    """`../shared/crashlogs` beside the repository, or $PORTER_CRASHLOGS (a git worktree lives elsewhere)."""
    return Path(os.environ.get("PORTER_CRASHLOGS") or REPO_ROOT.parent / "shared" / "crashlogs")


def load_cases(folder: Path) -> list[dict]:
    return [json.loads(path.read_text()) | {"file": path.name} for path in sorted(Path(folder).glob("case_*.json"))]


def normalise(text: str) -> str:
    text = re.sub(r"^\s*(?:>\s*)+", "", text)
    return re.sub(r"\s+", " ", text.replace("`", "").replace("\u2026", "...")).strip()


def same_line(expected: str, actual: str) -> bool:
    """The labelled key line names this line (see the module docstring for what is forgiven)."""
    expected, actual = normalise(expected), normalise(actual)
    if not expected or not actual:
        return False
    if len(actual) >= 20 and actual in expected:
        return True
    if fold_key(split_prefix(expected)[1]) == fold_key(split_prefix(actual)[1]):
        return True  # the same line from another rank or queue: only numbers and addresses differ
    position = 0
    for fragment in (part.strip() for part in expected.split("...")):
        if not fragment:
            continue
        found = actual.find(fragment, position)
        if found < 0:
            return False
        position = found + len(fragment)
    return True


def in_text(expected: str, text: str) -> bool:
    """The labelled line is one of these lines; an excerpt's `  123| ` number column and `[x8 ...]` repeat note
    are not part of a line."""
    return any(
        same_line(expected, EXCERPT_REPEAT_NOTE.sub("", EXCERPT_NUMBER_COLUMN.sub("", line)))
        for line in text.splitlines()
    )
