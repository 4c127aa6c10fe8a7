"""Scoring triage against labelled crash logs (`case_NNN.json`: log, category, key_line, ...).

Covers loading a folder of labelled cases, deciding whether a reported line is the labelled key line
(labels are copied from issue threads, so they may drop the log prefix, wrap the line in backticks or
elide parts with `...`; a line matches when the label's `...`-separated fragments appear in it in order,
or when the line (20+ characters) is contained in the label), and the leave-one-source-out ablation
(benchmarks/triage_corpus.py says what it measures and what it cannot). Used by that benchmark and the
corpus tests; the logs themselves are never copied into the repo.
"""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from porter.triage import rules, triage_text
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


# Forks and ROCm builds of an engine -> the engine: they print its messages, so for the ablation they are one source.
CODE_FAMILIES = {
    "ROCm/vllm": "vllm-project/vllm",
    "lemonade-sdk/vllm-rocm": "vllm-project/vllm",
    "ikawrakow/ik_llama.cpp": "ggml-org/llama.cpp",
}


def rules_reading(log: str) -> dict[str, set[str]]:
    """Every class rule that matches a line of the log, whatever rule outranks it there -> the classes it gave."""
    found: dict[str, set[str]] = defaultdict(set)
    for line in log.splitlines():
        body = split_prefix(line)[1].strip()
        present = rules.gate_words(body.lower())
        for rule in (*rules.RULES, *rules.OTHER_CLASS_RULES) if present else ():
            if rule.matches(body, present):
                found[rule.name].add(rule.category)
    return found


def _decider(case: dict) -> dict[str, set[str]]:
    """The first definition's view of a case: only the rule that decided it, with the class it gave."""
    result = triage_text(case["log"])
    return {result.findings[0].rule.split("+")[0]: {result.category}} if result.findings else {}


def _switched_off(cases: list[dict], source_of: Callable[[str], str], by_tracker: bool) -> dict[str, set[str]]:
    """Source -> the rules that read its logs and rightly read no other source's (by_tracker: that decide its
    cases and decide no other source's)."""
    reads: dict[str, set[str]] = defaultdict(set)  # rule -> the sources whose logs it reads
    evidence: dict[str, set[str]] = defaultdict(set)  # rule -> the sources where it reads a line rightly
    for case in cases:
        source = source_of(case["source_repo"])
        for rule, categories in (_decider(case) if by_tracker else rules_reading(case["log"])).items():
            reads[rule].add(source)
            if by_tracker or case["category"] in categories:
                evidence[rule].add(source)
    off: dict[str, set[str]] = defaultdict(set)
    for rule, sources in reads.items():
        for source in sources:
            if not evidence[rule] - {source}:
                off[source].add(rule)
    return off


def category_right(case: dict) -> dict[str, bool | None]:
    return {"category": triage_text(case["log"]).category == case["category"]}


def leave_one_source_out(
    cases: list[dict], kept: frozenset[str], by_tracker: bool = False, judge: Callable = category_right
) -> dict:
    """Category accuracy when each source (a code family, CODE_FAMILIES) is triaged with its own rules switched
    off (`_switched_off`), except the rules in `kept`. `by_tracker`: the first definition (source = tracker).
    `judge(case)` -> {figure: right, or None where the figure does not apply}, read while the source's rules are
    off; `figures` holds each figure's share of right answers ("category" is the accuracy)."""

    def source_of(repo: str) -> str:
        return repo if by_tracker else CODE_FAMILIES.get(repo, repo)

    off = _switched_off(cases, source_of, by_tracker)
    by_source: dict[str, list[dict]] = defaultdict(list)
    for case in cases:
        by_source[source_of(case["source_repo"])].append(case)
    per_source, switched_off, kept_by_declaration, misses = {}, {}, {}, []
    verdicts: dict[str, list[bool]] = defaultdict(list)
    figure_misses: dict[str, list[str]] = defaultdict(list)
    for source, source_cases in sorted(by_source.items()):
        own_rules = off[source] - kept
        if off[source] & kept:  # what the figure owes to `kept` rather than to evidence from another source
            kept_by_declaration[source] = sorted(off[source] & kept)
        rules.DISABLED.clear()
        rules.DISABLED.update(own_rules)
        try:
            judged = [(case["file"], judge(case)) for case in source_cases]
        finally:
            rules.DISABLED.clear()
        wrong = [name for name, verdict in judged if not verdict["category"]]
        for name, verdict in judged:
            for figure, right in verdict.items():
                if right is not None:
                    verdicts[figure].append(right)
                    figure_misses[figure] += [] if right else [name]
        per_source[source] = f"{len(source_cases) - len(wrong)}/{len(source_cases)}"
        misses += wrong
        if own_rules:
            switched_off[source] = sorted(own_rules)
    return {
        "accuracy": round(1 - len(misses) / len(cases), 3),
        "figures": {figure: round(sum(rights) / len(rights), 3) for figure, rights in verdicts.items()},
        "figure_misses": {figure: sorted(names) for figure, names in figure_misses.items() if names},
        "per_source": per_source,
        "rules_switched_off": switched_off,
        "kept_by_declaration": kept_by_declaration,
        "misses": sorted(misses),
    }


def owed_to_declarations(cases: list[dict], kept: frozenset[str], always_kept: frozenset[str]) -> dict[str, list[str]]:
    """Rule in `kept` but not `always_kept` -> the cases leave_one_source_out gets right only while that rule is
    declared: what the figure owes to each declaration rather than to evidence from another source."""
    baseline = set(leave_one_source_out(cases, kept)["misses"])
    owed = {}
    for rule in sorted(kept - always_kept):
        lost = sorted(set(leave_one_source_out(cases, kept - {rule})["misses"]) - baseline)
        if lost:
            owed[rule] = lost
    return owed
