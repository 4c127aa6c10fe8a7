"""The scheduler's batch log lines, worded as sglang 0.5.20's (sglang/srt/managers/scheduler_components/
metrics_reporter.py, report_prefill_stats and report_decode_stats, with pool_stats_observer.py's usage parts):
one line per prefill batch with its new, cached and pending tokens, the KV token usage, the running and queued
requests, whether it ran as a graph and the input throughput (its new tokens over the time since the previous
prefill line, as sglang divides them); and one per `--decode-log-interval` decode steps (sglang's default 40)
with the running batch, KV tokens and usage, the speculative accept length and rate (accepted drafts over the
drafts proposed), and the generation throughput since the last line. Printed by the first TP rank of each
replica. Does not cover what runs or how fast (scheduler.py, the device).
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
        self.tic = self.prefill_tic = time.monotonic()

    def _usage(self, used_tokens: int) -> str:
        return f"token usage: {used_tokens / self.max_total_tokens:.2f}, "

    def prefill(self, new_seq: int, new_tokens: int, cached_tokens: int, used_tokens: int, running: int, queued: int):
        now = time.monotonic()
        gap, self.prefill_tic = now - self.prefill_tic, now
        logs.info(
            f"Prefill batch, #new-seq: {new_seq}, #new-token: {new_tokens}, #cached-token: {cached_tokens}, "
            f"{self._usage(used_tokens)}#running-req: {running}, #queue-req: {queued}, #pending-token: 0, "
            f"cuda graph: False, input throughput (token/s): {new_tokens / gap if gap > 0 else 0.0:.2f}",
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
            drafts = self.forwards * max(self.draft_tokens - 1, 1)  # sglang: draft tokens - 1 proposed per round
            accept_rate = max(self.generated - self.forwards, 0) / drafts
            message += f"accept len: {accept_length:.2f}, accept rate: {accept_rate:.2f}, "
        throughput = self.generated / max(now - self.tic, 1e-9)
        message += f"cuda graph: True, gen throughput (token/s): {throughput:.2f}, #queue-req: {queued}"
        logs.info(message, self.rank)
        self.generated = self.forwards = 0
        self.tic = now
