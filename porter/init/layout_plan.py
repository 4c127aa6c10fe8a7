"""What `porter init` decides from a checkpoint's facts, an engine's declaration and a node: the task's moving parts.

Covers the parallel layouts (TP x DP using every GPU, with and without expert parallelism) and whether each fits: the
weights a GPU holds (routed experts split over the engine's MoE ranks), the KV pool left under the engine's memory
share, and the KV headroom that pool must hold; the baseline layout and why; the topology, KV-dtype, memory and draft
tunables in the engine's own flag names (engines/*.py); the MoE tuning rows aiter will look up (every padded M, each
rank's expert share, shared experts fused or not: upstream_facts.py); the workload preset. Engine facts come from the
Engine declaration and aiter's from upstream_facts.py, never from a model's name. Does not write YAML (init_task.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from porter.engines.engine import Draft, Engine
from porter.init.checkpoint_facts import CheckpointFacts
from porter.init.hardware import Gpu
from porter.schema import FlagValue
from porter.upstream_facts import (
    AITER_FMOE_UNTUNED_COLUMNS,
    AITER_FP8,
    AITER_MOE_QUANT,
    AITER_MXFP4_PAD,
    aiter_padded_m,
)

# The story's workload (tasks/glm52_mi355x.yaml): 20k-token prompts with 60% prefix-cache hits and 1k tokens out, a
# knee under a 5 s p99 TTFT; single stream 10k in, 1.5k out. Targets are relative: nobody knows them on day 0.
PRESET = {
    "throughput": {
        "workload": {
            "input_tokens": 20000,
            "output_tokens": 1000,
            "cache_hit_rate": 0.6,
            "duration_s": 300,
            "warmup_s": 30,
            "seed": 0,
        },
        "rps": [0.5, 1.0, 1.5, 2.0, 2.4, 3.0],
        "slo": {"ttft_s": 5, "percentile": 99},
        "metric": "output_throughput",
        "target_tok_s_per_node": "max",
        "bisect_steps": 2,
    },
    "single_stream": {"input_tokens": 10000, "output_tokens": 1500, "num_requests": 5, "target_output_tok_s": "max"},
}
# A KV pool that holds fewer than this many requests of the preset per replica sets the knee by memory, not compute:
# the story's knee (~2.4 req/s of 21k tokens, ~20 s each) keeps ~50 requests in flight on a node.
HEADROOM_REQUESTS = 16
MAX_BATCHED_TOKENS = 16384  # one step's tokens (a prefill chunk): the largest M the MoE kernel sees
# The experts' activation as aiter's fused MoE names it (aiter's ActivationType; gated SiLU, gpt-oss's SwiGLU).
ACTIVATIONS = {"silu": "ActivationType.Silu", "swiglu-clamped": "ActivationType.Swiglu"}
DRAFT_DEPTHS = (1, 3)  # one MTP layer drafts deeper by recurrence; acceptance falls fast past 3 (the story's 3/1/4)


@dataclass
class Layout:
    tp: int
    dp: int
    expert_parallel: bool
    moe_ranks: int  # the ranks the routed experts are split over (the engine's rule: tp, or tp x dp)
    weights_per_gpu: float
    kv_room_per_gpu: float  # bytes the engine's memory share leaves for the KV pool
    kv_per_token: dict[str, float]  # one GPU's KV bytes per token of its replica, by KV dtype
    expert_share: float  # the expert width one rank computes
    whole_blocks: bool  # that share is a whole number of the quantization's blocks or groups

    def tokens(self, kv: str) -> int:
        return max(0, int(self.kv_room_per_gpu / self.kv_per_token[kv])) if self.kv_per_token[kv] else 1 << 40

    def label(self) -> str:
        text = f"TP{self.tp}" + (f" x DP{self.dp}" if self.dp > 1 else "")
        return text + (" + EP" if self.expert_parallel else "")


@dataclass
class Plan:
    layouts: list[Layout]
    baseline: Layout
    kv_baseline: str  # "auto", or the fp8 value when only an fp8 cache leaves the headroom
    need_tokens: int
    flags: dict[str, FlagValue] = field(default_factory=dict)
    tunables: dict[str, list[FlagValue]] = field(default_factory=dict)
    comments: dict[str, str] = field(default_factory=dict)  # flag -> why, written beside it
    reachable: list[Layout] = field(default_factory=list)  # the layouts the topology tunables can reach
    drafts: list[Draft] = field(default_factory=list)
    tune_rows: list[dict] = field(default_factory=list)  # aiter's untuned CSV rows
    tune_shape: dict | None = None  # the checkpoint's MoE shape, for a profile's own tune command
    quant_key: str | None = None  # the aiter quantization columns (upstream_facts.AITER_MOE_QUANT)
    inferred: list[str] = field(default_factory=list)
    undecided: list[str] = field(default_factory=list)


def head_counts(facts: CheckpointFacts) -> dict[str, int]:
    """What each TP rank must hold a whole share of. Both engines shard attention heads evenly and KV heads evenly or
    replicate them when fewer than the ranks (sglang srt/models/llama.py and vLLM model_executor/models/llama.py
    LlamaAttention asserts; MLA shares no KV heads), linear-attention and Mamba heads too (qwen3_next's
    gated delta net, mamba_mixer2.py's `num_heads % tp_size`)."""
    attention, heads = facts.attention, {"attention heads": facts.attention.heads}
    if not attention.kv_lora_rank:
        heads["KV heads"] = attention.kv_heads
    heads.update({name: count for name, count in facts.sharded_heads.items() if count})
    return heads


def tp_refusal(facts: CheckpointFacts, tp: int) -> str | None:
    """Why both engines refuse this TP size for the checkpoint, or None."""
    for name, count in head_counts(facts).items():
        shares = count % tp == 0 if name != "KV heads" or count >= tp else tp % count == 0
        if not shares:
            return f"TP{tp} ({count} {name} do not shard evenly over {tp} ranks: both engines refuse to start)"
    return None


def layouts(facts: CheckpointFacts, engine: Engine, gpu: Gpu, count: int) -> list[Layout]:
    found = []
    for tp in sorted((d for d in range(1, count + 1) if count % d == 0), reverse=True):
        if tp_refusal(facts, tp):
            continue
        for expert_parallel in (False, True) if facts.moe else (False,):
            layout = _layout(facts, engine, gpu, tp, count // tp, expert_parallel)
            if not expert_parallel or facts.moe.experts % layout.moe_ranks == 0:  # whole experts on every rank
                found.append(layout)
    return found


def _layout(facts: CheckpointFacts, engine: Engine, gpu: Gpu, tp: int, dp: int, expert_parallel: bool) -> Layout:
    moe_ranks = tp * dp if engine.moe_over_data_parallel else tp
    routed = facts.weight_bytes * facts.routed_fraction
    weights = (facts.weight_bytes - routed) / tp + routed / moe_ranks
    attention = facts.attention
    if attention.kv_lora_rank:  # MLA's latent is one per token, not per head: every TP rank holds all of it
        rank_share = 1.0
    else:
        rank_share = math.ceil(attention.kv_heads / tp) / attention.kv_heads
    kv = {
        "auto": facts.kv_bytes_per_token(_dtype_bytes(facts)) * rank_share,
        "fp8": facts.kv_bytes_per_token(1) * rank_share,
    }
    share, whole = 0.0, True
    if facts.moe:
        width = _mxfp4_padded(facts, facts.moe.expert_width)
        share = width if expert_parallel else width / moe_ranks
        granule = _granule(facts)
        whole = share == int(share) and int(share) % granule == 0
    room = gpu.memory_bytes * engine.memory_share - weights
    return Layout(tp, dp, expert_parallel, moe_ranks, weights, room, kv, share, whole)


def _dtype_bytes(facts: CheckpointFacts) -> int:
    return 4 if facts.dtype == "float32" else 2


def _granule(facts: CheckpointFacts) -> int:
    quant = facts.expert_format or facts.quantization
    if quant.block:
        return int(quant.block[0])
    return int(quant.group_size or 1)


def choose_baseline(found: list[Layout], need: int) -> tuple[Layout, str, str]:
    """(layout, KV dtype, why): the widest TP that fits with a KV pool of `need` tokens and whole expert shares,
    without expert parallelism when it can; a bf16 (auto) cache before an fp8 one."""
    for kv in ("auto", "fp8"):
        for expert_parallel in (False, True):
            for layout in found:
                if layout.expert_parallel == expert_parallel and layout.whole_blocks and layout.tokens(kv) >= need:
                    why = f"the widest layout whose KV pool holds {need} tokens a replica with a {kv} KV cache"
                    if expert_parallel:
                        why += (
                            ", with expert parallelism: without it no layout gives each rank whole quantization blocks"
                        )
                    return layout, kv, why
    widest = found[1] if len(found) > 1 and found[1].expert_parallel else found[0]
    return widest, "fp8", f"NOTHING FITS with {need} tokens of KV headroom: the widest layout, written to fail loudly"


def plan(facts: CheckpointFacts, engine: Engine, gpu: Gpu, count: int) -> Plan:
    found = layouts(facts, engine, gpu, count)
    if not found:
        raise ValueError(f"no TP size of {count} GPUs shards the checkpoint evenly: {tp_refusal(facts, 1)}")
    load = PRESET["throughput"]["workload"]
    need = HEADROOM_REQUESTS * (load["input_tokens"] + load["output_tokens"])
    baseline, kv, why = choose_baseline(found, need)
    result = Plan(found, baseline, kv, need)
    result.inferred.append(f"baseline {baseline.label()}: {why}")
    refused = [tp_refusal(facts, tp) for tp in range(1, count + 1) if count % tp == 0]
    result.inferred += [f"not {reason}" for reason in refused if reason]
    _topology(result, facts, engine)
    _dp_attention(result, facts, engine)
    _memory_and_cache(result, facts, engine)
    _speculative(result, facts, engine)
    _tuning(result, facts, gpu)
    if not baseline.whole_blocks or baseline.tokens(kv) < need:
        result.undecided.append(
            f"no layout of {count} x {gpu.name} holds the weights with {need} tokens of KV headroom"
        )
    return result


def _topology(result: Plan, facts: CheckpointFacts, engine: Engine) -> None:
    baseline, need = result.baseline, result.need_tokens
    fits = [layout for layout in result.layouts if layout.whole_blocks and layout.tokens("fp8") >= need]
    same_ep = [layout for layout in fits if layout.expert_parallel == baseline.expert_parallel] or [baseline]
    tps = [baseline.tp] + sorted({layout.tp for layout in same_ep} - {baseline.tp}, reverse=True)
    dps = [baseline.dp] + sorted({layout.dp for layout in same_ep} - {baseline.dp})
    tp_flag, dp_flag, ep_flag = engine.tensor_parallel[0], engine.data_parallel[0], engine.expert_parallel[0]
    result.flags[tp_flag], result.flags[dp_flag] = baseline.tp, baseline.dp if baseline.dp > 1 else None
    result.tunables[tp_flag] = tps
    result.tunables[dp_flag] = [dp if dp > 1 else None for dp in dps]  # null: one replica, the flag left out
    left_out = [layout for layout in result.layouts if layout.expert_parallel == baseline.expert_parallel]
    left_out = [layout for layout in left_out if layout not in same_ep]
    result.comments[tp_flag] = "layouts that fit: " + ", ".join(layout.label() for layout in same_ep)
    if left_out:
        result.comments[tp_flag] += "; not " + ", ".join(_why_not(layout, facts, result) for layout in left_out)
    if open_sizes := sorted(facts.open & {"weights", "KV per token"}):
        result.comments[tp_flag] += f" (by the {' and '.join(open_sizes)} as far as init read: undecided)"
    result.reachable = [layout for layout in same_ep if layout.tp in tps]
    if not facts.moe:
        return
    ep_fits = [layout for layout in fits if layout.expert_parallel and layout.tp == baseline.tp]
    on: FlagValue = True if engine.expert_parallel_switch else baseline.tp
    if baseline.expert_parallel:
        no_ep = next(layout for layout in result.layouts if layout.tp == baseline.tp and not layout.expert_parallel)
        share = f"{no_ep.expert_share:g} of {facts.moe.expert_width}, not whole {_granule(facts)}-wide blocks"
        result.flags[ep_flag], result.tunables[ep_flag] = on, [on]
        result.comments[ep_flag] = f"needed: without it a rank's expert share is {share}"
    elif ep_fits:
        result.flags[ep_flag], result.tunables[ep_flag] = None, [None, on]
        result.comments[ep_flag] = "whole experts per rank (an all-to-all instead of the expert all-reduce)"
        result.reachable += ep_fits


def _dp_attention(result: Plan, facts: CheckpointFacts, engine: Engine) -> None:
    """DP attention (attention data parallel within one replica's TP ranks) where upstream says it runs: never with
    DSA on ROCm (SemiAnalysisAI/InferenceX benchmarks/single_node/agentic/glm5.2_fp4_mi355x_sglang_mtp.sh at a3b8982c:
    "DSA + dp-attention hangs a collective under long-context prefill on ROCm"), else for the architectures its help
    names."""
    switch, size = engine.dp_attention, engine.data_parallel[0]
    if not switch:
        return
    tp = next((layout.tp for layout in result.reachable if layout.dp == 1 and layout.tp > 1), 0)
    if facts.attention.index_topk or not tp:
        hangs = f"with {facts.attention.kind} it hangs on ROCm (InferenceX glm5.2_fp4_mi355x_sglang_mtp.sh, a3b8982c)"
        result.inferred.append(f"no --{switch}: " + (hangs if tp else "no one-replica layout fits to split"))
    elif facts.architecture not in engine.dp_attention_architectures:
        result.undecided.append(
            f"DP attention: {engine.name} {engine.version}'s help names {', '.join(engine.dp_attention_architectures)}"
            f", not {facts.architecture}: not offered (--{switch} by hand if its model code runs under it)"
        )
    else:
        result.flags[switch], result.tunables[switch] = None, [None, True]
        result.tunables[size] = list(dict.fromkeys([*result.tunables[size], tp]))
        later = "".join(
            f"; {change.since} on: {engine.describe_flags(engine.spelled_for(change.since, {switch: True, size: tp}))}"
            for change in engine.respellings
        )
        result.comments[switch] = f"{engine.name} {engine.version}'s help names {facts.architecture}; with it --{size} "
        result.comments[switch] += f"{tp} splits TP{tp}'s attention, the FFN stays TP{later} (serve spells the image's)"


def _why_not(layout: Layout, facts: CheckpointFacts, result: Plan) -> str:
    if not layout.whole_blocks:
        return f"{layout.label()} (expert share {layout.expert_share:g}, not whole {_granule(facts)}-blocks)"
    return f"{layout.label()} (KV pool under {result.need_tokens} tokens)"


def _memory_and_cache(result: Plan, facts: CheckpointFacts, engine: Engine) -> None:
    share = engine.memory_share
    result.flags[engine.memory_fraction] = share
    result.tunables[engine.memory_fraction] = [share, round(share - 0.05, 2)]
    kv_value = "auto" if result.kv_baseline == "auto" else engine.kv_cache_fp8
    result.flags[engine.kv_cache_dtype] = kv_value
    result.tunables[engine.kv_cache_dtype] = list(dict.fromkeys([kv_value, "auto", engine.kv_cache_fp8]))
    per_token = facts.kv_bytes_per_token(_dtype_bytes(facts))
    result.comments[engine.kv_cache_dtype] = (
        f"{per_token / 1024:.1f} KiB a token at {facts.dtype}, half in fp8 ({facts.attention.kind})"
        + (" as far as init read: undecided" if "KV per token" in facts.open else "")
    )
    result.flags[engine.max_batched_tokens] = MAX_BATCHED_TOKENS
    result.comments[engine.max_batched_tokens] = "one step's tokens: the largest batch the MoE tuning rows cover"
    if facts.remote_code:
        result.flags[engine.remote_code] = True
        result.comments[engine.remote_code] = "config.json's auto_map names the checkpoint's own code"
    if facts.quantization.kv_cache:
        result.inferred.append(f"the checkpoint carries a {facts.quantization.kv_cache} KV-cache scheme")


def _speculative(result: Plan, facts: CheckpointFacts, engine: Engine) -> None:
    if not facts.mtp_layers:
        return
    depths = sorted(set(DRAFT_DEPTHS) | {facts.mtp_layers})
    result.drafts = [Draft(engine.mtp_method, depth) for depth in depths]
    for draft in result.drafts:
        for flag, value in engine.draft_flags(draft).items():
            result.flags[flag] = None
            values = result.tunables.setdefault(flag, [None])
            if value not in values:
                values.append(value)
    first = engine.speculative_flags[0]
    result.comments[first] = f"the checkpoint's {facts.mtp_layers} MTP layer(s) as the draft, depths {depths}"


def tune_shapes(result: Plan, facts: CheckpointFacts) -> list[tuple[int, int, int, int]]:
    """(model_dim, inter_dim, expert, topk) of every layout in the tunables, as aiter's own lists write them."""
    moe, shapes = facts.moe, []
    model_dim = _mxfp4_padded(facts, moe.hidden)
    fused = moe.shared_experts and moe.shared_width == moe.expert_width
    for layout in result.reachable or [result.baseline]:
        if layout.expert_parallel:
            shapes.append((model_dim, int(layout.expert_share), moe.experts // layout.moe_ranks, moe.top_k))
            continue
        shapes.append((model_dim, int(layout.expert_share), moe.experts, moe.top_k))
        if fused:
            shapes.append(
                (model_dim, int(layout.expert_share), moe.experts + moe.shared_experts, moe.top_k + moe.shared_experts)
            )
    return list(dict.fromkeys(shapes))


def _mxfp4_padded(facts: CheckpointFacts, value: int) -> int:
    """A width as aiter tunes it: an MXFP4 checkpoint's padded to a multiple of AITER_MXFP4_PAD."""
    if getattr(facts.expert_format, "method", "") != "mxfp4" or value % AITER_MXFP4_PAD == 0:
        return value
    return value + AITER_MXFP4_PAD - value % AITER_MXFP4_PAD


def quant_key(facts: CheckpointFacts, gpu: Gpu) -> tuple[str | None, str]:
    """The aiter columns of the routed experts' format (upstream_facts.AITER_MOE_QUANT), or None and why not."""
    quant = facts.expert_format
    if quant is None:
        return "none", "unquantized bf16 experts"
    if not quant.weight_bits:
        return None, f"the experts' format is not read ({quant.summary})"
    if quant.block and quant.weight_bits == 8:
        return "fp8-block", f"fp8 with {quant.block[0]}x{quant.block[1]} blocks"
    if quant.weight_bits == 8 and quant.weight_kind == "float" and not quant.group_size:
        return "fp8-channel", "fp8 per channel, per-token activations"
    if quant.weight_bits == 4 and quant.group_size == 32 and gpu.arch != "gfx950" and quant.weight_kind == "float":
        return None, f"MXFP4 kernels need gfx950 (aiter's per_1x32 fp4); {gpu.name} is {gpu.arch}"
    if quant.weight_bits == 4 and quant.group_size == 32:
        weight_only = "weight-only" in quant.summary or quant.method == "mxfp4"
        kind = "int4" if quant.weight_kind == "int" else "fp4"
        key = f"{kind}-weight-only" if weight_only or kind == "int4" else kind
        return (key, quant.summary) if key in AITER_MOE_QUANT else (None, f"aiter lists no {key} fused MoE")
    return None, f"aiter's own untuned lists have no fused-MoE columns for {quant.summary}"


def _tuning(result: Plan, facts: CheckpointFacts, gpu: Gpu) -> None:
    if not facts.moe:
        return
    moe = facts.moe
    tokens = sorted({aiter_padded_m(m) for m in range(1, MAX_BATCHED_TOKENS + 1)})
    shapes = tune_shapes(result, facts)
    result.tune_shape = {
        "model_dim": moe.hidden,
        "inter_dim": moe.expert_width,
        "experts": moe.experts,
        "topk": moe.top_k,
        "inter_dims": ",".join(str(width) for width in sorted({shape[1] for shape in shapes})),
        "tokens": ",".join(str(token) for token in tokens),  # every padded M aiter looks a config up by
    }
    key, why = quant_key(facts, gpu)
    if not moe.top_k or facts.activation not in ACTIVATIONS:
        key, why = None, f"top-k {moe.top_k or 'undecided'}, activation {facts.activation}: aiter's fused MoE "
        why += f"tunes {', '.join(ACTIVATIONS)} experts"
    if open_shape := sorted(facts.open & {"MoE", "MLP activation", "expert dtype"}):
        key, why = None, f"the {' and '.join(open_shape)} undecided (rows for a shape never run tune nothing)"
    result.quant_key = key
    if key is None:
        result.undecided.append(f"no MoE tuning rows: {why}; AITER_ONLINE_TUNE=1 makes aiter tune what it meets")
        return
    fp8 = AITER_FP8.get(gpu.arch, "torch.float8_e4m3fn")
    q_a, q_w, q_type = (value.format(fp8=fp8) for value in AITER_MOE_QUANT[key])
    act = ACTIVATIONS[facts.activation]
    for model_dim, inter, experts, topk in shapes:
        for token in tokens:
            values = [token, model_dim, inter, experts, topk, act, "torch.bfloat16", q_a, q_w, q_type, 1, 0]
            result.tune_rows.append(dict(zip(AITER_FMOE_UNTUNED_COLUMNS, values, strict=True)))
    result.inferred.append(
        f"MoE tuning shape model_dim {moe.hidden}, inter_dim {moe.expert_width}, E={moe.experts}, topk={moe.top_k}, "
        f"{act}: {len(result.tune_rows)} rows ({why}; every padded M up to {MAX_BATCHED_TOKENS} tokens x "
        f"{len(shapes)} shapes: each layout's expert share, a same-width shared expert fused or "
        "not)"
    )
