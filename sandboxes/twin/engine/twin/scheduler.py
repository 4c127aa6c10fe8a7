"""Continuous batching in real time: one asyncio scheduler per DP replica, a round-robin router in front.

Each replica loops: if requests wait, prefill a batch of them (up to the chunk budget) on the device and
wait for it, then emit their first token; otherwise run one decode step for every running request and wait
for the step (the device says how long each took and how far each request advanced). Each forward launches
the MoE kernel the selector finds for its token count (moe.py). Sleeps aim at deadlines on the event-loop
clock, so small timer overshoots do not accumulate (a 2-core machine under load still runs the device's
timeline).
Does not cover HTTP (http_server.py) or what text is produced (the request carries its pieces).
"""

import asyncio
import itertools
from collections import deque
from dataclasses import dataclass, field

from twin import device, moe
from twin.prefix_cache import PrefixCache, block_keys, content_key

MAX_LAG_S = 0.02


@dataclass
class Request:
    token_ids: list[int]
    pieces: list[str]
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    cached_tokens: int = 0
    emitted: int = 0
    credit: float = 0.0
    keys: list[bytes] = field(default_factory=list)
    content: str = ""  # what the draft model sees of the text: a hash of the prompt's last block

    @property
    def done(self) -> bool:
        return self.emitted >= len(self.pieces)


class Replica:
    def __init__(
        self, config: dict, cache_tokens: int, chunk_tokens: int, max_running: int, stats, experts: moe.Selector
    ):
        self.config = config
        self.experts = experts
        self.max_total_tokens = config.get("max_total_tokens") or 10**9
        self.stats = stats  # the front's batch log lines: prefill(...) and decode(...) as batch_stats.BatchStats
        self.cache = PrefixCache(cache_tokens)
        self.chunk_tokens = chunk_tokens
        self.max_running = max_running
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.wake = asyncio.Event()
        self.clock = 0.0

    def submit(self, request: Request) -> None:
        request.keys = block_keys(request.token_ids)
        request.content = content_key(request.token_ids)
        self.waiting.append(request)
        self.wake.set()

    async def _sleep_until(self, duration_ms: float) -> None:
        loop = asyncio.get_running_loop()
        self.clock = max(self.clock, loop.time() - MAX_LAG_S) + duration_ms * device.TIME_SCALE / 1000
        await asyncio.sleep(max(self.clock - loop.time(), 0))

    async def run(self) -> None:
        while True:
            if not self.waiting and not self.running:
                self.wake.clear()
                await self.wake.wait()
                self.clock = asyncio.get_running_loop().time()
            batch = self._admit()
            if batch:
                await self._prefill(batch)
            else:
                await self._decode()

    def _admit(self) -> list[Request]:
        """The next prefill batch, taken as sglang's PrefillAdder takes it: waiting requests in order, up to the
        running limit, the chunk budget and the free KV pool (each admitted request reserves its prompt and its
        whole output). Nothing is admitted while the pool is full: the queue waits for running requests to end."""
        batch, budget = [], self.chunk_tokens
        free = self.max_total_tokens - sum(len(r.token_ids) + len(r.pieces) for r in self.running)
        while self.waiting and len(self.running) + len(batch) < self.max_running:
            request = self.waiting[0]
            request.cached_tokens = min(self.cache.cached_tokens(request.keys), len(request.token_ids) - 1)
            uncached = len(request.token_ids) - request.cached_tokens
            need = len(request.token_ids) + len(request.pieces)
            if (batch and uncached > budget) or ((self.running or batch) and need > free):
                break
            batch.append(self.waiting.popleft())
            budget -= uncached
            free -= need
        return batch

    async def _prefill(self, batch: list[Request]) -> None:
        uncached = sum(len(r.token_ids) - r.cached_tokens for r in batch)
        cached = sum(r.cached_tokens for r in batch)
        kernel = self.experts.kernel(uncached)  # a cached prefix skips the layers: only new tokens reach the MoE
        step = device.call("prefill", config=self.config, uncached=uncached, cached=cached, moe_kernel=kernel)
        running = len(self.running) + len(batch)
        self.stats.prefill(len(batch), uncached, cached, self._used_tokens(batch), running, len(self.waiting))
        await self._sleep_until(step["ms"])
        for request in batch:
            self.cache.insert(request.keys)
            self._emit(request, 1)
            if not request.done:
                self.running.append(request)

    def _used_tokens(self, more: list[Request] = ()) -> int:
        return sum(len(r.token_ids) + r.emitted for r in [*self.running, *more])

    async def _decode(self) -> None:
        context = self._used_tokens()
        requests = [r.content for r in self.running]
        kernel = self.experts.kernel(len(self.running) * (self.config.get("spec_draft_tokens") or 1))
        step = device.call(
            "decode", config=self.config, batch=len(self.running), context=context, requests=requests, moe_kernel=kernel
        )
        await self._sleep_until(step["ms"])
        emitted = 0
        for request, advance in zip(self.running, step["advance"], strict=True):
            request.credit += advance
            whole = int(request.credit)
            request.credit -= whole
            emitted += self._emit(request, whole)
        self.stats.decode(len(self.running), context, emitted, len(self.waiting))
        self.running = [r for r in self.running if not r.done]

    @staticmethod
    def _emit(request: Request, count: int) -> int:
        new = request.pieces[request.emitted : request.emitted + count]
        if new:
            request.emitted += len(new)
            request.queue.put_nowait(("".join(new), len(new), request.done))
        return len(new)


class Router:
    """DP replicas as independent schedulers; requests are dealt round-robin (sglang's default)."""

    def __init__(self, replicas: list[Replica]):
        self.replicas = replicas
        self._next = itertools.cycle(range(len(replicas)))
        self._tasks: list[asyncio.Task] = []

    def start(self) -> None:
        self._tasks = [asyncio.get_running_loop().create_task(replica.run()) for replica in self.replicas]

    def submit(self, request: Request) -> None:
        self.replicas[next(self._next)].submit(request)

    def flush_cache(self) -> None:
        for replica in self.replicas:
            replica.cache.flush()

    def load(self) -> dict:
        return {
            "waiting": sum(len(r.waiting) for r in self.replicas),
            "running": sum(len(r.running) for r in self.replicas),
        }
