"""Workload: prompts of exact token length with a shared prefix, fixed output lengths, Poisson arrivals.

Covers building the requests of one RPS level: prompt text made of lower-case dictionary words, a
shared prefix per group sized so the prefix-cache hit rate is the asked one (each prefix is primed
once before the level), a unique suffix per request, and seeded exponential inter-arrival gaps.
Lengths are exact when the server has POST /tokenize (vLLM and sglang shape: {"prompt"} ->
{"tokens", "count"}); without it each word is counted as one token, which holds for common short
English words after a space in the usual BPE vocabularies and exactly on the twin. Does not send
the measured requests (loadgen.py) nor compute statistics (metrics.py).
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

import aiohttp

WORDS = (
    "time year people way day man thing woman life child world school state family student group country "
    "problem hand part place case week company system program question work government number night point "
    "home water room mother area money story fact month lot right study book eye job word business issue "
    "side kind head house service friend father power hour game line end member law car city name team "
    "minute idea kid body back parent face others level office door health person art war history party "
    "result change morning reason research girl guy moment air teacher force education foot boy age policy "
    "music market sense nation plan college interest death experience effect use class control care field "
    "development role effort rate heart drug show leader light voice wife police mind price report decision "
    "son view relationship town road arm difference value building action model season society tax director "
    "position player record paper space ground form event official matter center couple site project activity "
    "star table need court oil situation cost industry figure street image phone data picture practice piece "
    "land product doctor wall patient worker news test movie north love support technology step baby computer "
    "type attention film tree source organization hair window evidence population truth blue green red black "
    "white small large good new first last long great little own other old big high different local early "
    "young important few public bad same able open river stone garden bridge cloud summer winter spring autumn"
).split()

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
    prefix_tokens: int
    prefix_group: int


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
        return len(text.split())

    async def _remote_count(self, text: str) -> int | None:
        try:
            async with self.session.post(f"{self.base_url}/tokenize", json={"prompt": text}) as response:
                if response.status != 200:
                    self.remote = False
                    return None
                body = await response.json(content_type=None)
        except (aiohttp.ClientError, ValueError):
            self.remote = False
            return None
        count = body.get("count") if isinstance(body, dict) else None
        if count is None and isinstance(body, dict) and isinstance(body.get("tokens"), list):
            count = len(body["tokens"])
        if not isinstance(count, int):
            self.remote = False
            return None
        self.remote = True
        return count


def random_words(generator: random.Random, count: int) -> list[str]:
    return [generator.choice(WORDS) for _ in range(max(count, 0))]


async def text_of_length(
    tokenizer: Tokenizer, target_tokens: int, generator: random.Random, lead: str = ""
) -> tuple[str, int]:
    """`lead` plus random words, grown or cut until the whole counts `target_tokens` (or the nearest below).

    Words are added or removed by the remaining difference, so a tokenizer that splits a few words in
    two converges in a couple of rounds; one that never lands exactly ends on the closest length below.
    """
    lead_words = lead.split()
    extra = random_words(generator, target_tokens - len(lead_words) + len(WORDS))
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
            extra += random_words(generator, word_count - len(extra))
    if best is None:
        best = (text, counted)
    return best


def poisson_arrivals(rps: float, seed: int, duration_s: float | None, num_prompts: int | None) -> list[float]:
    """Send times (s) of a Poisson process at `rps`: up to `num_prompts` requests, or until `duration_s`."""
    generator = random.Random(f"arrivals-{seed}-{float(rps)!r}")
    times: list[float] = []
    now = 0.0
    while True:
        now += generator.expovariate(rps)
        if duration_s is not None and now >= duration_s:
            break
        times.append(now)
        if num_prompts is not None and len(times) >= num_prompts:
            break
    return times


def split_prefix(input_tokens: int, cache_hit_rate: float) -> int:
    """Tokens of the shared prefix: the asked share of the prompt, leaving at least one unique token."""
    return min(round(input_tokens * cache_hit_rate), input_tokens - 1)


async def build_workload(
    tokenizer: Tokenizer,
    send_times: list[float],
    input_tokens: int,
    output_tokens: int,
    cache_hit_rate: float,
    seed: int,
    salt: str = "",
    prefix_groups: int = 1,
) -> Workload:
    """Prompts for `send_times`: request i uses prefix group i % prefix_groups and a unique suffix.

    Prefixes depend on `seed` only (so they stay cached across levels); suffixes also on `salt`, which
    the caller makes unique per level and run so no suffix is ever served from an earlier run's cache.
    """
    prefix_tokens = split_prefix(input_tokens, cache_hit_rate)
    prefixes: list[str] = []
    for group in range(prefix_groups if prefix_tokens > 0 else 0):
        text, _ = await text_of_length(tokenizer, prefix_tokens, random.Random(f"prefix-{seed}-{group}"))
        prefixes.append(text)

    gate = asyncio.Semaphore(TOKENIZE_CONCURRENCY)

    async def one(index: int, send_at: float) -> PlannedRequest:
        group = index % prefix_groups
        lead = prefixes[group] if prefixes else ""
        generator = random.Random(f"suffix-{seed}-{salt}-{index}")
        async with gate:
            prompt, counted = await text_of_length(tokenizer, input_tokens, generator, lead=lead)
        return PlannedRequest(index, send_at, prompt, counted, output_tokens, prefix_tokens, group)

    requests = list(await asyncio.gather(*(one(index, at) for index, at in enumerate(send_times))))
    primers = [f"{prefix} {WORDS[0]}" for prefix in prefixes]
    return Workload(requests=requests, primers=primers, exact_lengths=bool(tokenizer.remote))
