"""The device model: step timings, kernel speeds, draft acceptance, numerics and the node's properties.

The device is a node of GPUs running one model family: its work per token comes from the family's checkpoint
config.json (families/, the same declaration make_checkpoint.py writes into the image; never from the sandbox, whose
copy the agent may edit), its speed from the node's rates below. From the config: the MLA attention, routed and
shared expert and dense GEMM work per token (multiply-accumulates), the weight bytes a decode step reads (the
attention, the dense layers, the active experts and lm_head, in the checkpoint's weight format), the KV bytes per
token, the all-reduce bytes per token and the layer count, and what one MTP draft step reads. One replica (a TP
group) runs one step at a time. Prefill, per uncached prompt token: that GEMM work at the node's rate for each kind
(the MoE's by weight format: MXFP4 runs twice FP8's matrix rate on MI355X) over the TP group, plus an all-reduce
cost that grows with TP size; cached prefix tokens cost almost nothing. A decode step: weight reads (nearly flat in
TP at batch 1), all-reduce latency per layer (which the fused all-reduce shortens, most at TP8), a per-sequence cost
and a KV-read cost per cached context token (what a narrower KV cache dtype saves: decode reads, not prefill
compute; the DSA decode backend the engine chose reads them at its own speed). The MoE part of a step runs at the
tuned speed only when the engine launched a tuned kernel for that step (a kernel name this device knows): a step
whose size the tuned config has no row for runs on the slower default path; an expert share padded to whole
quantization blocks (sglang's aiter MoE at a split that is not) computes and reads the padding too. MLA prefill runs
slower on the generic attention path than on a head-size kernel (an fmha v3 kernel whose head sizes fit the
family's). Speculative decoding: each draft step costs a small forward, verifying the draft tokens costs more the
larger the batch, and each request advances by 1 + the expected number of accepted draft tokens, from the family's
acceptance-by-position profile scaled by how predictable the request's text is. Start-up: each stage takes the
node's time (process group, reading the checkpoint at disk speed or from the page cache once read, a kernel build,
graph capture per batch size); the engine sleeps it, scaled by its clock. The rates were fitted once so the
flagship's shape (GLM-5.2) gives the story's proportions; parameters can be overridden per family (families/*.py
DEVICE) and per scenario (scenario.json "device"). Twin numbers, not MI355X figures. Does not cover the socket
protocol (server.py).
"""

from __future__ import annotations

import math
import re
import sys
import zlib
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the family declarations beside the device, on the host
import families  # noqa: E402

DEFAULTS: dict = {
    "name": "AMD Instinct MI355X",
    "gcn_arch": "gfx950",
    "count": 8,
    "total_memory_gb": 288.0,
    "cu_num": 256,
    "lds_bytes": 163840,
    # prefill, ms x GPUs per billion multiply-accumulates of each kind
    "prefill_attention_ms_per_gmac": 0.087014,
    "prefill_moe_ms_per_gmac": {"mxfp4": 0.031397, "fp8": 0.062793},
    "prefill_dense_ms_per_gmac": 0.098096,
    "moe_default_slowdown": 2.0,
    "prefill_attention_fallback_slowdown": 2.5,
    "prefill_cached_token_ms": 0.002,
    "prefill_batch_overhead_ms": 3.0,
    "prefill_allreduce_ms_per_mb": {"1": 0.0, "2": 0.010433, "4": 0.020867, "8": 0.076685},
    "allreduce_fusion_factor": {"prefill": 0.75, "decode": 0.5},
    # decode step: weight reads per GB of active weights, all-reduce latency per layer
    "decode_weights_ms_per_gb": {"1": 0.35338, "2": 0.33129, "4": 0.30921, "8": 0.28270},
    "decode_moe_default_slowdown": 1.03,
    "decode_allreduce_ms_per_layer": {"1": 0.0, "2": 0.0076923, "4": 0.013462, "8": 0.018590},
    "decode_per_sequence_ms": 0.15,
    "decode_kv_ms_per_mb": 0.0083467,
    "dsa_decode_kv_factor": {"triton": 1.25},  # the sparse-attention decode backends' KV reads, against tilelang's
    "kv_read_factor": {"fp8_e4m3": 0.5, "fp8_e5m2": 0.5, "fp4_e2m1": 0.3},
    # each family sets its MTP acceptance by draft position and its error rates (families/*.py DEVICE)
    "draft_content_spread": 0.1,
    "verify_cost_per_draft_token": 0.02,
    "verify_batch_scale": 16,
    "draft_step_ms_per_gb": 0.12918,
    "kv_extra_error": {"fp8_e4m3": [0.006, 0.008], "fp8_e5m2": [0.12, 0.15], "fp4_e2m1": [0.30, 0.35]},
    "corrupt_error_rate": 0.92,
    # MXFP4 linears whose groups are scaled by other than their e8m0 bytes say: added per factor of two off
    "fp4_scale_error": [0.2, 0.18],
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
KERNEL_NAME = re.compile(r"^moe_ck2stages_gemm1_256x(32|64|128)x(64|128)x(128|256)_(1x4|2x2)_(MXFP4|MulABScale)_v[13]$")
PREFILL_KERNEL = re.compile(r"^fmha_v3_fwd_hd(?P<qk>\d+)_(?P<v>\d+)$")
BYTES_PER_WEIGHT = {"mxfp4": 0.5 + 1 / 32, "fp8": 1 + 4 / (128 * 128)}  # values plus their scales
BF16 = 2


def weight_format(config: dict) -> str:
    """The routed experts' format: Quark MXFP4 or FP8 (block)."""
    quantization = config.get("quantization_config") or {}
    return "fp8" if quantization.get("quant_method") == "fp8" else "mxfp4"


def checkpoint_shape(config: dict) -> dict:
    """Per-token work and bytes of a model, from its config.json (MLA attention, MoE with shared experts)."""
    hidden, layers, dense = config["hidden_size"], config["num_hidden_layers"], config["first_k_dense_replace"]
    heads, rope, nope, v_head = (
        config[k] for k in ("num_attention_heads", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
    )
    q_rank, kv_rank = config["q_lora_rank"], config["kv_lora_rank"]
    attention = (
        hidden * q_rank + q_rank * heads * (nope + rope) + hidden * (kv_rank + rope)
        + kv_rank * heads * (nope + v_head) + heads * v_head * hidden
    )  # fmt: skip
    experts = (
        3 * hidden * config["moe_intermediate_size"] * (config["num_experts_per_tok"] + config["n_shared_experts"])
    )
    dense_mlp, head = dense * 3 * hidden * config["intermediate_size"], hidden * config["vocab_size"]
    quant = weight_format(config)
    per_weight = BYTES_PER_WEIGHT[quant]
    layer_gb = (attention + experts) * per_weight / 1e9
    return {
        "quant": quant,
        "layers": layers,
        "attention_gmac": layers * attention / 1e9,
        "moe_gmac": (layers - dense) * experts / 1e9,
        "dense_gmac": (dense_mlp + head) / 1e9,
        "allreduce_mb": 2 * layers * hidden * BF16 / 1e6,  # two all-reduces of the hidden state per layer
        "active_gb": (layers * attention + (layers - dense) * experts + dense_mlp) * per_weight / 1e9
        + head * BF16 / 1e9,
        "kv_mb": (kv_rank + rope) * BF16 * layers / 1e6,
        "draft_step_gb": layer_gb + (2 * hidden * hidden + head) * BF16 / 1e9,  # one layer, eh_proj, the MTP head
        "qk_head": nope + rope,
        "v_head": v_head,
        "expert_gb": (layers - dense) * experts * per_weight / 1e9,  # the active experts' share of active_gb
        "moe_inter": config["moe_intermediate_size"],
        "moe_block": (config["quantization_config"].get("weight_block_size") or [0])[0] if quant == "fp8" else 0,
    }


class Device:
    """The device running one family with one scenario's parameters (DEFAULTS, updated by the family's DEVICE, then
    by the scenario's overrides)."""

    def __init__(self, overrides: dict | None = None, family: str = families.DEFAULT):
        declared = families.family(family)
        self.p = {**DEFAULTS, **declared.DEVICE, **(overrides or {})}
        self.shape = checkpoint_shape(declared.config())
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

    def prefill_attention_native(self, config: dict) -> bool:
        """Whether MLA prefill runs on a head-size kernel that fits this family's heads (an engine that names no
        prefill kernel is taken to run one)."""
        kernel = (config.get("kernels") or {}).get("mla_prefill")
        if kernel is None:
            return True
        match = PREFILL_KERNEL.match(str(kernel))
        return bool(match) and int(match["qk"]) >= self.shape["qk_head"] and int(match["v"]) == self.shape["v_head"]

    def moe_padding(self, config: dict) -> float:
        """How much wider each rank's expert share runs than the model's: a share split over `moe_tp` ranks that is
        not whole quantization blocks runs padded up to whole blocks (the only way such a layout starts)."""
        block, width = self.shape["moe_block"], self.shape["moe_inter"] / int(config.get("moe_tp") or 1)
        return math.ceil(width / block) * block / width if block else 1.0

    def prefill_ms(self, config: dict, uncached: int, cached: int, moe_kernel: str = "") -> float:
        p, shape, tp = self.p, self.shape, int(config.get("tp", 8))
        attention = shape["attention_gmac"] * p["prefill_attention_ms_per_gmac"]
        attention *= 1.0 if self.prefill_attention_native(config) else p["prefill_attention_fallback_slowdown"]
        moe = shape["moe_gmac"] * p["prefill_moe_ms_per_gmac"][shape["quant"]]
        moe *= (1.0 if self.moe_tuned(moe_kernel) else p["moe_default_slowdown"]) * self.moe_padding(config)
        per_token = (attention + moe + shape["dense_gmac"] * p["prefill_dense_ms_per_gmac"]) / tp
        allreduce = self._by_tp("prefill_allreduce_ms_per_mb", tp) * shape["allreduce_mb"]
        allreduce *= self._allreduce_factor(config, "prefill")
        return (
            p["prefill_batch_overhead_ms"] + uncached * (per_token + allreduce) + cached * p["prefill_cached_token_ms"]
        )

    def decode_ms(self, config: dict, batch: int, context: int, moe_kernel: str = "") -> float:
        p, shape, tp = self.p, self.shape, int(config.get("tp", 8))
        read_gb = shape["active_gb"] + shape["expert_gb"] * (self.moe_padding(config) - 1)
        weights = self._by_tp("decode_weights_ms_per_gb", tp) * read_gb
        weights *= 1.0 if self.moe_tuned(moe_kernel) else p["decode_moe_default_slowdown"]
        allreduce = self._by_tp("decode_allreduce_ms_per_layer", tp) * shape["layers"]
        allreduce *= self._allreduce_factor(config, "decode")
        kv_factor = p["kv_read_factor"].get(config.get("kv_cache_dtype"), 1.0)
        kv_factor *= p["dsa_decode_kv_factor"].get(config.get("dsa_decode_backend"), 1.0)
        kv_read = p["decode_kv_ms_per_mb"] * shape["kv_mb"] * context * kv_factor
        step = weights + allreduce + p["decode_per_sequence_ms"] * batch + kv_read
        steps, drafts = self._draft_shape(config)
        if steps:
            verify = p["verify_cost_per_draft_token"] * drafts * (1 + batch / p["verify_batch_scale"])
            step = step * (1 + verify) + p["draft_step_ms_per_gb"] * shape["draft_step_gb"] * steps
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

    def error_rates(self, kv_cache_dtype: str, corrupt: bool, fp4_unit_scale: float = 1.0) -> list[float]:
        """Word-problem and multiple-choice error rates of a launch: the family's, plus what the KV dtype loses,
        plus what MXFP4 linears lose when a unit-scale group is multiplied by other than 1 (garbage: all lost)."""
        if corrupt or fp4_unit_scale <= 0 or not math.isfinite(fp4_unit_scale):
            return [self.p["corrupt_error_rate"]] * 2
        extra = self.p["kv_extra_error"].get(kv_cache_dtype, [0.0, 0.0])
        off = abs(math.log2(fp4_unit_scale))
        scale = [per_factor * off for per_factor in self.p["fp4_scale_error"]]
        rates = [base + more + lost for base, more, lost in zip(self.p["base_error_rates"], extra, scale, strict=True)]
        return [min(rate, self.p["corrupt_error_rate"]) for rate in rates]

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
