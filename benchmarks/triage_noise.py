"""Realistic, harmless engine noise for burying logs in: what a healthy 8-rank sglang/vLLM run prints.

Covers a seeded generator of start-up lines (server-args dump, RCCL INFO, aiter JIT imports, weight
loading progress, KV pool and graph capture), the healthy marker, and serving lines (prefill/decode
batches, HTTP access log, metrics) with benign lines that contain trigger words on purpose (memory
figures, `--disable-custom-all-reduce`, "kernel" and "timeout" in settings) so the slow path is
exercised and must stay silent. Used by the corpus benchmark and the tests; includes no failure and
no untuned-config warning unless `aiter_warnings` is set.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

SERVER_ARGS = (
    "server_args=ServerArgs(model_path='/models/GLM-5.2-MXFP4', tp_size=8, dp_size=1, mem_fraction_static=0.85, "
    "kv_cache_dtype='auto', attention_backend='aiter', disable_custom_all_reduce=False, watchdog_timeout=300, "
    "dist_timeout=None, enable_error_logging=False, chunked_prefill_size=16384, speculative_algorithm=None)"
)


def _stamp(rng: random.Random, second: int) -> str:
    return f"2026-07-14 10:{(second // 60) % 60:02d}:{second % 60:02d}"


def _startup_line(rng: random.Random, index: int) -> str:
    rank = rng.randrange(8)
    stamp = _stamp(rng, index // 400)
    choice = rng.randrange(9)
    if choice == 0:
        channel = rng.randrange(32)
        return f"node-0:{1000 + rank}:{2000 + rank} [{rank}] NCCL INFO Channel {channel:02d}/32 : 0 1 2 3 4 5 6 7"
    if choice == 1:
        module = rng.choice(["rmsnorm", "moe_sorting", "custom_all_reduce", "mla"])
        return f"[aiter] import [module_{module}] under /sgl-workspace/aiter/aiter/jit/module_{module}.so"
    if choice == 2:
        done = rng.randrange(1, 164)
        progress = f"{done * 100 // 163:3d}% Completed | {done}/163 [01:{done % 60:02d}<02:10,  1.2{rank}it/s]"
        return f"Loading safetensors checkpoint shards: {progress}"
    if choice == 3:
        return f"[{stamp} TP{rank}] Load weight begin. avail mem={rng.uniform(180, 190):.2f} GB"
    if choice == 4:
        tokens, size = rng.randrange(10**6, 4 * 10**6), rng.uniform(5, 20)
        return f"[{stamp} TP{rank}] KV Cache is allocated. #tokens: {tokens}, K size: {size:.2f} GB"
    if choice == 5:
        batch, free = rng.choice([1, 2, 4, 8, 16, 32, 64, 128, 256]), rng.uniform(20, 30)
        return f"Capturing batches (bs={batch} avail_mem={free:.2f} GB):  {rng.randrange(100)}%|"
    if choice == 6:
        return f"[{stamp} TP{rank}] Using aiter kernel backend for MLA decode; page size {rng.choice([1, 16, 64])}"
    if choice == 7:
        return f"[{stamp} TP{rank}] Init torch distributed begin. timeout for collectives: 600 s"
    return f"[{stamp} TP{rank}] Memory pool end. avail mem={rng.uniform(20, 40):.2f} GB"


def _serving_line(rng: random.Random, index: int, aiter_warnings: bool) -> str:
    rank = rng.randrange(8)
    stamp = _stamp(rng, index // 300)
    choice = rng.randrange(10)
    if choice < 4:
        return (
            f"[{stamp} TP{rank}] Decode batch. #running-req: {rng.randrange(64)}, #token: {rng.randrange(10**5)}, "
            f"token usage: 0.{rng.randrange(100):02d}, cuda graph: True, gen throughput (token/s): "
            f"{rng.uniform(100, 3000):.2f}, #queue-req: {rng.randrange(4)}"
        )
    if choice < 6:
        return (
            f"[{stamp} TP{rank}] Prefill batch. #new-seq: 1, #new-token: {rng.randrange(1, 16384)}, "
            f"#cached-token: {rng.randrange(16384)}, token usage: 0.{rng.randrange(100):02d}, #running-req: "
            f"{rng.randrange(64)}, #queue-req: 0"
        )
    if choice < 8:
        return (
            f'[{stamp}] INFO:     127.0.0.1:{rng.randrange(30000, 60000)} - "POST /v1/chat/completions HTTP/1.1" 200 OK'
        )
    if choice == 8 and aiter_warnings:
        return (
            f"[aiter] shape is M:{rng.choice([1, 2, 4, 8, 16, 32, 64])}, N:{rng.choice([6144, 2048, 7168])}, K:6144, "
            "not found tuned config in /tmp/aiter_configs/bf16_tuned_gemm.csv, will use default config!"
        )
    hit_rate, request_id = rng.uniform(0, 1), rng.getrandbits(64)
    return (
        f"[{stamp}] Prefill stats: cache hit rate {hit_rate:.3f}, #request {rng.randrange(10**4)} id={request_id:016x}"
    )


def noise_lines(count: int, seed: int = 0, aiter_warnings: bool = False) -> Iterator[str]:
    """`count` lines: start-up for the first fifth, the healthy marker, then serving traffic."""
    rng = random.Random(seed)
    startup = count // 5
    yield f"[{_stamp(rng, 0)}] {SERVER_ARGS}"
    for index in range(1, count):
        if index < startup:
            yield _startup_line(rng, index)
        elif index == startup:
            yield f"[{_stamp(rng, index // 300)}] The server is fired up and ready to roll!"
        else:
            yield _serving_line(rng, index, aiter_warnings)


def bury(log: str, count: int = 100_000, seed: int = 0, aiter_warnings: bool = False) -> tuple[str, int]:
    """`log` inside `count` noise lines, after the healthy marker; returns the text and the log's first line number."""
    lines = list(noise_lines(count, seed, aiter_warnings))
    at = random.Random(seed).randrange(count // 4, count * 3 // 4)
    text = "\n".join(lines[:at] + log.rstrip("\n").split("\n") + lines[at:]) + "\n"
    return text, at + 1
