"""Workload: prompts of exact token length with a shared prefix, fixed output lengths, Poisson arrivals.

Covers building the requests of one RPS level with common random numbers: every level replays the
same seeded unit-rate arrival pattern, divided by its rate, and the same prompts, so two levels differ
only by rate. A level sends at least `min_requests` measured requests (after the warm-up), more when
its duration holds more. Prompt text is natural-language prose shipped with porter (data/prose.txt,
plain paragraphs written for it), read as windows at seeded offsets: speculative decoding's draft
acceptance depends on content, and random words would misstate it. A shared prefix is sized
so the prefix-cache hit rate is the asked one (it is primed once before the level); each
request's unique part starts with a short per-level marker, so no level or run is served another's
cache, and continues with the same text at every level. Lengths are exact when the server has POST
/tokenize (vLLM and sglang shape: {"prompt"} -> {"tokens", "count"}); without it words and punctuation
marks are counted one token each, close for English prose in the usual BPE vocabularies and exact on
the twin. Does not send the measured requests (loadgen.py) nor compute statistics (metrics.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import aiohttp

PROSE_PATH = Path(__file__).parent / "data" / "prose.txt"
TOKEN_PATTERN = re.compile(r"\w+|[^\w\s]")  # the offline count: words and punctuation marks

MAX_ADJUST_ROUNDS = 6
# A real server tokenizes in one process: a level's worth of 20k-token prompts at once would queue there.
TOKENIZE_CONCURRENCY = 16


@dataclass
class PlannedRequest:
    """One request of a level: when to send it (seconds after the level starts) and what to send."""

    index: int
    send_at_s: float
    prompt: str
    prompt_tokens: int
    output_tokens: int


@dataclass
class Workload:
    """The requests of one level plus the prompts that prime each shared prefix before it."""

    requests: list[PlannedRequest]
    primers: list[str] = field(default_factory=list)
    exact_lengths: bool = False


class Tokenizer:
    """Counts prompt tokens with the server's /tokenize, or one token per word when it has none."""

    def __init__(self, session: aiohttp.ClientSession | None, base_url: str):
        self.session = session
        self.base_url = base_url.rstrip("/")
        self.remote: bool | None = None if session is not None else False

    async def count(self, text: str) -> int:
        if self.remote is not False:
            counted = await self._remote_count(text)
            if counted is not None:
                return counted
        return len(TOKEN_PATTERN.findall(text))

    async def _remote_count(self, text: str) -> int | None:
        """The server's count; a server without /tokenize (or with another answer) is not asked again."""
        try:
            async with self.session.post(f"{self.base_url}/tokenize", json={"prompt": text}) as response:
                body = await response.json(content_type=None) if response.status == 200 else None
        except (aiohttp.ClientError, ValueError):
            body = None
        body = body if isinstance(body, dict) else {}
        count, tokens = body.get("count"), body.get("tokens")
        if count is None and isinstance(tokens, list):
            count = len(tokens)
        self.remote = isinstance(count, int)
        return count if self.remote else None


@cache
def prose_words() -> tuple[str, ...]:
    return tuple(PROSE_PATH.read_text(encoding="utf-8").split())


def prose(generator: random.Random, count: int) -> list[str]:
    """`count` consecutive words of the corpus from a seeded offset (wrapping around at its end)."""
    words = prose_words()
    start = generator.randrange(len(words))
    return [words[(start + offset) % len(words)] for offset in range(max(count, 0))]


async def text_of_length(
    tokenizer: Tokenizer, target_tokens: int, generator: random.Random, lead: str = ""
) -> tuple[str, int]:
    """`lead` plus prose from a seeded offset, grown or cut until the whole counts `target_tokens` (or the
    nearest below).

    Words are added or removed by the remaining difference, so a tokenizer that splits a few words in
    two converges in a couple of rounds; a text left a few tokens short (a word with its punctuation
    counts two) is topped up with bare words; one that never lands exactly ends on the closest length below.
    """
    lead_words = lead.split()
    extra = prose(generator, target_tokens - len(lead_words) + 64)
    word_count = max(target_tokens - len(lead_words), 0)
    best: tuple[str, int] | None = None
    for _ in range(MAX_ADJUST_ROUNDS):
        text = " ".join(lead_words + extra[:word_count])
        counted = await tokenizer.count(text)
        if counted == target_tokens:
            return text, counted
        if counted < target_tokens and (best is None or counted > best[1]):
            best = (text, counted)
        word_count = max(0, word_count + target_tokens - counted)
        if word_count > len(extra):
            more = prose_words()
            extra += [more[(len(extra) + offset) % len(more)] for offset in range(word_count - len(extra))]
    if best is None:
        return text, counted
    bare = [word for word in (re.sub(r"\W", "", w) for w in extra[word_count:]) if word]
    topped = f"{best[0]} {' '.join(bare[: target_tokens - best[1]])}"
    counted = await tokenizer.count(topped)
    return (topped, counted) if best[1] < counted <= target_tokens else best


def unit_arrivals(seed: int, count: int) -> list[float]:
    """Send times of a rate-1 Poisson process: the pattern every level divides by its rate."""
    generator = random.Random(f"arrivals-{seed}")
    times, now = [], 0.0
    for _ in range(count):
        now += generator.expovariate(1.0)
        times.append(now)
    return times


def level_arrivals(
    rps: float,
    seed: int,
    duration_s: float | None,
    num_prompts: int | None,
    min_requests: int = 0,
    warmup_s: float = 0.0,
) -> list[float]:
    """Send times (s) of one level: the seeded unit pattern divided by `rps`.

    `num_prompts` fixes the count; otherwise the level holds what arrives within `duration_s`, and at
    least `min_requests` after the warm-up window, so a low rate still measures enough requests.
    """
    if num_prompts is not None:
        return [time / rps for time in unit_arrivals(seed, num_prompts)]
    count = 64
    while True:
        times = [time / rps for time in unit_arrivals(seed, count)]  # sorted, and a prefix of any longer draw
        within = sum(1 for time in times if time < (duration_s or 0.0))
        warming = sum(1 for time in times if time < warmup_s)
        needed = max(within, warming + min_requests)
        if needed < count:
            return times[:needed]
        count *= 2


def level_send_seconds(
    rps: float, duration_s: float | None, num_prompts: int | None, min_requests: int = 0, warmup_s: float = 0.0
) -> float:
    """How long a level sends, on average (level_arrivals' rule without its seeded draw)."""
    if num_prompts is not None:
        return num_prompts / rps
    return max(duration_s or 0.0, warmup_s + min_requests / rps)


def split_prefix(input_tokens: int, cache_hit_rate: float) -> int:
    """Tokens of the shared prefix: the asked share of the prompt, leaving at least one unique token."""
    return min(round(input_tokens * cache_hit_rate), input_tokens - 1)


def level_marker(salt: str) -> str:
    """A short tag that starts each request's unique part: the same text follows at every level."""
    return f"(note {hashlib.sha256(salt.encode()).hexdigest()[:8]})"


async def build_workload(
    tokenizer: Tokenizer,
    send_times: list[float],
    input_tokens: int,
    output_tokens: int,
    cache_hit_rate: float,
    seed: int,
    salt: str = "",
) -> Workload:
    """Prompts for `send_times`: every request starts with the one shared prefix, then the level's marker
    and the same unique text at every level.

    Prefixes depend on `seed` only (so they stay cached across levels); the text after the marker on
    `seed` and the request's index; the marker on `salt`, which the caller makes unique per level and
    run so no request is ever served past its prefix from an earlier level's or run's cache.
    """
    prefix_tokens = split_prefix(input_tokens, cache_hit_rate)
    prefixes: list[str] = []
    if prefix_tokens > 0:  # the seed string keeps the group number of the prefix groups it once had
        text, _ = await text_of_length(tokenizer, prefix_tokens, random.Random(f"prefix-{seed}-0"))
        prefixes.append(text)
    marker = level_marker(salt)
    gate = asyncio.Semaphore(TOKENIZE_CONCURRENCY)

    async def one(index: int, send_at: float) -> PlannedRequest:
        lead = f"{prefixes[0]} {marker}" if prefixes else marker
        generator = random.Random(f"suffix-{seed}-{index}")
        async with gate:
            prompt, counted = await text_of_length(tokenizer, input_tokens, generator, lead=lead)
        return PlannedRequest(index, send_at, prompt, counted, output_tokens)

    requests = list(await asyncio.gather(*(one(index, at) for index, at in enumerate(send_times))))
    primers = [f"{prefix} {level_marker(salt + '-primer')}" for prefix in prefixes]
    return Workload(requests=requests, primers=primers, exact_lengths=bool(tokenizer.remote))
