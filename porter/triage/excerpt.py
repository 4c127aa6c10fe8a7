"""The condensed view of a log: what the model and a person read instead of the whole file.

Covers choosing blocks within a token budget (the key line first, always; then its traceback and
context, the other findings, the log's head and tail) and rendering them in log order with line
numbers, folded repeats ("[x8 from 8 ranks]"), collapsed tracebacks (entry frame, project frames and
the innermost frames; library frames counted, not shown) and counts of every gap. Tokens are
estimated as characters / 4, the usual figure for English and code with the tokenizers porter talks to.
Does not classify or extract facts.
"""

from __future__ import annotations

from dataclasses import dataclass

from porter.triage.lines import decode, fold_key, shorten, split_prefix
from porter.triage.scanner import Event, Frame, OpenTraceback, Scanner

CHARS_PER_TOKEN = 4
LINE_CHARS = 600
PROJECT_FRAMES = 6


@dataclass
class Entry:
    line_no: int | None  # None for a pseudo line ("... 12 frames omitted"), placed by `position`
    text: str
    note: str = ""
    is_key: bool = False
    position: float = 0.0

    def __post_init__(self) -> None:
        if self.line_no is not None:
            self.position = float(self.line_no)


def pseudo(after_line_no: int, text: str) -> Entry:
    return Entry(None, text, position=after_line_no + 0.5)


def estimate_tokens(text: str) -> int:
    return -(-len(text) // CHARS_PER_TOKEN)


def repeat_note(event: Event) -> str:
    if event.count <= 1:
        return ""
    ranks = f" from {len(event.ranks)} ranks" if len(event.ranks) > 1 else ""
    return f"   [x{event.count}{ranks}, last at line {event.last_line_no}]"


def traceback_entries(traceback: OpenTraceback, frame_budget: int) -> list[Entry]:
    """The entry frame, the project frames nearest the failure and the innermost frame; library frames counted."""
    frames = traceback.frames
    project = [index for index in range(len(frames) - 1, -1, -1) if not frames[index].is_library]
    keep = set(project[: min(PROJECT_FRAMES, frame_budget)])
    if frames:
        keep.update({0, len(frames) - 1})
    chained = "   [chained: raised while handling an earlier exception]" if traceback.chained else ""
    if traceback.header is None:
        entries = [
            pseudo(traceback.line_no - 1, f"Traceback (most recent call last): [its start is not in the log]{chained}")
        ]
    else:
        entries = [Entry(traceback.line_no, traceback.header + chained)]
    skipped, last_shown = traceback.dropped_frames, traceback.line_no
    for index, frame in enumerate(frames):
        if index not in keep:
            skipped += 1
            continue
        if skipped:
            entries.append(pseudo(last_shown, f"  ... {skipped} frames omitted"))
            skipped = 0
        entries.extend(frame_entries(frame))
        last_shown = frame.source_line_no or frame.line_no
    return entries


def frame_entries(frame: Frame) -> list[Entry]:
    entries = [Entry(frame.line_no, f'  File "{frame.path}", line {frame.line}, in {frame.function}')]
    if frame.source:
        entries.append(Entry(frame.source_line_no, f"    {shorten(frame.source, 200)}"))
    return entries


def event_entries(event: Event, is_key: bool, context_lines: int, frame_budget: int) -> list[Entry]:
    entries = [Entry(line_no, shorten(text, LINE_CHARS)) for line_no, text in event.before[-context_lines:]]
    if event.traceback is not None and frame_budget > 0:
        entries.extend(traceback_entries(event.traceback, frame_budget))
    body = event.body if is_key else shorten(event.body, LINE_CHARS)
    entries.append(Entry(event.line_no, body, repeat_note(event), is_key))
    entries.extend(Entry(line_no, shorten(text, LINE_CHARS)) for line_no, text in event.after[: 4 if is_key else 2])
    return entries


def raw_entries(lines: list[tuple[int, bytes]], shown: set[str]) -> list[Entry]:
    """Head or tail lines, minus caret underlines and repeats of what is already shown (other ranks' copies)."""
    entries = []
    for line_no, raw in lines:
        body = split_prefix(decode(raw[:4000]))[1]
        key = fold_key(body)
        if key in shown or (body.strip() and set(body.strip()) <= set("^~ ")):
            continue
        shown.add(key)
        entries.append(Entry(line_no, shorten(body, LINE_CHARS)))
    return entries


def render(entries: list[Entry], total_lines: int) -> list[str]:
    """Entries in log order, each line once (the key block's copy wins), with the size of every gap."""
    ordered = sorted(enumerate(entries), key=lambda pair: (pair[1].position, pair[0]))
    shown_lines: set[int] = set()
    shown_pseudo: set[tuple[float, str]] = set()
    lines: list[str] = []
    previous = 0
    for _, entry in ordered:
        if entry.line_no is None:
            if (entry.position, entry.text) in shown_pseudo:
                continue
            shown_pseudo.add((entry.position, entry.text))
            lines.append(f"{'':>7}| {entry.text}")
            continue
        if entry.line_no in shown_lines:
            continue
        shown_lines.add(entry.line_no)
        if entry.line_no > previous + 1:
            lines.append(f"{'':>7}  ... {entry.line_no - previous - 1} lines omitted ...")
        previous = max(previous, entry.line_no)
        lines.append(f"{entry.line_no:>7}{'>' if entry.is_key else '|'} {entry.text}{entry.note}")
    if total_lines > previous:
        lines.append(f"{'':>7}  ... {total_lines - previous} lines omitted (end of log) ...")
    return lines


def build_excerpt(header: list[str], key: Event | None, others: list[Event], scan: Scanner, token_budget: int) -> str:
    """Header, then the chosen blocks in log order; never more than `token_budget` tokens (key line kept)."""
    budget = token_budget * CHARS_PER_TOKEN - sum(len(line) + 1 for line in header) - 120
    chosen: list[Entry] = []
    if key is not None:
        for context_lines, frame_budget in ((6, 14), (3, 8), (1, 4), (0, 0)):
            block = event_entries(key, True, context_lines, frame_budget)
            if cost(block) <= budget or frame_budget == 0:
                chosen.extend(block)
                break
    shown = {fold_key(entry.text) for entry in chosen}
    optional = [without_repeats(event_entries(event, False, 2, 6), event.line_no, shown) for event in others]
    shown |= {fold_key(entry.text) for block in optional for entry in block}
    optional += [raw_entries(scan.head, shown), raw_entries(list(scan.tail), shown)]
    for block in optional:
        if cost(chosen + block) <= budget:
            chosen.extend(block)
        else:
            smaller = block[-1:]
            if cost(chosen + smaller) <= budget:
                chosen.extend(smaller)
    return "\n".join(header + render(chosen, scan.line_count)) + "\n"


def without_repeats(entries: list[Entry], own_line_no: int, shown: set[str]) -> list[Entry]:
    """An event's context minus copies of lines already shown (another rank's copy of the key line)."""
    return [entry for entry in entries if entry.line_no == own_line_no or fold_key(entry.text) not in shown]


def cost(entries: list[Entry]) -> int:
    return sum(len(entry.text) + len(entry.note) + 10 for entry in entries)
