"""What a checkpoint's config.json says, read once for `porter init`, each fact with why it was read so.

Covers the architecture and dtype (a multimodal wrapper's text model is read from `text_config`), the quantization
(quant_formats.py), each layer's kind (its mixer: full, sliding-window or linear attention, or Mamba; its MLP: MoE,
dense or none) from the key that lists them, the MoE shape (hidden size or latent, expert width, routed experts,
top-k, shared experts, activation), MTP layers, the attention kind (MHA/GQA/MQA, MLA, MLA with DSA sparse attention),
context length and the KV-cache bytes per token; the weight bytes are weight_estimate.py's. Each family spells these
its own way; the spellings are listed once, in config_keys.py, with the upstream file each was read from. A key
init does not read that could change a fact makes that fact undecided, never defaulted; two spellings that disagree
too. Does not plan anything (layout_plan.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from porter.init import config_keys as keys
from porter.init.quant_formats import Quantization, read_quantization


@dataclass
class MoeShape:
    hidden: int  # the width the experts see: hidden_size, or the latent a latent MoE projects to
    expert_width: int  # intermediate size of one routed expert
    experts: int
    top_k: int  # 0: undecided
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
    index_topk: int | None = None
    full_layers: int = 0  # layers whose KV grows with every token
    bounded_layers: str = ""  # the other layers, said in words (linear attention state, a sliding window, Mamba)
    kv_elements_per_token: int = 0  # per token, all full layers, at one element per value


@dataclass
class Why:
    """Each fact's reason, as `porter init` prints it beside the fact: the key it came from, or the reasoning."""

    dtype: str = ""
    quantization: str = ""
    layers: str = ""  # a block list, one block a layer (nemotron_h)
    attention_layers: str = ""
    moe_layers: str = ""
    moe: str = ""
    mtp: str = ""
    activation: str = ""
    attention: str = ""
    context: str = ""
    expert_dtype: str = ""
    weights: str = ""


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
    layer_kinds: list[tuple[str, str]]  # (mixer, mlp) of each layer
    remote_code: bool
    activation: str = "silu"  # the MLP's activation; "swiglu-clamped" for gpt-oss's SwiGLU with swiglu_limit
    weight_bytes: int = 0
    routed_fraction: float = 0.0  # share of the weight bytes in routed experts (from the shapes)
    expert_dtype: str = ""  # what one routed expert weight is stored as
    expert_format: Quantization | None = None  # the routed experts' format (None: unquantized or no experts)
    gated: bool = True  # the MLPs' gate and up projections (SwiGLU); False: up -> activation -> down
    sharded_heads: dict[str, int] = field(default_factory=dict)  # heads of the other mixers, which TP shards too
    why: Why = field(default_factory=Why)
    undecided: list[str] = field(default_factory=list)

    def kv_bytes_per_token(self, kv_bytes: float) -> float:
        """Every full-attention layer's KV for one token, at `kv_bytes` a value (2: bf16, 1: fp8)."""
        return self.attention.kv_elements_per_token * kv_bytes


class FactsError(ValueError):
    """A config.json init cannot read as a causal LM; one line saying what is missing."""


def _one(text: dict, keys: tuple[str, ...], fact: str, undecided: list[str]) -> tuple[str | None, Any]:
    """The first spelling present; spellings that disagree leave `fact` undecided."""
    found = {key: text[key] for key in keys if text.get(key) is not None}
    if len({repr(value) for value in found.values()}) > 1:
        undecided.append(f"{fact}: {', '.join(f'{k} = {v!r}' for k, v in found.items())} disagree")
    return next(iter(found.items()), (None, None))


def name(value: Any) -> str:
    """A config's string as a name: never text a terminal acts on, nor `${VAR}` the task loader would interpolate."""
    return re.sub(r"[^\w.-]", "?", str(value))[:100]


def text_config(config: dict) -> dict:
    """The text model's config: a multimodal wrapper's (keys it lacks fall back to the top)."""
    for key in keys.WRAPPED:
        inner = config.get(key)
        if isinstance(inner, dict) and "hidden_size" in inner:
            return {**{k: v for k, v in config.items() if k != key}, **inner}
    return config


def check_sizes(value: Any, path: str = "config.json") -> None:
    """Refuse an integer no real config has, before anything counts with it (10**300 layers would never finish)."""
    if isinstance(value, dict):
        for key, item in value.items():
            check_sizes(item, f"{path}.{str(key)[:60]}")
    elif isinstance(value, list):
        for item in value[:100_000]:
            check_sizes(item, path)
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > keys.MAX_SIZE:
        raise FactsError(f"{path} is an integer of {value.bit_length()} bits: no checkpoint has a size that large")


def read_facts(config: dict, quant_file: dict | None = None) -> CheckpointFacts:
    """The checkpoint's facts but its weight bytes (weight_estimate.sized_facts adds them); a config whose fields
    have the wrong types is one FactsError."""
    check_sizes(config)
    try:
        return _read_facts(config, quant_file)
    except (TypeError, ValueError, KeyError, ZeroDivisionError, AttributeError, OverflowError) as exc:
        if isinstance(exc, FactsError):
            raise
        raise FactsError(f"config.json: a field has a value init cannot read ({type(exc).__name__})") from None


def _checked_text(config: dict) -> dict:
    """The text model's config with the sizes every fact needs, its layer count as the engine takes it."""
    text = dict(text_config(config))
    blocks = _blocks(text)
    if blocks is not None and len(blocks) <= keys.MAX_LAYERS:
        text["num_hidden_layers"] = len(blocks)  # the engine's count (sglang's NemotronHConfig ignores the key)
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads"):
        if not isinstance(text.get(key), int) or text[key] <= 0:
            raise FactsError(f"config.json has no positive integer {key!r}: not a transformer LM config init can read")
    if text["num_hidden_layers"] > keys.MAX_LAYERS:
        raise FactsError(f"config.json: num_hidden_layers = {text['num_hidden_layers']}: no checkpoint has that many")
    return text


def _read_facts(config: dict, quant_file: dict | None) -> CheckpointFacts:
    why, undecided = Why(), []
    text = _checked_text(config)
    architectures = config.get("architectures") or text.get("architectures") or ["unknown"]
    dtype_key, dtype = _one(text, ("torch_dtype", "dtype"), "dtype", undecided)
    why.dtype = dtype_key or "none of torch_dtype, dtype"
    if not dtype_key:
        undecided.append("dtype: none of torch_dtype, dtype (weights priced at 2 bytes, as bfloat16)")
    quantization, why.quantization = read_quantization(config, text, quant_file, undecided)
    kinds = read_layer_kinds(text, why, undecided)
    moe = read_moe(text, kinds, why, undecided)
    mtp_key, mtp = _one(text, keys.MTP, "MTP layers", undecided)
    mtp_layers = int(mtp) if mtp and (mtp_key != "num_mtp_modules" or text.get("use_mtp", True)) else 0
    if mtp_layers > keys.MAX_LAYERS:
        raise FactsError(f"config.json: {mtp_key} = {mtp_layers}: no checkpoint has that many MTP layers")
    why.mtp = f"{mtp_key} = {mtp}" if mtp_key else f"none of {', '.join(keys.MTP)}"
    _mtp_exclude_note(text, quantization, mtp_layers, why)
    attention = read_attention(text, kinds, why, undecided)
    context_key, context = _one(text, ("max_position_embeddings", "seq_length", "max_seq_len"), "context", undecided)
    why.context = f"{context_key}" if context_key else "unknown"
    undecided.extend(keys.unread_keys(text))
    return CheckpointFacts(
        architecture=name(architectures[0]),
        model_type=name(text.get("model_type") or config.get("model_type") or "unknown"),
        dtype=name(dtype or "bfloat16"),
        quantization=quantization,
        moe=moe,
        mtp_layers=mtp_layers,
        attention=attention,
        context_length=int(context or 0),
        layers=len(kinds),
        layer_kinds=kinds,
        remote_code=bool(config.get("auto_map") or text.get("auto_map")),
        activation=_activation(text, why, undecided),
        gated=str(text.get("model_type")) not in keys.NOT_GATED,
        sharded_heads=_mixer_heads(text, kinds),
        why=why,
        undecided=undecided,
    )


def _mtp_exclude_note(text: dict, quantization: Quantization, mtp_layers: int, why: Why) -> None:
    named = [entry for entry in quantization.exclude if f"layers.{text['num_hidden_layers']}." in entry]
    if mtp_layers and named:
        why.mtp += (
            f"; the exclude list names it by its checkpoint index ({len(named)} entries, e.g. {named[0]!r}): an "
            "engine that registers the MTP layer under another prefix keeps it unquantized only if it maps those names"
        )


def _blocks(text: dict) -> list | None:
    """nemotron_h's block list, from layers_block_type or its legacy pattern string (None: neither)."""
    if isinstance(text.get("layers_block_type"), list):
        return text["layers_block_type"]
    pattern = text.get("hybrid_override_pattern")
    return [keys.HYBRID_PATTERN.get(char, char) for char in pattern] if isinstance(pattern, str) else None


def read_layer_kinds(text: dict, why: Why, undecided: list[str]) -> list[tuple[str, str]]:
    """(mixer, mlp) of every layer, from the key that lists them; a list init cannot read makes the layers undecided."""
    count, blocks = int(text["num_hidden_layers"]), _blocks(text)
    if blocks is not None:
        unknown = sorted({str(block)[:40] for block in blocks} - set(keys.BLOCK_TYPES))
        if unknown:
            undecided.append(
                f"layers by kind, KV and weights: the block list names kinds init does not know: {unknown}"
            )
        why.layers = "layers_block_type" if "layers_block_type" in text else "hybrid_override_pattern"
        why.layers += " (Mamba-2, attention, MLP or MoE: one block a layer, the engine counts the layers from it)"
        return [keys.BLOCK_TYPES.get(block, ("none", "none")) for block in blocks]
    mixers = _mixers(text, count, why, undecided)
    mlps = _mlps(text, count, why, undecided)
    return list(zip(mixers, mlps, strict=True))


def _mixers(text: dict, count: int, why: Why, undecided: list[str]) -> list[str]:
    kinds = text.get("layer_types")
    if isinstance(kinds, list) and kinds:
        unknown = sorted({str(kind) for kind in kinds} - set(keys.LAYER_TYPES))
        if unknown or len(kinds) != count:
            undecided.append(f"layers by kind, KV and weights: layer_types lists {unknown or len(kinds)!r}")
        why.attention_layers = "layer_types"
        return [keys.LAYER_TYPES.get(str(kinds[i]), "full") if i < len(kinds) else "full" for i in range(count)]
    if text.get("full_attention_interval"):
        interval = int(text["full_attention_interval"])
        why.attention_layers = f"full_attention_interval = {interval}: the others linear attention"
        return ["full" if (i + 1) % interval == 0 else "linear" for i in range(count)]
    if isinstance(text.get("attn_type_list"), list):  # MiniMax: 1 softmax attention, 0 lightning (linear)
        why.attention_layers = "attn_type_list (1 softmax attention, 0 linear)"
        return ["full" if kind == 1 else "linear" for kind in text["attn_type_list"][:count]] + ["full"] * max(
            0, count - len(text["attn_type_list"])
        )
    if text.get("sliding_window") and text.get("use_sliding_window") is not False:
        undecided.append(
            f"KV bytes per token: sliding_window = {text['sliding_window']!r} with no layer_types; which layers "
            "slide is not read (all counted as full attention)"
        )
    if text.get("attention_chunk_size"):
        why.attention_layers = f"chunked attention ({text['attention_chunk_size']}) counted as full (upper bound)"
    return ["full"] * count


def _mlps(text: dict, count: int, why: Why, undecided: list[str]) -> list[str]:
    if not any(text.get(key) for key in keys.EXPERTS) or max(int(text.get(key) or 0) for key in keys.EXPERTS) <= 1:
        return ["dense"] * count
    if isinstance(text.get("mlp_layer_types"), list):
        kinds = text["mlp_layer_types"]
        if set(kinds) - {"sparse", "dense"} or len(kinds) != count:
            undecided.append("MoE layers: mlp_layer_types lists kinds or a length init does not read")
        why.moe_layers = "mlp_layer_types"
        return ["moe" if i < len(kinds) and kinds[i] == "sparse" else "dense" for i in range(count)]
    if text.get("first_k_dense_replace") is not None:
        dense, freq = int(text["first_k_dense_replace"]), int(text.get("moe_layer_freq") or 1)
        why.moe_layers = f"first_k_dense_replace = {dense} dense layers first, then every {freq} (moe_layer_freq)"
        return ["moe" if i >= dense and i % freq == 0 else "dense" for i in range(count)]
    if text.get("interleave_moe_layer_step"):
        step = int(text["interleave_moe_layer_step"])
        why.moe_layers = f"interleave_moe_layer_step = {step}"
        return ["moe" if (i + 1) % step == 0 else "dense" for i in range(count)]
    only, step = set(text.get("mlp_only_layers") or []), int(text.get("decoder_sparse_step") or 1)
    why.moe_layers = "every layer" if not only and step == 1 else "decoder_sparse_step, mlp_only_layers"
    return ["moe" if i not in only and (i + 1) % step == 0 else "dense" for i in range(count)]


def read_moe(text: dict, kinds: list[tuple[str, str]], why: Why, undecided: list[str]) -> MoeShape | None:
    moe_layers = sum(mlp == "moe" for _, mlp in kinds)
    experts_key, experts = _one(text, keys.EXPERTS, "routed experts", undecided)
    if not moe_layers or not experts or experts <= 1:
        why.moe = f"dense: none of {', '.join(keys.EXPERTS)}"
        return None
    top_key, top_k = _one(text, keys.TOP_K, "top-k", undecided)
    if not top_key:
        undecided.append(f"top-k: none of {', '.join(keys.TOP_K)} (no MoE tuning rows)")
    # moe_intermediate_size where a family has it; families that name experts num_local_experts (Mixtral's
    # spelling: MiniMax, gpt-oss, Llama 4) size each expert with intermediate_size
    width_key = "moe_intermediate_size" if text.get("moe_intermediate_size") else "intermediate_size"
    width, hidden = int(text[width_key]), int(text["hidden_size"])
    latent = int(text.get("moe_latent_size") or 0)
    dense_width = int(text.get("intermediate_size_mlp") or text.get("intermediate_size") or width)
    shared, shared_width, shared_why = _shared_experts(text, width, undecided)
    why.moe = (
        f"{experts_key} = {experts}, {top_key} = {top_k}, expert width {width_key} = {width}, "
        + (f"experts on moe_latent_size = {latent} (projected from hidden_size)" if latent else "hidden_size")
        + f"; {shared_why}; {why.moe_layers or why.layers}"
    )
    return MoeShape(
        latent or hidden,
        width,
        int(experts),
        int(top_k or 0),
        shared,
        shared_width,
        moe_layers,
        sum(mlp == "dense" for _, mlp in kinds),
        dense_width,
    )


def _shared_experts(text: dict, width: int, undecided: list[str]) -> tuple[int, int, str]:
    size_key, size = _one(text, keys.SHARED_WIDTH, "shared expert width", undecided)
    if text.get("n_shared_experts"):
        count = int(text["n_shared_experts"])
        if size_key:
            return count, int(size), f"n_shared_experts = {count} of {size_key} = {size}"
        return count, width, f"n_shared_experts = {count} of the expert width"
    if size_key:
        return (1, int(size), f"{size_key} = {size}: one shared expert") if size else (0, 0, f"{size_key} = 0: none")
    if str(text.get("model_type", "")).startswith("llama4"):
        # transformers models/llama4/modeling_llama4.py Llama4TextMoe: a shared_expert of intermediate_size always
        return 1, width, "Llama 4 runs one shared expert of the expert width in every MoE layer (no config key)"
    return 0, 0, "no shared-expert key"


def _activation(text: dict, why: Why, undecided: list[str]) -> str:
    if text.get("swiglu_limit"):
        why.activation = f"swiglu_limit = {text['swiglu_limit']}: gpt-oss's clamped SwiGLU"
        return "swiglu-clamped"
    key, value = next(((key, text[key]) for key in keys.ACTIVATION if text.get(key)), (None, None))
    if key is None:
        undecided.append(f"activation: none of {', '.join(keys.ACTIVATION)}")
        return "unknown"
    gated = str(text.get("model_type")) not in keys.NOT_GATED
    if gated and value not in keys.GATED_ACTIVATIONS:
        gating = sorted(keys.GATED_ACTIVATIONS)
        undecided.append(f"whether the MLP is gated: {key} = {name(value)!r} is none of {gating}")
    why.activation = f"{key} = {name(value)!r}, {'gated' if gated else 'not gated (up -> act -> down)'}"
    return name(value) if gated else f"{name(value)} (not gated)"


def _mixer_heads(text: dict, kinds: list[tuple[str, str]]) -> dict[str, int]:
    mixers = {mixer for mixer, _ in kinds}
    keys = ["linear_num_key_heads", "linear_num_value_heads"] if "linear" in mixers else []
    keys += ["mamba_num_heads"] if "mamba" in mixers else []
    return {key: int(text[key]) for key in keys if isinstance(text.get(key), int)}


def read_attention(text: dict, kinds: list[tuple[str, str]], why: Why, undecided: list[str]) -> Attention:
    heads = int(text["num_attention_heads"])
    kv_heads = int(text.get("num_key_value_heads") or heads)
    dim_key, head_dim = _one(text, keys.HEAD_DIM, "head dim", undecided)
    head_dim = int(head_dim or text["hidden_size"] // heads)
    full = sum(mixer == "full" for mixer, _ in kinds)
    others = sorted({mixer for mixer, _ in kinds} - {"full", "none"})
    bounded = ""
    if others:
        window = f" (window {text.get('sliding_window')})" if "sliding" in others else ""
        count = sum(mixer in others for mixer, _ in kinds)
        bounded = f"{count} {'/'.join(others)} layers{window}: a bounded state per sequence"
    if text.get("kv_lora_rank"):
        rank, rope = int(text["kv_lora_rank"]), int(text.get("qk_rope_head_dim") or 0)
        topk = text.get("index_topk")
        per_layer = rank + rope + (int(text.get("index_head_dim") or 0) if topk else 0)
        kind = "MLA + DSA sparse" if topk else "MLA"
        if not isinstance(nope := text.get("qk_nope_head_dim"), int):
            undecided.append("the MLA head dim: no qk_nope_head_dim (a query/key head is qk_nope + qk_rope wide)")
        head_dim = nope + rope if isinstance(nope, int) else head_dim  # sglang deepseek_v2.py: qk_head_dim
        why.attention = f"kv_lora_rank = {rank}, qk_rope_head_dim = {rope}: one latent of {rank + rope} per layer"
        if topk:
            why.attention += (
                f"; index_topk = {topk}: each query attends its top {topk} tokens, chosen by an indexer whose "
                f"keys ({text.get('index_head_dim')} per layer) are cached too, counted at the KV dtype"
            )
        return Attention(kind, heads, kv_heads, head_dim, rank, topk, full, bounded, per_layer * full)
    kind = "MHA" if kv_heads == heads else "MQA" if kv_heads == 1 else "GQA"
    why.attention = (
        f"num_attention_heads = {heads}, num_key_value_heads = {kv_heads}, "
        f"{f'{dim_key} = {head_dim}' if dim_key else f'head dim hidden_size / heads = {head_dim}'}"
    )
    return Attention(
        kind, heads, kv_heads, head_dim, full_layers=full, bounded_layers=bounded,
        kv_elements_per_token=2 * kv_heads * head_dim * full,
    )  # fmt: skip
