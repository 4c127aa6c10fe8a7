"""vLLM's periodic statistics lines, one engine (DP rank) each, printed by the API server process while it is busy:

  Engine 000: Avg prompt throughput: 1843.2 tokens/s, Avg generation throughput: 96.0 tokens/s, Running: 12 reqs,
  Waiting: 0 reqs, GPU KV cache usage: 0.4%, Prefix cache hit rate: 59.8%
  SpecDecoding metrics: Mean acceptance length: 2.61, Accepted throughput: ... tokens/s, Drafted throughput: ...
  tokens/s, Accepted: 412 tokens, Drafted: 768 tokens, Avg Draft acceptance rate: 53.6%

as vllm 0.25.1 words them (vllm/v1/metrics/loggers.py LoggingStatLogger.log, every VLLM_LOG_STATS_INTERVAL = 10 s;
vllm/v1/spec_decode/metrics.py SpecDecodingLogging.log). The interval runs on the device's clock (10 s x
TWIN_TIME_SCALE), the hit rate counts the interval's prompts, and the per-position acceptance vLLM adds is left out
(the scheduler sees how far each request advanced, not which draft position stopped it). Does not cover what runs.
"""

import os
import time

from twin import device

from vllm.logger import emit

INTERVAL_S = float(os.environ.get("VLLM_LOG_STATS_INTERVAL", "10"))


class LoggingStatLogger:
    """The scheduler's batch statistics of one engine (the interface of twin.batch_stats.BatchStats)."""

    def __init__(self, engine_index: int, max_total_tokens: int, draft_tokens: int):
        self.prefix = f"Engine {engine_index:03d}: "
        self.max_total_tokens = max(max_total_tokens, 1)
        self.drafted_per_step = max(draft_tokens - 1, 0)  # the verified token is not a draft
        self.last = time.monotonic()
        self.running = self.waiting = self.used = 0
        self._reset()

    def _reset(self) -> None:
        self.prompt_tokens = self.generation_tokens = self.cached_tokens = 0
        self.drafts = self.drafted = self.accepted = 0

    def prefill(self, new_seq: int, new_tokens: int, cached_tokens: int, used_tokens: int, running: int, queued: int):
        self.prompt_tokens += new_tokens + cached_tokens
        self.cached_tokens += cached_tokens
        self.generation_tokens += new_seq  # each prefill emits its request's first token
        self.running, self.waiting, self.used = running, queued, used_tokens
        self._maybe_log()

    def decode(self, running: int, used_tokens: int, emitted: int, queued: int) -> None:
        self.generation_tokens += emitted
        if self.drafted_per_step:
            self.drafts += running
            self.drafted += running * self.drafted_per_step
            self.accepted += max(emitted - running, 0)
        self.running, self.waiting, self.used = running, queued, used_tokens
        self._maybe_log()

    def _maybe_log(self) -> None:
        now = time.monotonic()
        elapsed = now - self.last
        if elapsed < INTERVAL_S * device.TIME_SCALE:
            return
        hit_rate = 100 * self.cached_tokens / max(self.prompt_tokens, 1)
        emit(
            "INFO",
            f"{self.prefix}Avg prompt throughput: {self.prompt_tokens / elapsed:.1f} tokens/s, "
            f"Avg generation throughput: {self.generation_tokens / elapsed:.1f} tokens/s, "
            f"Running: {self.running} reqs, Waiting: {self.waiting} reqs, "
            f"GPU KV cache usage: {100 * self.used / self.max_total_tokens:.1f}%, "
            f"Prefix cache hit rate: {hit_rate:.1f}%",
        )
        if self.drafts:
            emit(
                "INFO",
                f"SpecDecoding metrics: Mean acceptance length: {1 + self.accepted / self.drafts:.2f}, "
                f"Accepted throughput: {self.accepted / elapsed:.2f} tokens/s, "
                f"Drafted throughput: {self.drafted / elapsed:.2f} tokens/s, Accepted: {self.accepted} tokens, "
                f"Drafted: {self.drafted} tokens, Avg Draft acceptance rate: {100 * self.accepted / self.drafted:.1f}%",
            )
        self.last = now
        self._reset()
