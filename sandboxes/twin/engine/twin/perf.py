"""The twin's performance model: how long a prefill batch and a decode step take, in milliseconds.

One replica (a TP group) runs one step at a time; the scheduler (scheduler.py) sleeps for the time this
module returns, so queueing, batching and TTFT growth under load happen in real time. The constants are
sized so a benchmark point takes seconds on a 2-core machine and the directions of the GLM-5.2/MI355X
story hold; they are twin numbers, not MI355X figures.

Prefill, per uncached prompt token (TP8 baseline ~0.48 ms): attention + MoE + dense compute, divided over
the TP group (a TP4 replica takes twice as long per token, but there are two of them), plus an
all-reduce cost that grows with TP size (TP8 pays much more than TP4: this is why TP4xDP2 wins on a
prefill-heavy workload). Cached prefix tokens cost almost nothing. fp8 KV shrinks the attention part,
the tuned MoE kernel shrinks the MoE part (the fallback is ~1.8x slower), aiter all-reduce fusion cuts
the communication part.

Decode step: weight reads (nearly flat in TP at batch 1, so single-stream speed barely depends on TP),
all-reduce latency, a per-sequence cost and a KV-read cost per cached context token (halved by fp8).
Speculative decoding (EAGLE/MTP, topk 1): a verify step costs a decode step times (1 + 0.02 per draft
token) plus 1% per draft step, and yields 1 + a + a^2 + ... + a^steps tokens per step with per-token
acceptance a = 0.9 (depth 3: ~3.1x single stream, depth 5 / 6 draft tokens: ~4.0x).
Does not cover the KV-capacity / memory model (memory.py) or correctness (solver.py).
"""

from dataclasses import dataclass

PREFILL_ATTENTION_MS = 0.14
PREFILL_MOE_TUNED_MS = 0.10
MOE_FALLBACK_SLOWDOWN = 1.8
PREFILL_DENSE_MS = 0.02
PREFILL_CACHED_TOKEN_MS = 0.002
PREFILL_BATCH_OVERHEAD_MS = 3.0
PREFILL_ALLREDUCE_MS = {1: 0.0, 2: 0.02, 4: 0.04, 8: 0.14}
FP8_KV_ATTENTION_FACTOR = {"auto": 1.0, "bf16": 1.0, "fp8_e4m3": 0.5, "fp8_e5m2": 0.5, "fp4_e2m1": 0.3}
ALLREDUCE_FUSION_FACTOR = 0.75

DECODE_WEIGHTS_MS = {1: 14.5, 2: 13.5, 4: 13.0, 8: 12.5}
DECODE_MOE_FALLBACK_SLOWDOWN = 1.03
DECODE_ALLREDUCE_MS = {1: 0.0, 2: 1.0, 4: 1.8, 8: 2.5}
DECODE_PER_SEQUENCE_MS = 0.25
DECODE_KV_MS_PER_1K_TOKENS = 0.15
FP8_KV_READ_FACTOR = {"auto": 1.0, "bf16": 1.0, "fp8_e4m3": 0.5, "fp8_e5m2": 0.5, "fp4_e2m1": 0.3}

SPEC_ACCEPTANCE = 0.9
SPEC_VERIFY_COST_PER_DRAFT_TOKEN = 0.02
SPEC_DRAFT_STEP_COST = 0.01


@dataclass(frozen=True)
class EngineShape:
    """The serving configuration the model depends on (one replica's view)."""

    tp: int = 8
    kv_cache_dtype: str = "auto"
    moe_tuned: bool = False
    allreduce_fusion: bool = False
    speculative_steps: int = 0
    speculative_draft_tokens: int = 0


def _tp_key(table: dict[int, float], tp: int) -> float:
    return table[min(table, key=lambda size: abs(size - tp))]


def prefill_ms(shape: EngineShape, uncached_tokens: int, cached_tokens: int) -> float:
    """Time of one prefill batch on one replica."""
    attention = PREFILL_ATTENTION_MS * FP8_KV_ATTENTION_FACTOR.get(shape.kv_cache_dtype, 1.0)
    moe = PREFILL_MOE_TUNED_MS * (1.0 if shape.moe_tuned else MOE_FALLBACK_SLOWDOWN)
    compute_per_token = (attention + moe + PREFILL_DENSE_MS) * 8 / shape.tp
    allreduce = _tp_key(PREFILL_ALLREDUCE_MS, shape.tp) * (ALLREDUCE_FUSION_FACTOR if shape.allreduce_fusion else 1)
    return (
        PREFILL_BATCH_OVERHEAD_MS
        + uncached_tokens * (compute_per_token + allreduce)
        + cached_tokens * PREFILL_CACHED_TOKEN_MS
    )


def decode_step_ms(shape: EngineShape, batch_size: int, context_tokens: int) -> float:
    """Time of one decode (or speculative verify) step for `batch_size` running requests."""
    weights = _tp_key(DECODE_WEIGHTS_MS, shape.tp) * (1.0 if shape.moe_tuned else DECODE_MOE_FALLBACK_SLOWDOWN)
    allreduce = _tp_key(DECODE_ALLREDUCE_MS, shape.tp) * (ALLREDUCE_FUSION_FACTOR if shape.allreduce_fusion else 1)
    kv_read = DECODE_KV_MS_PER_1K_TOKENS * context_tokens / 1000 * FP8_KV_READ_FACTOR.get(shape.kv_cache_dtype, 1)
    step = weights + allreduce + DECODE_PER_SEQUENCE_MS * batch_size + kv_read
    if shape.speculative_steps:
        verify = 1 + SPEC_VERIFY_COST_PER_DRAFT_TOKEN * shape.speculative_draft_tokens
        step *= verify + SPEC_DRAFT_STEP_COST * shape.speculative_steps
    return step


def tokens_per_step(shape: EngineShape) -> float:
    """Expected tokens a request advances per step: 1 without speculation, 1 + a + ... + a^k with it."""
    if not shape.speculative_steps:
        return 1.0
    depth = min(shape.speculative_steps, max(shape.speculative_draft_tokens - 1, 1))
    return sum(SPEC_ACCEPTANCE**position for position in range(depth + 1))
