"""Load generator: sends streaming requests on a schedule and timestamps what comes back.

Covers the asyncio client: one keep-alive pool sized to the requests of a level, payloads encoded
before the level starts, each read of the response body stamped with the monotonic clock as it
arrives and parsed only after the stream ends, per-request errors (HTTP status, dropped stream,
malformed frame) recorded instead of raised, and the client's own lag (send lag behind the schedule,
event-loop lag) measured so an overloaded client is reported, not trusted. Does not compute the
statistics (metrics.py) or decide pass/fail (throughput.py).
"""

from __future__ import annotations

import asyncio
import gc
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import accumulate

import aiohttp

READ_BUFFER_BYTES = 1 << 20
LOOP_PROBE_INTERVAL_S = 0.005
# Beyond this much lag (p99, ms) the client's own clock readings are off by more than the few ms we promise.
SATURATION_LAG_MS = 5.0
PARSE_SLICE = 128


class CheckError(Exception):
    """A check that cannot run at all (server unreachable, no model, bad dataset); the message says why."""


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
    error: str | None = None
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


@dataclass
class ClientLag:
    """How far the client itself fell behind: a lagging client inflates every latency it reports."""

    send_lag_ms: list[float] = field(default_factory=list)
    loop_lag_ms: list[float] = field(default_factory=list)
    origin_monotonic: float = 0.0

    def summary(self) -> dict:
        send, loop = sorted(self.send_lag_ms), sorted(self.loop_lag_ms)
        result = {
            "p99_send_lag_ms": _quantile(send, 0.99),
            "max_send_lag_ms": send[-1] if send else 0.0,
            "p99_loop_lag_ms": _quantile(loop, 0.99),
            "max_loop_lag_ms": loop[-1] if loop else 0.0,
        }
        result["client_saturated"] = max(result["p99_send_lag_ms"], result["p99_loop_lag_ms"]) > SATURATION_LAG_MS
        return result


@dataclass
class Planned:
    """A request ready to send: its send time (s after the level start), endpoint path and encoded body."""

    index: int
    send_at_s: float
    path: str
    body: bytes


def _quantile(ordered: list[float], share: float) -> float:
    if not ordered:
        return 0.0
    position = share * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def make_session(connections: int, headers: dict[str, str] | None = None) -> aiohttp.ClientSession:
    """A keep-alive pool with room for every concurrent stream, so no request waits for a connection."""
    connector = aiohttp.TCPConnector(limit=max(connections, 1), limit_per_host=0, keepalive_timeout=60)
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
        read_bufsize=READ_BUFFER_BYTES,
        auto_decompress=False,
        headers=headers or {},
    )


async def send_one(session: aiohttp.ClientSession, base_url: str, planned: Planned, origin: float) -> RequestRecord:
    """Send one streaming request; the body is read raw and stamped on arrival, then parsed."""
    record = RequestRecord(planned.index, planned.send_at_s)
    frames: list[tuple[float, bytes]] = []
    record.sent_s = time.monotonic() - origin
    try:
        async with session.post(
            base_url + planned.path, data=planned.body, headers={"Content-Type": "application/json"}
        ) as response:
            if response.status != 200:
                body = (await response.read())[:300].decode("utf-8", "replace")
                record.error = f"HTTP {response.status}: {body.strip()}"
                record.end_s = time.monotonic() - origin
                return record
            async for chunk in response.content.iter_any():
                frames.append((time.monotonic() - origin, chunk))
    except (aiohttp.ClientError, OSError) as exc:
        record.error = f"stream broken after {len(frames)} reads: {type(exc).__name__}: {exc}"
    record.end_s = frames[-1][0] if frames else time.monotonic() - origin
    await _parse_stream_yielding(record, frames)
    return record


def split_events(frames: list[tuple[float, bytes]]) -> list[tuple[float, bytes, bool]]:
    """SSE events as (arrival time of the read that completed it, data field, terminated by a blank line).

    The reads are joined once and cut at each blank line; the arrival time of an event is that of
    the read holding its last byte, found by walking the reads' end offsets alongside.
    """
    body = b"".join(chunk for _, chunk in frames)
    if b"\r" in body:
        # CRLF line ends; dropping every CR also mends a CRLF split across two reads (JSON escapes its own CRs)
        frames = [(arrived, chunk.replace(b"\r", b"")) for arrived, chunk in frames]
        body = b"".join(chunk for _, chunk in frames)
    ends = list(accumulate(len(chunk) for _, chunk in frames))
    events: list[tuple[float, bytes, bool]] = []
    position = read = 0
    while position < len(body):
        boundary = body.find(b"\n\n", position)
        terminated = boundary >= 0
        stop = boundary + 2 if terminated else len(body)
        while read < len(ends) - 1 and ends[read] < stop:
            read += 1
        data = _data_field(body[position : boundary if terminated else stop])
        if data:
            events.append((frames[read][0], data, terminated))
        position = stop
    return events


def _data_field(event: bytes) -> bytes:
    """The `data:` lines of one event joined by newlines (comments and other fields are dropped)."""
    if event.startswith(b"data:") and b"\n" not in event:
        return event[5:].strip()
    return b"\n".join(line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:"))


def parse_stream(record: RequestRecord, frames: list[tuple[float, bytes]]) -> None:
    """Fill the record from the raw reads: token times, usage, and why the stream is bad if it is."""
    for _ in _parse_steps(record, frames):
        pass


async def _parse_stream_yielding(record: RequestRecord, frames: list[tuple[float, bytes]]) -> None:
    """parse_stream in slices: a 1000-frame stream parsed at once would stall every other stream's clock."""
    for _ in _parse_steps(record, frames):
        await asyncio.sleep(0)


def _parse_steps(record: RequestRecord, frames: list[tuple[float, bytes]]) -> Iterator[None]:
    events = split_events(frames)
    done = any(data == b"[DONE]" for _, data, _ in events)
    events = [event for event in events if event[1] != b"[DONE]"]
    pieces: list[str] = []
    for number, ((arrived, data, terminated), payload) in enumerate(zip(events, _decode_all(events), strict=True), 1):
        if number % PARSE_SLICE == 0:
            yield
        if payload is None:
            kind = "malformed SSE frame (not JSON)" if terminated else "stream cut inside a frame"
            _fail(record, f"{kind}: {data[:120].decode('utf-8', 'replace')!r}")
        elif not isinstance(payload, dict) or payload.get("error"):
            _fail(record, f"error frame in stream: {data[:200].decode('utf-8', 'replace')}")
        else:
            _read_payload(record, payload, arrived, pieces)
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
        record.prompt_tokens = usage.get("prompt_tokens", record.prompt_tokens)
        record.output_tokens = usage.get("completion_tokens") or record.output_tokens
        details = usage.get("prompt_tokens_details") or {}
        if isinstance(details, dict) and details.get("cached_tokens") is not None:
            record.cached_tokens = details["cached_tokens"]
    for choice in payload.get("choices") or []:
        delta = choice.get("delta") or {}
        content = choice.get("text") or delta.get("content") or ""
        if content or delta.get("reasoning_content") or delta.get("tool_calls"):
            record.token_times_s.append(arrived)
            if record.first_token_s is None:
                record.first_token_s, record.first_token_event = arrived, payload
            pieces.append(content)


async def _probe_loop_lag(lag: ClientLag, stop: asyncio.Event) -> None:
    while not stop.is_set():
        before = time.monotonic()
        await asyncio.sleep(LOOP_PROBE_INTERVAL_S)
        lag.loop_lag_ms.append(max(0.0, (time.monotonic() - before - LOOP_PROBE_INTERVAL_S) * 1000))


async def run_schedule(
    session: aiohttp.ClientSession, base_url: str, planned: list[Planned], drain_timeout_s: float
) -> tuple[list[RequestRecord], ClientLag]:
    """Send every planned request at its time; wait up to `drain_timeout_s` after the last send for the rest."""
    lag = ClientLag()
    collecting = gc.isenabled()
    # A full collection over thousands of live frames pauses the loop for tens of ms; collect after the level.
    gc.disable()
    try:
        return await _run_schedule(session, base_url, planned, drain_timeout_s, lag)
    finally:
        if collecting:
            gc.enable()


async def _run_schedule(
    session: aiohttp.ClientSession, base_url: str, planned: list[Planned], drain_timeout_s: float, lag: ClientLag
) -> tuple[list[RequestRecord], ClientLag]:
    stop = asyncio.Event()
    probe = asyncio.create_task(_probe_loop_lag(lag, stop))
    origin = lag.origin_monotonic = time.monotonic()
    sent: list[tuple[Planned, asyncio.Task]] = []
    for item in sorted(planned, key=lambda entry: entry.send_at_s):
        delay = item.send_at_s - (time.monotonic() - origin)
        if delay > 0:
            await asyncio.sleep(delay)
        lag.send_lag_ms.append(max(0.0, (time.monotonic() - origin - item.send_at_s) * 1000))
        sent.append((item, asyncio.create_task(send_one(session, base_url, item, origin))))
    tasks = [task for _, task in sent]
    unfinished = (await asyncio.wait(tasks, timeout=drain_timeout_s))[1] if tasks else set()
    for task in unfinished:
        task.cancel()
    await asyncio.gather(*unfinished, return_exceptions=True)
    stop.set()
    await probe
    records = [
        RequestRecord(item.index, item.send_at_s, timed_out=True) if task in unfinished else task.result()
        for item, task in sent
    ]
    records.sort(key=lambda record: record.index)
    return records, lag


async def get_json(session: aiohttp.ClientSession, url: str) -> dict:
    try:
        async with session.get(url) as response:
            if response.status != 200:
                raise CheckError(f"GET {url} answered HTTP {response.status}")
            return await response.json(content_type=None)
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        raise CheckError(f"GET {url} failed: {type(exc).__name__}: {exc}") from None


async def resolve_model(session: aiohttp.ClientSession, base_url: str, model: str | None) -> str:
    """`model` itself, or the first id the server lists at GET /v1/models."""
    if model:
        return model
    listing = await get_json(session, f"{base_url}/v1/models")
    models = listing.get("data") if isinstance(listing, dict) else None
    if not models or not isinstance(models[0], dict) or not models[0].get("id"):
        raise CheckError(f"{base_url}/v1/models lists no model; pass the model name explicitly")
    return models[0]["id"]
