"""The scheduler's batch log lines, worded as sglang's (python/sglang/srt/managers/scheduler_metrics_mixin.py,
log_prefill_stats and log_decode_stats): one line per prefill batch, and one per `--decode-log-interval`
decode steps (sglang's default 40) with the running batch, KV token usage, the speculative accept length
and rate, and the generation throughput since the last line. Printed by the first TP rank of each replica.
Does not cover what runs or how fast (scheduler.py, the device).
"""

import time

from twin import logs

DECODE_LOG_INTERVAL = 40


class BatchStats:
    def __init__(self, rank: str, max_total_tokens: int, draft_tokens: int):
        self.rank = rank
        self.max_total_tokens = max(max_total_tokens, 1)
        self.draft_tokens = draft_tokens
        self.steps = self.generated = self.forwards = 0
        self.tic = time.monotonic()

    def _usage(self, used_tokens: int) -> str:
        return f"token usage: {used_tokens / self.max_total_tokens:.2f}, "

    def prefill(self, new_seq: int, new_tokens: int, cached_tokens: int, used_tokens: int, running: int, queued: int):
        logs.info(
            f"Prefill batch, #new-seq: {new_seq}, #new-token: {new_tokens}, #cached-token: {cached_tokens}, "
            f"{self._usage(used_tokens)}#running-req: {running}, #queue-req: {queued}, ",
            self.rank,
        )

    def decode(self, running: int, used_tokens: int, emitted: int, queued: int) -> None:
        self.steps += 1
        self.generated += emitted
        self.forwards += running
        if self.steps % DECODE_LOG_INTERVAL:
            return
        now = time.monotonic()
        message = f"Decode batch, #running-req: {running}, #token: {used_tokens}, {self._usage(used_tokens)}"
        if self.draft_tokens:
            accept_length = self.generated / max(self.forwards, 1)
            accept_rate = self.generated / max(self.forwards * self.draft_tokens, 1)
            message += f"accept len: {accept_length:.2f}, accept rate: {accept_rate:.2f}, "
        throughput = self.generated / max(now - self.tic, 1e-9)
        message += f"cuda graph: True, gen throughput (token/s): {throughput:.2f}, #queue-req: {queued}, "
        logs.info(message, self.rank)
        self.generated = self.forwards = 0
        self.tic = now
