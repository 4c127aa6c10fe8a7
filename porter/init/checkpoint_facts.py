"""What a checkpoint's config.json and weight index say, read once for `porter init`, each fact with why it was read so.

Covers the architecture and dtype (a multimodal wrapper's text model is read from `text_config`), the
quantization_config of each format init knows (fp8 with block scales, mxfp4, Quark, compressed-tensors, ModelOpt:
method, format, weight bits, group or block size, activations, KV-cache scheme, the exclude list under its own key
with its `re:` and glob entries counted), the MoE shape (hidden size, expert width, routed experts, top-k, shared
experts, how many layers are MoE), MTP layers, the attention kind (MHA/GQA/MQA, MLA, MLA with DSA sparse attention,
hybrid linear or sliding-window layers) and context length, the weight bytes (the index's metadata.total_size, else
an estimate from the shapes: weight_estimate.py) and the KV-cache bytes per token. Each family spells these its own
way; the spellings are listed here, once, in the order they are tried. Does not plan anything (init_plan.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from porter.init import weight_estimate

# Each fact's keys, as the families spell them (first found wins).
EXPERTS = ("n_routed_experts", "num_experts", "num_local_experts")
TOP_K = ("num_experts_per_tok", "experts_per_token", "moe_topk")
MTP = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules")
DTYPES = {"bfloat16": 2, "float16": 2, "float32": 4}


@dataclass
class Quantization:
    method: str  # quant_method, or "none"
    summary: str  # what a person reads: format, bits, grouping, activations
    weight_bits: int | None = None
    weight_kind: str = ""  # float or int
    group_size: int | None = None  # elements sharing one scale along the input dimension
    block: tuple[int, int] | None = None  # 2-D weight blocks sharing one scale (fp8 block)
    exclude_key: str | None = None  # the list of modules kept unquantized, under its format's key
    exclude: list[str] = field(default_factory=list)
    kv_cache: str | None = None  # a KV-cache scheme the checkpoint carries


@dataclass
class MoeShape:
    hidden: int
    expert_width: int  # intermediate size of one routed expert
    experts: int
    top_k: int
    shared_experts: int  # always-on experts of `shared_width` each
    shared_width: int
    moe_layers: int
    dense_layers: int
    dense_width: int


@dataclass
class Attention:
    kind: str  # MHA, GQA, MQA, MLA, "MLA + DSA sparse"
    heads: int
    kv_heads: int
    head_dim: int
    kv_lora_rank: int | None = None
    rope_dim: int | None = None
    index_topk: int | None = None
    full_layers: int = 0  # layers whose KV grows with every token
    bounded_layers: str = ""  # the other layers, said in words (linear attention state, a sliding window)
    kv_elements_per_token: int = 0  # per token, all full layers, at one element per value


@dataclass
class CheckpointFacts:
    architecture: str
    model_type: str
    dtype: str
    quantization: Quantization
    moe: MoeShape | None
    mtp_layers: int
    attention: Attention
    context_length: int
    layers: int
    weight_bytes: int
    weight_from_index: bool
    remote_code: bool
    activation: str = "silu"  # the MLP's activation; "swiglu-clamped" for gpt-oss's SwiGLU with swiglu_limit
    routed_fraction: float = 0.0  # share of the weight bytes in routed experts (from the shapes)
    why: dict[str, str] = field(default_factory=dict)  # fact -> the key it came from, or the reasoning
    undecided: list[str] = field(default_factory=list)

    def kv_bytes_per_token(self, kv_bytes: float) -> float:
        """Every full-attention layer's KV for one token, at `kv_bytes` a value (2: bf16, 1: fp8)."""
        return self.attention.kv_elements_per_token * kv_bytes


class FactsError(ValueError):
    """A config.json init cannot read as a causal LM; one line saying what is missing."""


def _first(config: dict, keys: tuple[str, ...]) -> tuple[str | None, Any]:
    for key in keys:
        if config.get(key) is not None:
            return key, config[key]
    return None, None


def text_config(config: dict, why: dict) -> dict:
    """The text model's config: `text_config` of a multimodal wrapper (keys it lacks fall back to the top)."""
    inner = config.get("text_config")
    if isinstance(inner, dict) and "hidden_size" in inner:
        why["text model"] = f"text_config of the {config.get('model_type')} wrapper (vision_config is not counted)"
        return {**{k: v for k, v in config.items() if k != "text_config"}, **inner}
    return config


def read_facts(config: dict, index: dict | None) -> CheckpointFacts:
    """The checkpoint's facts; a config whose fields have the wrong types is one FactsError."""
    try:
        return _read_facts(config, index)
    except (TypeError, ValueError, KeyError, ZeroDivisionError, AttributeError) as exc:
        if isinstance(exc, FactsError):
            raise
        raise FactsError(f"config.json: a field has a value init cannot read ({type(exc).__name__}: {exc})") from None


def _read_facts(config: dict, index: dict | None) -> CheckpointFacts:
    why: dict[str, str] = {}
    undecided: list[str] = []
    text = text_config(config, why)
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads"):
        if not isinstance(text.get(key), int):
            raise FactsError(f"config.json has no integer {key!r}: not a transformer LM config init can read")
    architectures = config.get("architectures") or text.get("architectures") or ["unknown"]
    dtype = str(text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype") or "bfloat16")
    why["dtype"] = "torch_dtype" if text.get("torch_dtype") else "dtype" if text.get("dtype") else "default bfloat16"
    quant_config = config.get("quantization_config") or text.get("quantization_config")
    quantization = read_quantization(quant_config, why, undecided)
    moe = read_moe(text, why)
    mtp_key, mtp = _first(text, MTP)
    mtp_layers = int(mtp) if mtp and (mtp_key != "num_mtp_modules" or text.get("use_mtp", True)) else 0
    why["MTP"] = f"{mtp_key} = {mtp}" if mtp_key else f"none of {', '.join(MTP)}"
    named = [entry for entry in quantization.exclude if f"layers.{text['num_hidden_layers']}." in entry]
    if mtp_layers and named:
        # the story's day-0 defect class: engines register the MTP layer under their own prefix and must map these
        why["MTP"] += (
            f"; the exclude list names it by its checkpoint index ({len(named)} entries, e.g. {named[0]}): an engine "
            "that registers the MTP layer under another prefix keeps it unquantized only if it maps those names"
        )
    attention = read_attention(text, why)
    context_key, context = _first(text, ("max_position_embeddings", "seq_length", "max_seq_len"))
    why["context"] = f"{context_key}" if context_key else "unknown"
    facts = CheckpointFacts(
        architecture=str(architectures[0]),
        model_type=str(text.get("model_type") or config.get("model_type") or "unknown"),
        dtype=dtype,
        quantization=quantization,
        moe=moe,
        mtp_layers=mtp_layers,
        attention=attention,
        context_length=int(context or 0),
        layers=int(text["num_hidden_layers"]),
        weight_bytes=0,
        weight_from_index=False,
        remote_code=bool(config.get("auto_map") or text.get("auto_map")),
        activation="swiglu-clamped" if text.get("swiglu_limit") else str(text.get("hidden_act") or "silu"),
        why=why,
        undecided=undecided,
    )
    estimate = weight_estimate.estimate(text, facts)
    facts.routed_fraction = estimate.routed_fraction
    total = ((index or {}).get("metadata") or {}).get("total_size")
    if isinstance(total, int) and total > 0:
        facts.weight_bytes, facts.weight_from_index = total, True
        why["weights"] = "model.safetensors.index.json metadata.total_size"
    else:
        facts.weight_bytes = estimate.bytes
        why["weights"] = f"ESTIMATE from the shapes (no weight index with metadata.total_size): {estimate.how}"
        undecided.extend(estimate.left_out)
    return facts


def read_quantization(quant: Any, why: dict, undecided: list[str]) -> Quantization:
    if not isinstance(quant, dict):
        why["quantization"] = "no quantization_config: weights in the checkpoint's dtype"
        return Quantization("none", "unquantized")
    method = str(quant.get("quant_method") or "unknown")
    reader = QUANT_READERS.get(method)
    if reader is None:
        undecided.append(f"quantization method {method!r} is not one init reads; its weight bytes assume the dtype")
        result = Quantization(method, f"{method} (not read)")
    else:
        result = reader(quant)
    for key in ("modules_to_not_convert", "ignore", "exclude"):
        if isinstance(quant.get(key), list):
            result.exclude_key, result.exclude = key, [str(entry) for entry in quant[key]]
            break
    why["quantization"] = f"quantization_config.quant_method = {method}"
    return result


def _fp8(quant: dict) -> Quantization:
    block = quant.get("weight_block_size")
    grain = f"{block[0]}x{block[1]} weight blocks" if block else "per-tensor scales"
    fmt = quant.get("fmt") or "e4m3"
    scale = f", {quant['scale_fmt']} scales" if quant.get("scale_fmt") else ""
    summary = f"fp8 {fmt}, {grain}{scale}, {quant.get('activation_scheme', 'dynamic')} activations"
    return Quantization("fp8", summary, 8, "float", block=tuple(block) if block else None)


def _mxfp4(quant: dict) -> Quantization:
    # OCP MX: 32 elements share one e8m0 scale (the format fixes the group; gpt-oss's config does not repeat it)
    return Quantization("mxfp4", "MXFP4 (fp4 e2m1, 32-element groups, e8m0 scales)", 4, "float", group_size=32)


def _quark(quant: dict) -> Quantization:
    weight = (quant.get("global_quant_config") or {}).get("weight") or {}
    inputs = (quant.get("global_quant_config") or {}).get("input_tensors") or {}
    dtype, group = str(weight.get("dtype") or "unknown"), weight.get("group_size")
    bits = 4 if "4" in dtype else 8 if "8" in dtype else None
    activations = f"{inputs.get('dtype')} activations" if inputs else "weight-only"
    scales = f"{weight.get('scale_format', '')} scales"
    summary = f"Quark {dtype} {weight.get('qscheme', '')} group {group} ({scales}), {activations}"
    return Quantization("quark", summary, bits, "float", group_size=group)


def _compressed_tensors(quant: dict) -> Quantization:
    group = next(iter((quant.get("config_groups") or {}).values()), {}) or {}
    weights, inputs = group.get("weights") or {}, group.get("input_activations")
    bits, kind, size = weights.get("num_bits"), weights.get("type", ""), weights.get("group_size")
    grain = f"group {size}" if size else str(weights.get("strategy") or "")
    activations = (
        f"{inputs.get('num_bits')}-bit {inputs.get('type')} {inputs.get('strategy') or ''} activations".strip()
        if inputs
        else "weight-only"
    )
    summary = f"compressed-tensors {quant.get('format')}: {bits}-bit {kind} weights, {grain}, {activations}"
    return Quantization("compressed-tensors", summary, bits, kind, group_size=size)


def _modelopt(quant: dict) -> Quantization:
    group = next(iter((quant.get("config_groups") or {}).values()), {}) or {}
    weights = group.get("weights") or {}
    kv = quant.get("kv_cache_scheme")
    summary = f"ModelOpt {quant.get('quant_algo')}: {weights.get('num_bits')}-bit {weights.get('type')} weights and "
    summary += f"activations, group {weights.get('group_size')}"
    kv_text = f"{kv.get('num_bits')}-bit {kv.get('type')}" if isinstance(kv, dict) else None
    size = weights.get("group_size")
    return Quantization("modelopt", summary, weights.get("num_bits"), weights.get("type", ""), size, kv_cache=kv_text)


QUANT_READERS = {
    "fp8": _fp8,
    "mxfp4": _mxfp4,
    "quark": _quark,
    "compressed-tensors": _compressed_tensors,
    "modelopt": _modelopt,
}


def read_moe(text: dict, why: dict) -> MoeShape | None:
    experts_key, experts = _first(text, EXPERTS)
    if not experts or experts <= 1:
        why["MoE"] = f"dense: none of {', '.join(EXPERTS)}"
        return None
    top_key, top_k = _first(text, TOP_K)
    # moe_intermediate_size where a family has it; families that name experts num_local_experts (Mixtral's
    # spelling: MiniMax, gpt-oss, Llama 4) size each expert with intermediate_size
    width_key = "moe_intermediate_size" if text.get("moe_intermediate_size") else "intermediate_size"
    width = int(text[width_key])
    dense_width = int(text.get("intermediate_size_mlp") or text.get("intermediate_size") or width)
    shared, shared_width, shared_why = _shared_experts(text, width)
    layers = int(text["num_hidden_layers"])
    moe_layers, layers_why = _moe_layers(text, layers)
    why["MoE"] = (
        f"{experts_key} = {experts}, {top_key} = {top_k}, expert width {width_key} = {width}, hidden_size; "
        f"{shared_why}; {layers_why}"
    )
    return MoeShape(
        int(text["hidden_size"]),
        width,
        int(experts),
        int(top_k or 1),
        shared,
        shared_width,
        moe_layers,
        layers - moe_layers,
        dense_width,
    )


def _shared_experts(text: dict, width: int) -> tuple[int, int, str]:
    if text.get("n_shared_experts"):
        count = int(text["n_shared_experts"])
        return count, width, f"n_shared_experts = {count} of the expert width"
    for key in ("shared_expert_intermediate_size", "shared_intermediate_size"):
        if key in text:
            size = int(text[key] or 0)
            return (1, size, f"{key} = {size}: one shared expert") if size else (0, 0, f"{key} = 0: none")
    if str(text.get("model_type", "")).startswith("llama4"):
        return 1, width, "Llama 4 runs one shared expert of the expert width in every MoE layer (no config key)"
    return 0, 0, "no shared-expert key"


def _moe_layers(text: dict, layers: int) -> tuple[int, str]:
    if isinstance(text.get("mlp_layer_types"), list):
        sparse = sum(1 for kind in text["mlp_layer_types"] if kind == "sparse")
        return sparse, f"mlp_layer_types: {sparse} sparse"
    if text.get("first_k_dense_replace") is not None:
        dense = int(text["first_k_dense_replace"])
        return layers - dense, f"first_k_dense_replace = {dense} dense layers first"
    if text.get("interleave_moe_layer_step"):
        step = int(text["interleave_moe_layer_step"])
        return layers // step, f"interleave_moe_layer_step = {step}"
    only = set(text.get("mlp_only_layers") or [])
    step = int(text.get("decoder_sparse_step") or 1)
    moe = sum(1 for index in range(layers) if index not in only and (index + 1) % step == 0)
    return moe, "every layer" if moe == layers else f"{moe} MoE layers (decoder_sparse_step, mlp_only_layers)"


def read_attention(text: dict, why: dict) -> Attention:
    heads = int(text["num_attention_heads"])
    kv_heads = int(text.get("num_key_value_heads") or heads)
    head_dim = int(text.get("head_dim") or text["hidden_size"] // heads)
    layers = int(text["num_hidden_layers"])
    full, bounded = _full_attention_layers(text, layers)
    if text.get("kv_lora_rank"):
        rank, rope = int(text["kv_lora_rank"]), int(text.get("qk_rope_head_dim") or 0)
        topk = text.get("index_topk")
        per_layer = rank + rope + (int(text.get("index_head_dim") or 0) if topk else 0)
        kind = "MLA + DSA sparse" if topk else "MLA"
        why["attention"] = f"kv_lora_rank = {rank}, qk_rope_head_dim = {rope}: one latent of {rank + rope} per layer"
        if topk:
            why["attention"] += (
                f"; index_topk = {topk}: each query attends its top {topk} tokens, chosen by an indexer whose "
                f"keys ({text.get('index_head_dim')} per layer) are cached too, counted at the KV dtype"
            )
        return Attention(kind, heads, kv_heads, head_dim, rank, rope, topk, full, bounded, per_layer * full)
    kind = "MHA" if kv_heads == heads else "MQA" if kv_heads == 1 else "GQA"
    why["attention"] = f"num_attention_heads = {heads}, num_key_value_heads = {kv_heads}, head_dim {head_dim}"
    return Attention(
        kind,
        heads,
        kv_heads,
        head_dim,
        full_layers=full,
        bounded_layers=bounded,
        kv_elements_per_token=2 * kv_heads * head_dim * full,
    )


def _full_attention_layers(text: dict, layers: int) -> tuple[int, str]:
    """Layers whose KV cache grows with the context, and what the others keep instead."""
    kinds = text.get("layer_types")
    if isinstance(kinds, list) and kinds:
        full = sum(1 for kind in kinds if kind == "full_attention")
        others = sorted({kind for kind in kinds if kind != "full_attention"})
        window = f" (window {text.get('sliding_window')})" if "sliding_attention" in others else ""
        return (
            full,
            f"{len(kinds) - full} {'/'.join(others)} layers{window}: a bounded state per sequence" if others else "",
        )
    if text.get("full_attention_interval"):
        interval = int(text["full_attention_interval"])
        full = layers // interval
        return full, f"{layers - full} linear-attention layers: a fixed state per sequence"
    if isinstance(text.get("attn_type_list"), list):  # MiniMax: 1 softmax attention, 0 lightning (linear)
        full = sum(1 for kind in text["attn_type_list"] if kind == 1)
        return full, f"{layers - full} linear-attention layers" if full < layers else ""
    if text.get("attention_chunk_size"):
        return layers, f"chunked attention ({text['attention_chunk_size']}) counted as full attention (an upper bound)"
    return layers, ""
