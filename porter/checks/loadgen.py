"""Load generator: sends streaming requests on a schedule and timestamps what comes back.

Covers the asyncio client: one keep-alive pool sized to the requests of a level, payloads encoded
before the level starts, each read of the response body stamped with the monotonic clock as it
arrives and parsed only after the stream ends (stream_parse.py), per-request errors (HTTP status with
the server's answer as evidence: request_failures.py; dropped stream; malformed frame) recorded instead
of raised, the deadlines every request lives under (connect, first byte, idle gap between reads, total)
and its byte cap (a flood is that request's error, not the client's memory), and the client's own lag
(send lag behind the schedule, event-loop lag) measured so an overloaded client is reported, not trusted.
Does not compute the statistics (metrics.py) or decide pass/fail (throughput.py).
"""

from __future__ import annotations

import asyncio
import gc
import json
import statistics
import time
from dataclasses import dataclass, field

import aiohttp

from porter.checks.request_failures import MAX_BODY_BYTES, answer_text
from porter.checks.stream_parse import RequestRecord, parse_stream_yielding

READ_BUFFER_BYTES = 1 << 20
LOOP_PROBE_INTERVAL_S = 0.005
# Beyond this much lag (p99, ms) the client's own clock readings are off by more than the few ms we promise.
SATURATION_LAG_MS = 5.0
LISTING_MAX_BYTES = 1 << 20  # a GET /v1/models answer larger than this is not a model listing
LISTING_DEADLINE_S = 30.0  # a listing is answered from memory: a server silent this long is hung
REDIRECT_STATUSES = (301, 302, 303, 307, 308)


@dataclass(frozen=True)
class Deadlines:
    """How long one request may take at each stage and how much it may send; past one, it fails saying which.

    The defaults bound a hung or flooding server without cutting a healthy one short: a first token
    after 2 minutes, or a 30 s silence mid-stream, fails any latency target porter checks anyway.
    """

    connect_s: float = 10.0
    first_byte_s: float = 120.0  # request sent -> first byte of the body (headers alone do not count)
    idle_s: float = 30.0  # longest silence between two reads of a stream
    total_s: float = 900.0
    max_bytes: int = 16 << 20  # ~50k SSE frames: far above any max_tokens porter sends


DEFAULT_DEADLINES = Deadlines()


class CheckError(Exception):
    """A check that cannot run at all (server unreachable, no model, bad dataset); the message says why."""


@dataclass(frozen=True)
class LagSummary:
    """How late the client ran over one level, at p99 and at worst (ms), and whether that is past its budget."""

    p99_send_lag_ms: float = 0.0
    max_send_lag_ms: float = 0.0
    p99_loop_lag_ms: float = 0.0
    max_loop_lag_ms: float = 0.0
    client_saturated: bool = False

    @property
    def p99_lag_ms(self) -> float:
        """The later of the two at p99: how much high a latency measured there can read."""
        return max(self.p99_send_lag_ms, self.p99_loop_lag_ms)


@dataclass
class ClientLag:
    """How far the client itself fell behind: a lagging client inflates every latency it reports."""

    send_lag_ms: list[float] = field(default_factory=list)
    loop_lag_ms: list[float] = field(default_factory=list)
    origin_monotonic: float = 0.0

    def summary(self) -> LagSummary:
        send, loop = self.send_lag_ms, self.loop_lag_ms
        p99_send, p99_loop = _p99(send), _p99(loop)
        saturated = max(p99_send, p99_loop) > SATURATION_LAG_MS
        return LagSummary(p99_send, max(send, default=0.0), p99_loop, max(loop, default=0.0), saturated)


@dataclass
class Planned:
    """A request ready to send: its send time (s after the level start), endpoint path and encoded body."""

    index: int
    send_at_s: float
    path: str
    body: bytes


def _p99(values: list[float]) -> float:
    # the inclusive method interpolates between the closest ranks; one value (or none) is its own p99
    return statistics.quantiles(values, n=100, method="inclusive")[98] if len(values) > 1 else sum(values, 0.0)


async def no_redirects(request: aiohttp.ClientRequest, handler) -> aiohttp.ClientResponse:
    """Refuses a redirect before aiohttp follows it (aiohttp runs this at every hop): an OpenAI-compatible server
    answers where it is asked, and the body of an address only the host can reach never reaches a check or the model."""
    response = await handler(request)
    if response.status in REDIRECT_STATUSES:
        response.close()
        raise aiohttp.InvalidUrlRedirectClientError(response.headers.get("Location", ""), "porter follows no redirect")
    return response


def make_session(connections: int, deadlines: Deadlines = DEFAULT_DEADLINES) -> aiohttp.ClientSession:
    """A keep-alive pool with room for every concurrent stream, so no request waits for a connection.

    Its socket timeouts are the backstop for every call made on it (tokenizer, priming, listings): a
    connect and a silence are bounded even where no per-request deadline is set.
    """
    connector = aiohttp.TCPConnector(limit=max(connections, 1), limit_per_host=0, keepalive_timeout=60)
    return aiohttp.ClientSession(
        connector=connector,
        # a backstop just past the per-request deadlines, which fire first and name the stage that stalled
        timeout=aiohttp.ClientTimeout(
            total=None, sock_connect=deadlines.connect_s, sock_read=deadlines.first_byte_s + deadlines.connect_s
        ),
        read_bufsize=READ_BUFFER_BYTES,
        auto_decompress=False,
        middlewares=(no_redirects,),
    )


async def send_one(
    session: aiohttp.ClientSession,
    base_url: str,
    planned: Planned,
    origin: float,
    deadlines: Deadlines = DEFAULT_DEADLINES,
) -> RequestRecord:
    """Send one streaming request; the body is read raw and stamped on arrival, then parsed.

    One timer follows the request: first byte, then each idle gap, never past the total deadline.
    """
    record = RequestRecord(planned.index, planned.send_at_s)
    frames: list[tuple[float, bytes]] = []
    record.sent_s = time.monotonic() - origin
    loop = asyncio.get_running_loop()
    give_up_at = loop.time() + deadlines.total_s
    try:
        async with asyncio.timeout_at(loop.time() + min(deadlines.first_byte_s, deadlines.total_s)) as clock:
            async with session.post(
                base_url + planned.path,
                data=planned.body,
                headers={"Content-Type": "application/json"},
                # the clock above bounds every read: no socket timer re-armed per read beside it (one per read is
                # a tenth of the client's CPU at 200 streams)
                timeout=aiohttp.ClientTimeout(sock_connect=deadlines.connect_s),
            ) as response:
                if response.status != 200:
                    record.status, record.body = (
                        response.status,
                        answer_text(await read_capped(response, MAX_BODY_BYTES)),
                    )
                    record.error = f"HTTP {response.status}: {record.body[:300]}"
                    record.end_s = time.monotonic() - origin
                    return record
                await _read_frames(response, frames, origin, deadlines, clock, give_up_at)
    except TimeoutError:
        record.error, record.timed_out = _deadline_missed(frames, deadlines, loop.time() >= give_up_at), True
    except (aiohttp.ClientError, OSError) as exc:
        record.error = f"stream broken after {len(frames)} reads: {type(exc).__name__}: {exc}"
    except ResponseTooLarge as exc:
        record.error = str(exc)
    record.end_s = frames[-1][0] if frames else time.monotonic() - origin
    await parse_stream_yielding(record, frames)
    return record


class ResponseTooLarge(Exception):
    """A response past the byte cap: a flood is that request's error, never the client's memory."""


async def _read_frames(response, frames, origin: float, deadlines: Deadlines, clock, give_up_at: float) -> None:
    """Stamp each read as it arrives; keep the deadline between 0.9 and 1 idle gap after the last read, never past
    the total. Rescheduling on every read (thousands a second at 256 streams) costs the event loop a timer each;
    moving it once per tenth of an idle gap costs one per tenth of an idle gap per stream."""
    size, read, stamp, idle_s, push_at = 0, response.content.readany, time.monotonic, deadlines.idle_s, 0.0
    while chunk := await read():  # b"" at the end of the body
        now = stamp()  # the event loop's clock (loop.time() is time.monotonic())
        frames.append((now - origin, chunk))
        size += len(chunk)
        if size > deadlines.max_bytes:
            frames.clear()  # the flood is dropped at once; the error says what it was
            raise ResponseTooLarge(f"response larger than {deadlines.max_bytes} bytes: the stream was cut")
        if now >= push_at:
            clock.reschedule(min(now + idle_s, give_up_at))
            push_at = now + 0.1 * idle_s


def _deadline_missed(frames: list, deadlines: Deadlines, total: bool) -> str:
    if total:
        return f"deadline: the request was still running after {deadlines.total_s:g} s (total deadline)"
    if not frames:
        return f"deadline: no first byte within {deadlines.first_byte_s:g} s"
    return f"deadline: the stream was silent for {deadlines.idle_s:g} s after {len(frames)} reads (idle deadline)"


async def _probe_loop_lag(lag: ClientLag, stop: asyncio.Event) -> None:
    while not stop.is_set():
        before = time.monotonic()
        await asyncio.sleep(LOOP_PROBE_INTERVAL_S)
        lag.loop_lag_ms.append(max(0.0, (time.monotonic() - before - LOOP_PROBE_INTERVAL_S) * 1000))


async def run_schedule(
    session: aiohttp.ClientSession,
    base_url: str,
    planned: list[Planned],
    drain_timeout_s: float,
    deadlines: Deadlines = DEFAULT_DEADLINES,
    max_concurrency: int | None = None,
) -> tuple[list[RequestRecord], ClientLag]:
    """Send every planned request at its time; wait up to `drain_timeout_s` after the last send for the rest. With
    `max_concurrency` a request due while that many are in flight waits its turn (bench_serving's semaphore)."""
    lag = ClientLag()
    collecting = gc.isenabled()
    # A full collection over thousands of live frames pauses the loop for tens of ms; collect after the level.
    gc.disable()
    try:
        gate = asyncio.Semaphore(max_concurrency or len(planned) or 1)

        async def send(item: Planned) -> RequestRecord:  # its latencies count from the send, as bench_serving's do
            async with gate:
                return await send_one(session, base_url, item, origin, deadlines)

        stop = asyncio.Event()
        probe = asyncio.create_task(_probe_loop_lag(lag, stop))
        origin = lag.origin_monotonic = time.monotonic()
        sent: list[tuple[Planned, asyncio.Task]] = []
        for item in sorted(planned, key=lambda entry: entry.send_at_s):
            delay = item.send_at_s - (time.monotonic() - origin)
            if delay > 0:
                await asyncio.sleep(delay)
            lag.send_lag_ms.append(max(0.0, (time.monotonic() - origin - item.send_at_s) * 1000))
            sent.append((item, asyncio.create_task(send(item))))
        tasks = [task for _, task in sent]
        unfinished = (await asyncio.wait(tasks, timeout=drain_timeout_s))[1] if tasks else set()
        for task in unfinished:
            task.cancel()
        await asyncio.gather(*unfinished, return_exceptions=True)
        stop.set()
        await probe
        drained = f"deadline: still running {drain_timeout_s:g} s after the level's last send (level drain)"
        records = [
            RequestRecord(item.index, item.send_at_s, timed_out=True, error=drained)
            if task in unfinished
            else task.result()
            for item, task in sent
        ]
        records.sort(key=lambda record: record.index)
        return records, lag
    finally:
        if collecting:
            gc.enable()


async def read_capped(response: aiohttp.ClientResponse, max_bytes: int) -> bytes:
    """The body, or its first `max_bytes` + 1 bytes when it is larger (the caller says what that means)."""
    chunks, size = [], 0
    async for chunk in response.content.iter_any():
        chunks.append(chunk)
        size += len(chunk)
        if size > max_bytes:
            break
    return b"".join(chunks)


async def get_json(
    session: aiohttp.ClientSession,
    url: str,
    deadlines: Deadlines = DEFAULT_DEADLINES,
) -> object:
    """A small JSON answer within its deadline; a hang, a flood or garbage is a CheckError."""
    deadline_s = min(deadlines.first_byte_s, LISTING_DEADLINE_S)
    try:
        async with asyncio.timeout(deadline_s), session.get(url) as response:
            if response.status != 200:
                raise CheckError(f"GET {url} answered HTTP {response.status}")
            body = await read_capped(response, LISTING_MAX_BYTES)
    except TimeoutError:
        raise CheckError(f"GET {url} did not answer within {deadline_s:g} s") from None
    except (aiohttp.ClientError, OSError) as exc:
        raise CheckError(f"GET {url} failed: {type(exc).__name__}: {exc}") from None
    if len(body) > LISTING_MAX_BYTES:
        raise CheckError(f"GET {url} answered more than {LISTING_MAX_BYTES} bytes; not what porter asked for")
    try:
        return json.loads(body)
    except ValueError:
        raise CheckError(f"GET {url} did not answer JSON: {body[:120].decode('utf-8', 'replace')!r}") from None


async def resolve_model(
    session: aiohttp.ClientSession, base_url: str, model: str | None, deadlines: Deadlines = DEFAULT_DEADLINES
) -> str:
    """`model` itself, or the first id the server lists at GET /v1/models."""
    if model:
        return model
    listing = await get_json(session, f"{base_url}/v1/models", deadlines)
    models = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(models, list) or not models or not isinstance(models[0], dict) or not models[0].get("id"):
        raise CheckError(f"{base_url}/v1/models lists no model; pass the model name explicitly")
    return str(models[0]["id"])
