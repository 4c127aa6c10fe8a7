"""The body of a streamed completion, parsed after the stream ends: SSE events, token times, usage, and why a
stream is bad when it is.

Covers cutting the raw reads (each stamped with its arrival time) into SSE events, decoding their JSON, and
filling a request's record (RequestRecord, declared here): the time of every token frame (text, reasoning or
tool-call deltas), the usage counts a server reports (a negative or non-integer count is not a figure), and the
first problem (a malformed frame, a stream cut inside a frame, an error frame with the server's words, no
[DONE]). Runs in slices so a long stream never stalls the other streams' clocks. Does not send requests
(loadgen.py) nor compute the statistics (metrics.py).
"""

from __future__ import annotations

import asyncio
import json
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import accumulate, repeat

from porter.checks.request_failures import answer_text


@dataclass
class RequestRecord:
    """What happened to one request; times are seconds on the monotonic clock, relative to the level start."""

    index: int
    scheduled_s: float
    sent_s: float | None = None
    first_token_s: float | None = None
    end_s: float | None = None
    token_times_s: list[float] = field(default_factory=list)
    prompt_tokens: int | None = None
    output_tokens: int = 0
    cached_tokens: int | None = None
    error: str | None = None  # what failed, in porter's words (the status and the answer's start for HTTP)
    status: int | None = None  # the HTTP status of a refused request
    body: str = ""  # the server's answer to a refused request, or its error frame (request_failures.answer_text)
    timed_out: bool = False
    text: str = ""
    first_token_event: dict | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and not self.timed_out and self.end_s is not None

    @property
    def ttft_s(self) -> float | None:
        if self.first_token_s is None or self.sent_s is None:
            return None
        return self.first_token_s - self.sent_s


PARSE_SLICE = 128
MAX_FRAME_EVIDENCE = 4096  # bytes of an error frame kept as the server's words


def split_events(frames: list[tuple[float, bytes]]) -> list[tuple[float, bytes, bool]]:
    """SSE events as (arrival time of the read that completed it, data field, terminated by a blank line).

    The reads are joined once and split at each blank line (bytes.split cuts where a scan for the next blank line
    would); the arrival time of an event is that of the first read whose end offset reaches the event's end.
    """
    body = b"".join(chunk for _, chunk in frames)
    if b"\r" in body:
        # CRLF line ends; dropping every CR also mends a CRLF split across two reads (JSON escapes its own CRs)
        frames = [(arrived, chunk.replace(b"\r", b"")) for arrived, chunk in frames]
        body = b"".join(chunk for _, chunk in frames)
    *terminated, rest = body.split(b"\n\n")
    ends = list(accumulate(len(chunk) for _, chunk in frames))
    reads = map(bisect_left, repeat(ends), accumulate(len(piece) + 2 for piece in terminated))
    events = [(frames[read][0], _data_field(piece), True) for read, piece in zip(reads, terminated, strict=True)]
    if rest:
        events.append((frames[-1][0], _data_field(rest), False))
    return [event for event in events if event[1]]


def _data_field(event: bytes) -> bytes:
    """The `data:` lines of one event joined by newlines (comments and other fields are dropped)."""
    if event.startswith(b"data:") and b"\n" not in event:
        return event[5:].strip()
    return b"\n".join(line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:"))


async def parse_stream_yielding(record: RequestRecord, frames: list[tuple[float, bytes]]) -> None:
    """Fill the record from the raw reads (token times, usage, and why the stream is bad if it is), in slices: a
    1000-frame stream parsed at once would stall every other stream's clock."""
    for _ in _parse_steps(record, frames):
        await asyncio.sleep(0)


def _parse_steps(record: RequestRecord, frames: list[tuple[float, bytes]]) -> Iterator[None]:
    events = split_events(frames)
    kept = [event for event in events if event[1] != b"[DONE]"]
    done, payloads, pieces = len(kept) < len(events), _decode_all(kept), []
    for start in range(0, len(kept), PARSE_SLICE):
        if start:
            yield
        stop = start + PARSE_SLICE
        for (arrived, data, terminated), payload in zip(kept[start:stop], payloads[start:stop], strict=True):
            if isinstance(payload, dict) and not payload.get("error"):
                _read_payload(record, payload, arrived, pieces)
            elif payload is None:
                kind = "malformed SSE frame (not JSON)" if terminated else "stream cut inside a frame"
                _fail(record, f"{kind}: {data[:120].decode('utf-8', 'replace')!r}")
            else:
                if record.error is None:
                    record.body = answer_text(data[:MAX_FRAME_EVIDENCE])
                _fail(record, f"error frame in stream: {data[:200].decode('utf-8', 'replace')}")
    record.text = "".join(pieces)
    if record.error is None and not record.timed_out and not done:
        record.error = f"stream ended without [DONE] after {len(record.token_times_s)} token frames"
    if record.output_tokens == 0:
        record.output_tokens = len(record.token_times_s)


def _decode_all(events: list[tuple[float, bytes, bool]]) -> list:
    """Every event's JSON, None where it is not JSON.

    One json.loads over all events as an array costs a third of one call per event; any malformed
    event breaks the array (or its length), and then each event is decoded alone to find which.
    """
    try:
        decoded = json.loads(b"[" + b",".join(data for _, data, _ in events) + b"]")
        if len(decoded) == len(events):
            return decoded
    except ValueError:
        pass
    payloads = []
    for _, data, _ in events:
        try:
            payloads.append(json.loads(data))
        except ValueError:
            payloads.append(None)
    return payloads


def _fail(record: RequestRecord, message: str) -> None:
    if record.error is None:
        record.error = message


def _read_payload(record: RequestRecord, payload: dict, arrived: float, pieces: list[str]) -> None:
    usage = payload.get("usage")
    if isinstance(usage, dict):
        record.prompt_tokens = _count(usage.get("prompt_tokens"), record.prompt_tokens)
        record.output_tokens = _count(usage.get("completion_tokens"), None) or record.output_tokens
        details = usage.get("prompt_tokens_details") or {}
        if isinstance(details, dict):
            record.cached_tokens = _count(details.get("cached_tokens"), record.cached_tokens)
    choices = payload.get("choices") or []
    if not isinstance(choices, list):
        _fail(record, f"`choices` is a {type(choices).__name__}, not a list: {str(choices)[:80]!r}")
        return
    for choice in choices:
        if not isinstance(choice, dict):
            _fail(record, f"a choice is a {type(choice).__name__}, not an object: {str(choice)[:80]!r}")
            continue
        delta = choice.get("delta")
        delta = delta if isinstance(delta, dict) else {}
        content = choice.get("text") or delta.get("content") or ""
        if not isinstance(content, str):
            _fail(record, f"token text is a {type(content).__name__}, not a string")
            continue
        if content or delta.get("reasoning_content") or delta.get("tool_calls"):
            record.token_times_s.append(arrived)
            if record.first_token_s is None:
                record.first_token_s, record.first_token_event = arrived, payload
            pieces.append(content)


def _count(value, default: int | None) -> int | None:
    """A token count from a server's usage: a non-negative integer, else `default` (a lie is not a figure)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default
