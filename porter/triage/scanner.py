"""The streaming pass over a log: constant memory, one fast check per ordinary line.

Covers reading a log as byte chunks, the hot loop (a digit-free template of each line is looked up in a
set of templates already known to be harmless; a new template gets one trigger search), per-writer
traceback assembly (ranks interleave, so each channel has its own open traceback), continuation lines,
folding repeats into one event with a count and the ranks seen, and the context kept for each event.
Memory is bounded by caps on templates, events, tracebacks and context, never by log size. Does not
pick the primary finding or render anything (report.py, excerpt.py).
"""

from __future__ import annotations

import bisect
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from porter.triage import rules
from porter.triage.facts import MODULE_NAME
from porter.triage.lines import DIGITS, decode, fold_key, ranks_in, shorten, split_prefix, trigger_positions

CHUNK_BYTES = 1 << 22
MAX_TEMPLATES = 200_000  # harmless-line templates remembered; cleared when full so memory stays flat
MAX_TEMPLATE_BYTES = 4_096
MAX_EVENTS = 2_000
MAX_OPEN_TRACEBACKS = 64
MAX_FRAMES = 48
CONTEXT_LINES = 12  # lines kept before a new event: the kernel logged before a fault, the compiler command
CONTINUATION_LINES = 4
STALE_TRACEBACK_LINES = 60  # a traceback whose writer said nothing for this long was cut off
LINE_LIMIT = 2_000  # characters of one line that are kept
LONG_LINE_BYTES = 16_384  # longer lines are read redraw by redraw (\r), around each trigger word
MAX_VARIANTS = 16  # distinct texts kept per folded event (the shapes of an untuned-config warning)
FOLD_CACHE_AFTER = 32  # copies of a message looked at in full before the rest are only counted
LIBRARY_FRAME = re.compile(
    r"/(?:torch|triton|functools|threading|multiprocessing|concurrent|asyncio|runpy|importlib|contextlib|click"
    r"|uvloop|uvicorn|starlette|fastapi|ray|typing|tqdm|safetensors)/|<frozen"
    r"|/lib/python3\.\d+/(?!site-packages/|dist-packages/)[\w/.-]+\.py$"  # the standard library
)
SHORT_PATH = re.compile(r".*(?:site-packages/|dist-packages/|/python/)")


def hit_lines(chunk: bytes) -> dict[int, list[int]]:
    """Index of each line of `chunk` that holds a trigger word -> the offsets of those words in `chunk` (all of
    them for a line longer than LONG_LINE_BYTES, which is read around each; the first otherwise)."""
    hits: dict[int, list[int]] = {}
    index, counted_to, line_end, long_line = 0, 0, -1, False
    for position in trigger_positions(chunk):
        if position < line_end:  # another word on the line just seen
            if long_line:
                hits[index].append(position)
            continue
        index += chunk.count(b"\n", counted_to, position)
        counted_to = position
        line_end = chunk.find(b"\n", position)
        line_end = len(chunk) if line_end < 0 else line_end
        long_line = line_end - chunk.rfind(b"\n", 0, position) > LONG_LINE_BYTES
        hits[index] = [position]
    return hits


def bounded(raw: bytes) -> bytes:
    """At most 2 * LINE_LIMIT bytes of a line: its end when carriage returns redraw it (what a terminal shows)."""
    limit = LINE_LIMIT * 2
    if len(raw) <= limit:
        return raw
    return raw[-limit:] if b"\r" in raw else raw[:limit]


@dataclass
class Frame:
    line_no: int
    path: str
    line: int
    function: str
    source: str | None = None
    source_line_no: int | None = None

    @property
    def is_library(self) -> bool:
        return LIBRARY_FRAME.search(self.path) is not None

    def where(self) -> str:
        return f"{SHORT_PATH.sub('', self.path)}:{self.line} ({self.function})"


@dataclass
class OpenTraceback:
    line_no: int
    header: str | None  # None when the log starts mid-traceback
    chained: bool
    frames: list[Frame] = field(default_factory=list)
    dropped_frames: int = 0
    last_line_no: int = 0

    def add(self, frame: Frame) -> None:
        if len(self.frames) >= MAX_FRAMES:
            del self.frames[2]  # keep the entry frames and the innermost ones, which say where it failed
            self.dropped_frames += 1
        self.frames.append(frame)
        self.last_line_no = frame.line_no


@dataclass
class Event:
    rule: str
    category: str
    score: int
    line_no: int
    body: str
    before: list[tuple[int, str]]
    count: int = 1
    last_line_no: int = 0
    ranks: set[str] = field(default_factory=set)
    after: list[tuple[int, str]] = field(default_factory=list)
    traceback: OpenTraceback | None = None
    implicated: str | None = None
    variants: list[str] = field(default_factory=list)
    key: str = ""
    confidence: float = 0.3

    @property
    def text(self) -> str:
        return "\n".join([self.body, *(line for _, line in self.after)])


class Scanner:
    """Feed byte chunks (each ending at a line boundary), then read `events` and the other findings."""

    def __init__(self) -> None:
        self.harmless: set[bytes] = set()
        self.fold_cache: dict[bytes, str] = {}
        self.events: dict[str, Event] = {}
        self.line_count = 0
        self.head: list[tuple[int, bytes]] = []
        self.tail: deque[tuple[int, bytes]] = deque(maxlen=12)
        self.previous: list[bytes] = []
        self.open_tracebacks: dict[str, OpenTraceback] = {}
        self.chained_channels: set[str] = set()
        self.continuation: tuple[Event, str, int] | None = None
        self.last_event: dict[str, tuple[Event, int]] = {}
        self.kernel: tuple[int, str, str] | None = None
        self.ready_line_no: int | None = None
        self.module_names: list[str] = []
        self.arch: str | None = None
        self.every_line = False
        self.eviction_floor = 0  # events no stronger than this are not kept once the table is full

    def feed(self, chunk: bytes, continues: bool = False) -> None:
        """Scan a chunk that ends at a line end; `continues`: its last line goes on in the next chunk (a line too
        long to hold is cut, and its pieces keep one line number)."""
        lines = chunk.split(b"\n")
        if lines and not lines[-1]:
            lines.pop()
        hits = hit_lines(chunk)
        candidates = sorted(hits)
        position = 0
        if self.every_line:  # a traceback or continuation runs on from the previous chunk
            position = bisect.bisect_left(candidates, self._every_line_from(0, lines, hits))
        harmless = self.harmless
        while position < len(candidates):
            index = candidates[position]
            position += 1
            raw = lines[index]
            if len(raw) > LONG_LINE_BYTES:
                self._scan_long_line(self.line_count + index + 1, chunk, hits[index])
                continue
            template = raw.translate(None, DIGITS)
            if template in harmless:
                continue
            folded = self.events.get(self.fold_cache.get(template, ""))
            if folded is not None:  # one more copy of a message seen many times: count it, nothing else
                folded.count += 1
                folded.last_line_no = self.line_count + index + 1
                continue
            self._handle(self.line_count + index + 1, lines, index, True)
            if self.every_line:
                position = bisect.bisect_left(candidates, self._every_line_from(index + 1, lines, hits), position)
        self._keep_edges(lines)
        self.line_count += len(lines) - (1 if continues and lines else 0)

    def _every_line_from(self, index: int, lines: list[bytes], hits: dict[int, list[int]]) -> int:
        """Look at every line (a traceback or a continuation is open); returns where the fast path resumes."""
        while self.every_line and index < len(lines):
            self._handle(self.line_count + index + 1, lines, index, index in hits)
            index += 1
        return index

    def _scan_long_line(self, line_no: int, chunk: bytes, positions: list[int]) -> None:
        """A line longer than a screen (progress bars redrawn with \\r, no newline for megabytes): each redraw
        holding a trigger word is read as a line of its own, under the line's number; a redraw (or a window of
        LINE_LIMIT bytes when there is no \\r) is read once however many trigger words it holds."""
        end = -1
        for at in positions:
            if at < end:
                continue
            low = max(0, at - LINE_LIMIT)
            start = max(chunk.rfind(b"\r", low, at), chunk.rfind(b"\n", low, at))
            start = start + 1 if start >= 0 else low
            ends = [found for found in (chunk.find(b"\r", at, at + LINE_LIMIT), chunk.find(b"\n", at, at + LINE_LIMIT))]
            end = min((found for found in ends if found >= 0), default=min(len(chunk), at + LINE_LIMIT))
            self._handle(line_no, [chunk[start:end]], 0, True)

    def _keep_edges(self, raw_lines: list[bytes]) -> None:
        base = self.line_count
        if len(self.head) < 6:
            self.head.extend(
                (base + index + 1, bounded(raw)) for index, raw in enumerate(raw_lines[: 6 - len(self.head)])
            )
        first_tail = max(0, len(raw_lines) - 12)
        self.tail.extend((base + index + 1, bounded(raw_lines[index])) for index in range(first_tail, len(raw_lines)))
        self.previous = (self.previous + [bounded(raw) for raw in raw_lines[-CONTEXT_LINES:]])[-CONTEXT_LINES:]

    def _handle(self, line_no: int, raw_lines: list[bytes], index: int, triggered: bool) -> None:
        text = decode(bounded(raw_lines[index]))
        channel, body = split_prefix(text)
        body = shorten(body, LINE_LIMIT)
        if self._continues(line_no, channel, body, triggered) or self._in_traceback(line_no, channel, body):
            self._update_mode(line_no)
            return
        if rules.TRACEBACK_START.search(body) or rules.FRAME.match(body):
            self._open_traceback(line_no, channel, body)
        elif rules.CHAIN.match(body):
            self.chained_channels.add(channel)
        elif triggered and not self._observe(line_no, channel, body, raw_lines, index):
            self._remember_harmless(raw_lines[index])
        self._update_mode(line_no)

    def _continues(self, line_no: int, channel: str, body: str, triggered: bool) -> bool:
        if self.continuation is None:
            return False
        event, event_channel, remaining = self.continuation
        own_match = rules.classify(body) if triggered else None
        if (
            channel != event_channel
            or not (body[:1].isspace() or body.startswith(">>>"))  # lld's ">>> referenced by"
            or not body.strip()
            or rules.FRAME.match(body)
            or (own_match is not None and own_match.score > event.score)
        ):
            self.continuation = None
            return False
        if event.line_no == event.last_line_no:
            event.after.append((line_no, body))
        self.continuation = (event, channel, remaining - 1) if remaining > 1 else None
        return True

    def _in_traceback(self, line_no: int, channel: str, body: str) -> bool:
        open_traceback = self.open_tracebacks.get(channel)
        if open_traceback is None:
            return False
        frame = rules.FRAME.match(body)
        if frame:
            open_traceback.add(Frame(line_no, frame["path"], int(frame["line"]), frame["function"] or "?"))
            return True
        stripped = body.strip()
        if not stripped or body[:1].isspace():
            if stripped and open_traceback.frames and open_traceback.frames[-1].source is None:
                if not set(stripped) <= set("^~ "):
                    open_traceback.frames[-1].source = stripped
                    open_traceback.frames[-1].source_line_no = line_no
            open_traceback.last_line_no = line_no
            return True
        if rules.TRACEBACK_START.search(body):
            self._close_traceback(channel, None)
            return False
        self._close_traceback(channel, (line_no, body))
        return True

    def _open_traceback(self, line_no: int, channel: str, body: str) -> None:
        if channel in self.open_tracebacks:
            self._close_traceback(channel, None)
        if len(self.open_tracebacks) >= MAX_OPEN_TRACEBACKS:
            oldest = min(self.open_tracebacks, key=lambda name: self.open_tracebacks[name].last_line_no)
            self._close_traceback(oldest, None)
        if rules.FRAME.match(body) and self._adopt_header(line_no, channel):
            self._in_traceback(line_no, channel, body)
            return
        header = body.strip() if rules.TRACEBACK_START.search(body) else None
        opened = OpenTraceback(line_no, header, channel in self.chained_channels, last_line_no=line_no)
        self.chained_channels.discard(channel)
        self.open_tracebacks[channel] = opened
        if rules.FRAME.match(body):
            self._in_traceback(line_no, channel, body)

    def _adopt_header(self, line_no: int, channel: str) -> bool:
        """sglang logs the header with its prefix and the frames without: join them into one traceback."""
        for other_channel, waiting in self.open_tracebacks.items():
            if not waiting.frames and line_no - waiting.last_line_no <= 2:
                del self.open_tracebacks[other_channel]
                self.open_tracebacks[channel] = waiting
                return True
        return False

    def _close_traceback(self, channel: str, exception: tuple[int, str] | None) -> None:
        traceback = self.open_tracebacks.pop(channel)
        innermost = next((frame for frame in reversed(traceback.frames) if not frame.is_library), None)
        innermost = innermost or (traceback.frames[-1] if traceback.frames else None)
        if exception is None:
            if not traceback.frames:
                return
            match = rules.Match("unterminated_traceback", "other", 35)
            last = traceback.frames[-1]
            exception = (last.line_no, f'File "{last.path}", line {last.line}, in {last.function}')
        else:
            last_source = traceback.frames[-1].source if traceback.frames else None
            paths = tuple(frame.path for frame in traceback.frames)
            match = rules.classify_exception(exception[1].strip(), last_source, paths)
        event = self._add_event(exception[0], channel, exception[1].strip(), match, list)
        if event is not None and event.traceback is None:
            event.traceback = traceback
            event.implicated = innermost.where() if innermost else None

    def _remember_harmless(self, raw: bytes) -> None:
        """A line that triggered but meant nothing: its template skips the slow path from now on."""
        template = raw.translate(None, DIGITS)
        if len(template) > MAX_TEMPLATE_BYTES:  # a giant line is cheaper to re-check than to keep
            return
        if len(self.harmless) >= MAX_TEMPLATES:
            self.harmless.clear()
        self.harmless.add(template)

    def _observe(self, line_no: int, channel: str, body: str, raw_lines: list[bytes], index: int) -> bool:
        """Record what a triggered line says; False when it said nothing worth its template being looked at again."""
        if rules.HEALTHY.search(body):
            self.ready_line_no = self.ready_line_no or line_no
            return True
        hint = rules.kernel_hint(body)
        if hint:
            self.kernel = (line_no, hint, body)
        if "exclude" in body and len(self.module_names) < 32:
            self.module_names.extend(MODULE_NAME.findall(body)[:8])
        if self.arch is None and "gfx" in body:
            found = re.search(r"\bgfx\d\w*", body)
            self.arch = found.group(0) if found else None
        match = rules.classify(body)
        if match is None:
            return bool(hint) or "exclude" in body or "gfx" in body
        match = self._inherit_from_intro(line_no, channel, match)
        event = self._add_event(line_no, channel, body.strip(), match, lambda: self._context(raw_lines, index, line_no))
        if event is not None:
            self.continuation = (event, channel, CONTINUATION_LINES)
            self.last_event[channel] = (event, line_no)
            self._maybe_cache_fold(event, raw_lines[index])
        return True

    def _maybe_cache_fold(self, event: Event, raw: bytes) -> None:
        """After enough copies (ranks and variants seen), later copies of a one-line message are only counted."""
        settled = len(event.variants) >= MAX_VARIANTS or event.category != "slow_fallback_perf"
        small = len(raw) <= MAX_TEMPLATE_BYTES and len(self.fold_cache) < MAX_TEMPLATES
        if event.count >= FOLD_CACHE_AFTER and settled and not event.after and small:
            self.fold_cache[raw.translate(None, DIGITS)] = event.key

    def _inherit_from_intro(self, line_no: int, channel: str, match: rules.Match) -> rules.Match:
        """A line ending in ':' ("...terminated with exception:") introduces the error on the next line; a runtime
        status introduced by a collective's report (PyTorch's NCCL watchdog) is what the collective saw: it keeps
        the collective's class."""
        previous = self.last_event.get(channel)
        reported = previous is not None and previous[0].category == "comm_error" and match.rule in rules.RUNTIME_STATUS
        if previous is None or (match.category != "other" and not reported):
            return match
        intro, intro_line_no = previous
        if line_no - intro_line_no > 3 or not intro.body.rstrip().endswith(":") or intro.category == "other":
            return match
        return rules.Match(f"{intro.rule}+next_line", intro.category, max(intro.score, match.score) + 1)

    def _context(self, raw_lines: list[bytes], index: int, line_no: int) -> list[tuple[int, str]]:
        start = max(0, index - CONTEXT_LINES)
        raws = raw_lines[start:index]
        if len(raws) < CONTEXT_LINES:
            raws = self.previous[len(raws) - CONTEXT_LINES :] + raws
        first = line_no - len(raws)
        return [
            (first + offset, shorten(split_prefix(decode(bounded(raw)))[1], 400)) for offset, raw in enumerate(raws)
        ]

    def _add_event(self, line_no, channel, body, match: rules.Match, context: Callable[[], list]) -> Event | None:
        """A new event, or one more occurrence of a folded one; `context` is read only for a new event."""
        key = f"{match.category}|{fold_key(body)}"
        event = self.events.get(key)
        if event is not None:
            event.count += 1
            event.last_line_no = line_no
            event.ranks.update(ranks_in(channel, body)[:1])
            if len(event.variants) < MAX_VARIANTS and body != event.body and body not in event.variants:
                event.variants.append(shorten(body, 400))
            return event
        if len(self.events) >= MAX_EVENTS and not self._evict_below(match.score):
            return None
        before = context()
        event = Event(
            match.rule,
            match.category,
            match.score,
            line_no,
            body,
            before,
            last_line_no=line_no,
            key=key,
            confidence=match.confidence,
        )
        event.ranks.update(ranks_in(channel, body)[:1])
        if match.category == "gpu_memory_fault" and self.kernel is not None:
            event.implicated = self.kernel[1]
            if self.kernel[0] != line_no:  # keep the hint in view even when noise came between it and the fault
                event.before = sorted({*before, (self.kernel[0], self.kernel[2])})
        self.events[key] = event
        self.eviction_floor = min(self.eviction_floor, match.score)
        return event

    def _evict_below(self, score: int) -> bool:
        """Room for an event of `score` when the table is full: the weakest quarter goes at once (so a log of many
        distinct errors costs a sort now and then, not a scan per line); False when nothing is weaker."""
        if score <= self.eviction_floor:
            return False
        ranked = sorted(self.events, key=lambda name: (self.events[name].score, -self.events[name].line_no))
        weakest = [name for name in ranked[: max(1, len(ranked) // 4)] if self.events[name].score < score]
        for name in weakest:
            del self.events[name]
        self.eviction_floor = self.events[ranked[len(weakest)]].score if len(weakest) < len(ranked) else 0
        return bool(weakest)

    def _update_mode(self, line_no: int) -> None:
        for channel in [
            name for name, tb in self.open_tracebacks.items() if line_no - tb.last_line_no > STALE_TRACEBACK_LINES
        ]:
            self._close_traceback(channel, None)
        self.every_line = bool(self.open_tracebacks) or self.continuation is not None

    def finish(self) -> None:
        for channel in list(self.open_tracebacks):
            self._close_traceback(channel, None)
        self.continuation = None
