"""The device model: step timings, kernel speeds, draft acceptance, numerics and the node's properties.

One replica (a TP group) runs one step at a time. Prefill, per uncached prompt token: attention + MoE +
dense compute over the TP group, plus an all-reduce cost that grows with TP size; cached prefix tokens cost
almost nothing. A decode step: weight reads (nearly flat in TP at batch 1), all-reduce latency (which the
fused all-reduce shortens, most at TP8), a per-sequence cost and a KV-read cost per cached context token
(what a narrower KV cache dtype saves: decode reads, not prefill compute; the DSA decode backend the engine
chose reads them at its own speed). The MoE part of a step runs at the tuned speed only when the engine
launched a tuned kernel for that step (a kernel name this device knows): a step whose size the tuned config
has no row for runs on the slower default path. Speculative decoding: each draft step costs a small forward,
verifying the draft tokens costs more the larger the batch, and each request advances by 1 + the expected
number of accepted draft tokens, from an acceptance-by-position profile scaled by how predictable the
request's text is.
Start-up: each stage takes the node's time (process group, reading the checkpoint at disk speed or from the
page cache once read, a kernel build, graph capture per batch size); the engine sleeps it, scaled by its clock.
Parameters can be overridden per scenario (scenario.json "device").
Twin numbers, not MI355X figures. Does not cover the socket protocol (server.py).
"""

from __future__ import annotations

import re
import zlib

DEFAULTS: dict = {
    "name": "AMD Instinct MI355X",
    "gcn_arch": "gfx950",
    "count": 8,
    "total_memory_gb": 288.0,
    "cu_num": 256,
    "lds_bytes": 163840,
    "prefill_attention_ms": 0.14,
    "prefill_moe_tuned_ms": 0.10,
    "moe_default_slowdown": 2.0,
    "prefill_dense_ms": 0.02,
    "prefill_cached_token_ms": 0.002,
    "prefill_batch_overhead_ms": 3.0,
    "prefill_allreduce_ms": {"1": 0.0, "2": 0.02, "4": 0.04, "8": 0.147},
    "allreduce_fusion_factor": {"prefill": 0.75, "decode": 0.5},
    "decode_weights_ms": {"1": 8.0, "2": 7.5, "4": 7.0, "8": 6.4},
    "decode_moe_default_slowdown": 1.03,
    "decode_allreduce_ms": {"1": 0.0, "2": 0.6, "4": 1.05, "8": 1.45},
    "decode_per_sequence_ms": 0.15,
    "decode_kv_ms_per_1k_tokens": 0.75,
    "dsa_decode_kv_factor": {"triton": 1.25},  # the sparse-attention decode backends' KV reads, against tilelang's
    "kv_read_factor": {"fp8_e4m3": 0.5, "fp8_e5m2": 0.5, "fp4_e2m1": 0.3},
    # P(the draft token at position k is accepted), a public GLM-5.2 MTP run on MI355X (about 2 of 5 accepted)
    "draft_acceptance_by_position": [0.94, 0.67, 0.28, 0.08, 0.02],
    "draft_content_spread": 0.1,
    "verify_cost_per_draft_token": 0.02,
    "verify_batch_scale": 16,
    "draft_step_ms": 0.3,
    "base_error_rates": [0.050, 0.190],
    "kv_extra_error": {"fp8_e4m3": [0.006, 0.008], "fp8_e5m2": [0.12, 0.15], "fp4_e2m1": [0.30, 0.35]},
    "corrupt_error_rate": 0.92,
    # Start-up at scale 1, from public MI355X launches: sglang's GLM-5-FP8 on 8x MI355X logs "Init torch
    # distributed ends. elapsed=13.00 s" and a cold "Load weight end. elapsed=228.09 s" for a larger checkpoint;
    # aiter's JIT modules take ~20 s each to build (ROCm/aiter#2336) and are loaded from the cache afterwards;
    # a checkpoint read once is in the page cache for the next start-up (sglang#1479: ~6 s a shard cold, a
    # fraction of that once cached). Graph capture is per captured batch size; the draft captures per step.
    "startup_seconds": {
        "init_distributed": 13.0,
        "read_gb_per_s": {"cold": 3.0, "warm": 12.0},
        "jit_build": 20.0,
        "jit_build_failed": 3.0,
        "capture_per_batch_size": 2.5,
        "draft_capture_per_batch_size_step": 0.5,
    },
}
KERNEL_NAME = re.compile(r"^moe_ck2stages_gemm1_256x(32|64|128)x(64|128)x(128|256)_(1x4|2x2)_MXFP4_v[13]$")


class Device:
    """The device with one scenario's parameters (DEFAULTS updated by the scenario's overrides)."""

    def __init__(self, overrides: dict | None = None):
        self.p = {**DEFAULTS, **(overrides or {})}
        self.page_cache: set[str] = set()  # checkpoint shards read since the node came up

    def properties(self) -> dict:
        keys = ("name", "gcn_arch", "count", "total_memory_gb", "cu_num", "lds_bytes")
        return {key: self.p[key] for key in keys}

    def _by_tp(self, table: str, tp: int) -> float:
        values = {int(size): value for size, value in self.p[table].items()}
        return values[min(values, key=lambda size: abs(size - tp))]

    @staticmethod
    def moe_tuned(kernel: str) -> bool:
        return bool(KERNEL_NAME.match(kernel or ""))

    def _allreduce_factor(self, config: dict, phase: str) -> float:
        return self.p["allreduce_fusion_factor"][phase] if config.get("allreduce_fusion") else 1.0

    def prefill_ms(self, config: dict, uncached: int, cached: int, moe_kernel: str = "") -> float:
        p, tp = self.p, int(config.get("tp", 8))
        moe = p["prefill_moe_tuned_ms"] * (1.0 if self.moe_tuned(moe_kernel) else p["moe_default_slowdown"])
        per_token = (p["prefill_attention_ms"] + moe + p["prefill_dense_ms"]) * 8 / tp
        allreduce = self._by_tp("prefill_allreduce_ms", tp) * self._allreduce_factor(config, "prefill")
        return (
            p["prefill_batch_overhead_ms"] + uncached * (per_token + allreduce) + cached * p["prefill_cached_token_ms"]
        )

    def decode_ms(self, config: dict, batch: int, context: int, moe_kernel: str = "") -> float:
        p, tp = self.p, int(config.get("tp", 8))
        weights = self._by_tp("decode_weights_ms", tp)
        weights *= 1.0 if self.moe_tuned(moe_kernel) else p["decode_moe_default_slowdown"]
        allreduce = self._by_tp("decode_allreduce_ms", tp) * self._allreduce_factor(config, "decode")
        kv_factor = p["kv_read_factor"].get(config.get("kv_cache_dtype"), 1.0)
        kv_factor *= p["dsa_decode_kv_factor"].get(config.get("dsa_decode_backend"), 1.0)
        kv_read = p["decode_kv_ms_per_1k_tokens"] * context / 1000 * kv_factor
        step = weights + allreduce + p["decode_per_sequence_ms"] * batch + kv_read
        steps, drafts = self._draft_shape(config)
        if steps:
            verify = p["verify_cost_per_draft_token"] * drafts * (1 + batch / p["verify_batch_scale"])
            step = step * (1 + verify) + p["draft_step_ms"] * steps
        return step

    @staticmethod
    def _draft_shape(config: dict) -> tuple[int, int]:
        """Draft steps and draft tokens (0, 0 without speculative decoding)."""
        steps = int(config.get("spec_steps") or 0)
        return (steps, int(config.get("spec_draft_tokens") or 0)) if steps else (0, 0)

    def acceptance_by_position(self, config: dict, content: str = "") -> list[float]:
        """Probability that the draft token at each position is accepted (what MTP benchmarks report), for
        text whose predictability is read from `content` (a hash of the request's text; "" is the average)."""
        steps, drafts = self._draft_shape(config)
        depth = min(steps, max(drafts - 1, 1)) if steps else 0
        profile = self.p["draft_acceptance_by_position"]
        factor = 1.0
        if content:
            spread = self.p["draft_content_spread"]
            factor = 1 + spread * (2 * (zlib.crc32(content.encode()) % 1000) / 999 - 1)
        return [round(min(profile[k] * factor, 0.99), 4) if k < len(profile) else 0.0 for k in range(depth)]

    def advance(self, config: dict, content: str = "") -> float:
        """Expected tokens a request advances per step: the verified token plus the accepted drafts."""
        return 1.0 + sum(self.acceptance_by_position(config, content))

    def error_rates(self, kv_cache_dtype: str, corrupt: bool) -> list[float]:
        if corrupt:
            return [self.p["corrupt_error_rate"]] * 2
        extra = self.p["kv_extra_error"].get(kv_cache_dtype, [0.0, 0.0])
        return [base + more for base, more in zip(self.p["base_error_rates"], extra, strict=True)]

    def kernel_us(self, shape: dict, token: int, block_m: int, tile: str) -> float:
        """Time of one candidate fused-MoE kernel: work over a block-size efficiency curve, plus a stable
        per-tile jitter."""
        routed = token * int(shape["topk"])
        work = routed * int(shape["model_dim"]) * int(shape["inter_dim"]) * 3 / 2.5e9
        padding = (-routed % block_m) / max(routed, 1)
        jitter = (zlib.crc32(f"{tile}{block_m}{token}".encode()) % 100) / 1000
        return round(18 + work * (1 + padding) * (1.1 - block_m / 512) * (1 + jitter), 2)

    def startup_seconds(self, stage: str, arguments: dict) -> float:
        """How long a start-up stage takes: reading a shard (cold, or from the page cache once read), a kernel
        build, initialising the process group, capturing graphs."""
        p = self.p["startup_seconds"]
        if stage == "load_shard":
            shard = str(arguments["shard"])
            speed = p["read_gb_per_s"]["warm" if shard in self.page_cache else "cold"]
            self.page_cache.add(shard)
            return float(arguments["gb"]) / speed
        if stage == "jit_build":
            return p["jit_build_failed"] if arguments.get("failed") else p["jit_build"]
        if stage == "capture":
            return p["capture_per_batch_size"] * int(arguments["batch_sizes"])
        if stage == "capture_draft":
            return p["draft_capture_per_batch_size_step"] * int(arguments["batch_sizes"]) * int(arguments["steps"])
        return float(p.get(stage, 0.0))
