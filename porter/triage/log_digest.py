"""What a healthy start-up logged that decides the next move: its warnings and errors, and its kernel choices.

Lines a writer repeats once per rank ("[... TP3] Load weight begin") fold into one with the count of ranks
(`fold_ranks`, which read_log uses too). The warnings are the lines with a WARNING / ERROR level or a Python
warning class; the kernel choices are the lines matching the engine's own wording (`Engine.kernel_lines`:
attention and MoE backend, as sglang 0.5.20 and vLLM 0.25.1 log them) and aiter's tuned-config lookups,
which both engines print on ROCm: aiter/fused_moe.py logs `[fused_moe] using 2stage default for (key)` when
its tuned CSV has no row for the key (a miss) and `[fused_moe] using 2stage (kernelName1=...) for (key)` when
it has one. One streaming pass, bounded output. Does not classify crashes (scanner.py) nor decide anything.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from porter.triage.lines import ranks_in, shorten, split_prefix

LEVELS = {"WARNING", "WARN", "ERROR", "CRITICAL"}  # a level a prefix names (vLLM's `WARNING 07-14 ...`)
# in the message: sglang's format has no level, so its warnings say so themselves ("Warning: ...", a Python
# warning class); the twin's and glog's marks too
LEVEL = re.compile(r"^(?:WARNING|WARN|ERROR|CRITICAL)\b|^\w*(?:Warning|Error):|^\[?(?:Warning|Error)\b")
TUNED_LOOKUP = re.compile(r"\[fused_moe\] using (?P<stage>\S+) (?P<tag>default|\(.*?\)) for (?P<key>\(.*\))")
MAX_SHOWN, LINE_CHARS = 30, 300
MAX_KEPT = 2000  # lines kept a kind and tuned keys at most: a log is the sandbox's to write, of any size
# The mean accepted tokens per verify step as the engines log them while serving with a draft: sglang 0.5.20's
# decode batch line (managers/scheduler_components/metrics_reporter.py "accept len: 2.71"), vLLM 0.25.1's
# SpecDecoding metrics line (v1/spec_decode/metrics.py "Mean acceptance length: 2.61").
ACCEPT_LENGTH = re.compile(r"\b(?:accept len|Mean acceptance length): (\d+(?:\.\d+)?)")


@dataclass
class Folded:
    """One line as read, with the ranks that wrote the same text (empty: a line no rank tag names)."""

    number: int
    text: str
    ranks: set[str] = field(default_factory=set)

    def shown(self, limit: int | None = LINE_CHARS) -> str:
        text = shorten(self.text, limit) if limit else self.text
        return f"{text} (x{len(self.ranks)} ranks)" if len(self.ranks) > 1 else text


def fold_ranks(lines: Iterable[tuple[int, str]]) -> list[Folded]:
    """`lines` (number, text) with the lines whose message repeats one already kept, written by another rank,
    merged into that one: the first line stays, counting its ranks."""
    kept: list[Folded] = []
    by_message: dict[str, Folded] = {}
    for number, text in lines:
        channel, body = split_prefix(text)
        ranks = ranks_in(channel, "") if channel else []
        first = by_message.get(body) if ranks else None
        if first is not None and ranks[0] not in first.ranks:
            first.ranks.add(ranks[0])
            continue
        kept.append(Folded(number, text, set(ranks[:1])))
        if ranks and first is None:
            by_message[body] = kept[-1]
    return kept


@dataclass
class Digest:
    warnings: list[Folded] = field(default_factory=list)
    choices: dict[str, list[Folded]] = field(default_factory=dict)
    tuned_hit: dict[str, None] = field(default_factory=dict)  # aiter's MoE keys with a tuned row, in order
    tuned_missed: dict[str, None] = field(default_factory=dict)  # and those on the default
    unkept: int = 0  # warning lines past MAX_KEPT

    def render(self) -> str:
        shown = [f"  {line.number}: {line.shown()}" for line in self.warnings[:MAX_SHOWN]]
        more = len(self.warnings) + self.unkept - len(shown)
        if more > 0:
            shown.append(f"  ... {more} more: read_log grep 'warn|error' shows them all")
        count = len(self.warnings) + self.unkept
        lines = [f"Warnings and errors in the log: {count or 'none'}", *shown, "Kernel choices logged:"]
        for what, found in self.choices.items():
            texts = "; ".join(f"{line.number}: {line.shown(200)}" for line in found[:3]) or "no line says"
            lines.append(f"- {what}: {texts}")
        hit, missed = list(self.tuned_hit), list(self.tuned_missed)
        if hit or missed:
            first = f"; first missed key {missed[0]}" if missed else ""
            lines.append(
                f"- aiter tuned MoE configs: {len(hit)} keys with a tuned row, {len(missed)} on the default{first}"
            )
        return "\n".join(lines)


def digest(lines: Iterable[tuple[int, str]], kernel_lines: tuple[tuple[str, str], ...]) -> Digest:
    """The warnings and kernel choices of a log given as (number, text) lines, read once."""
    patterns = [(what, re.compile(pattern, re.IGNORECASE)) for what, pattern in kernel_lines]
    found = Digest()
    warnings: list[tuple[int, str]] = []
    noted: dict[str, list[tuple[int, str]]] = {what: [] for what, _ in kernel_lines}
    for number, text in lines:
        channel, body = split_prefix(text)
        if lookup := TUNED_LOOKUP.search(body):
            keys = found.tuned_missed if lookup.group("tag") == "default" else found.tuned_hit
            if len(keys) < MAX_KEPT:
                keys[lookup.group("key")] = None
        elif LEVEL.search(body) or LEVELS & set(channel.split("|")):
            if len(warnings) < MAX_KEPT:
                warnings.append((number, text))
            else:
                found.unkept += 1
        for what, pattern in patterns:
            if (match := pattern.search(text)) and len(noted[what]) < MAX_KEPT:
                noted[what].append((number, text if len(text) <= LINE_CHARS else _around(text, match)))
    found.warnings = fold_ranks(warnings)
    found.choices = {what: fold_ranks(lines) for what, lines in noted.items()}
    return found


def _around(text: str, match: re.Match) -> str:
    """The part of a long line around what matched (the arguments dump names every backend in one line)."""
    start = max(match.start() - 80, 0)
    return f"{'...' if start else ''}{text[start : match.end() + 120]}..."


def decode_steps(lines: Iterable[str], output_tok_s: float | None) -> str:
    """What a single stream's log says of its decode steps: the mean acceptance length the engine logged (the
    mean of its lines) and the step time it implies for one request (accepted tokens a step / output tok/s)."""
    lengths = [float(match.group(1)) for line in lines if (match := ACCEPT_LENGTH.search(line))]
    accepted = sum(lengths) / len(lengths) if lengths else 1.0
    step = f"a decode step every {1000 * accepted / output_tok_s:.1f} ms" if output_tok_s else "no step time"
    if not lengths:
        return f"  decode: no speculative acceptance logged during the check (1 token a step): {step}"
    return f"  decode: mean acceptance length {accepted:.2f} ({len(lengths)} engine lines during the check): {step}"
