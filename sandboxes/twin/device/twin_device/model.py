"""The device model: step timings, kernel speeds, draft acceptance, numerics and the node's properties.

One replica (a TP group) runs one step at a time. Prefill, per uncached prompt token: attention + MoE +
dense compute over the TP group, plus an all-reduce cost that grows with TP size; cached prefix tokens cost
almost nothing. A decode step: weight reads (nearly flat in TP at batch 1), all-reduce latency, a
per-sequence cost and a KV-read cost per cached context token. The MoE part runs at the tuned speed only
when the engine launched a tuned kernel for the shape (a kernel name this device knows); the default path
is slower. Speculative decoding multiplies the step by a verify cost and advances each request by the
expected accepted length. Parameters can be overridden per scenario (scenario.json "device").
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
    "kv_attention_factor": {"fp8_e4m3": 0.5, "fp8_e5m2": 0.5, "fp4_e2m1": 0.3},
    "allreduce_fusion_factor": 0.75,
    "decode_weights_ms": {"1": 14.5, "2": 13.5, "4": 13.0, "8": 12.5},
    "decode_moe_default_slowdown": 1.03,
    "decode_allreduce_ms": {"1": 0.0, "2": 1.0, "4": 1.8, "8": 2.5},
    "decode_per_sequence_ms": 0.25,
    "decode_kv_ms_per_1k_tokens": 0.15,
    "kv_read_factor": {"fp8_e4m3": 0.5, "fp8_e5m2": 0.5, "fp4_e2m1": 0.3},
    "draft_acceptance": 0.9,
    "verify_cost_per_draft_token": 0.02,
    "draft_step_cost": 0.01,
    "base_error_rates": [0.050, 0.190],
    "kv_extra_error": {"fp8_e4m3": [0.006, 0.008], "fp8_e5m2": [0.12, 0.15], "fp4_e2m1": [0.30, 0.35]},
    "corrupt_error_rate": 0.92,
    "startup_seconds": {"load_shard": 0.6},
}
KERNEL_NAME = re.compile(r"^moe_ck2stages_gemm1_256x(32|64|128)x(64|128)x(128|256)_(1x4|2x2)_MXFP4_v[13]$")


class Device:
    """The device with one scenario's parameters (DEFAULTS updated by the scenario's overrides)."""

    def __init__(self, overrides: dict | None = None):
        self.p = {**DEFAULTS, **(overrides or {})}

    def properties(self) -> dict:
        keys = ("name", "gcn_arch", "count", "total_memory_gb", "cu_num", "lds_bytes")
        return {key: self.p[key] for key in keys}

    def _by_tp(self, table: str, tp: int) -> float:
        values = {int(size): value for size, value in self.p[table].items()}
        return values[min(values, key=lambda size: abs(size - tp))]

    def moe_tuned(self, config: dict) -> bool:
        kernels = config.get("moe_kernels") or []
        return bool(kernels) and all(KERNEL_NAME.match(name or "") for name in kernels)

    def _allreduce_factor(self, config: dict) -> float:
        return self.p["allreduce_fusion_factor"] if config.get("allreduce_fusion") else 1.0

    def prefill_ms(self, config: dict, uncached: int, cached: int) -> float:
        p, tp = self.p, int(config.get("tp", 8))
        attention = p["prefill_attention_ms"] * p["kv_attention_factor"].get(config.get("kv_cache_dtype"), 1.0)
        moe = p["prefill_moe_tuned_ms"] * (1.0 if self.moe_tuned(config) else p["moe_default_slowdown"])
        per_token = (attention + moe + p["prefill_dense_ms"]) * 8 / tp
        allreduce = self._by_tp("prefill_allreduce_ms", tp) * self._allreduce_factor(config)
        return (
            p["prefill_batch_overhead_ms"] + uncached * (per_token + allreduce) + cached * p["prefill_cached_token_ms"]
        )

    def decode_ms(self, config: dict, batch: int, context: int) -> float:
        p, tp = self.p, int(config.get("tp", 8))
        weights = self._by_tp("decode_weights_ms", tp)
        weights *= 1.0 if self.moe_tuned(config) else p["decode_moe_default_slowdown"]
        allreduce = self._by_tp("decode_allreduce_ms", tp) * self._allreduce_factor(config)
        kv_factor = p["kv_read_factor"].get(config.get("kv_cache_dtype"), 1.0)
        kv_read = p["decode_kv_ms_per_1k_tokens"] * context / 1000 * kv_factor
        step = weights + allreduce + p["decode_per_sequence_ms"] * batch + kv_read
        steps = int(config.get("spec_steps") or 0)
        if steps:
            verify = 1 + p["verify_cost_per_draft_token"] * int(config.get("spec_draft_tokens") or 0)
            step *= verify + p["draft_step_cost"] * steps
        return step

    def acceptance_by_position(self, config: dict) -> list[float]:
        """Probability that the draft token at each position is accepted (what MTP benchmarks report)."""
        depth = min(int(config.get("spec_steps") or 0), max(int(config.get("spec_draft_tokens") or 0) - 1, 1))
        return [round(self.p["draft_acceptance"] ** position, 3) for position in range(1, depth + 1)]

    def advance(self, config: dict) -> float:
        """Expected tokens a request advances per step."""
        steps = int(config.get("spec_steps") or 0)
        if not steps:
            return 1.0
        depth = min(steps, max(int(config.get("spec_draft_tokens") or 0) - 1, 1))
        return sum(self.p["draft_acceptance"] ** position for position in range(depth + 1))

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

    def startup_seconds(self, stage: str) -> float:
        return float(self.p["startup_seconds"].get(stage, 0.0))
