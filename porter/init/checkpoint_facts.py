"""What a checkpoint's config.json says, read once for `porter init`, each fact with why it was read so.

Covers the architecture and dtype (a multimodal wrapper's text model is read from `text_config`), the quantization
(quant_formats.py), each layer's kind (its mixer: full, sliding-window, compressed or linear attention, or Mamba; its
MLP: MoE, dense or none) from the key that lists them, the MoE shape (hidden size or latent, expert width, routed
experts, top-k, shared experts, activation), MTP layers and context length; the attention and its KV-cache bytes per
token are attention_facts.py's, the weight bytes weight_estimate.py's. Each family spells these its own way; the
spellings are listed once, in config_keys.py, with the upstream file each was read from. A key init does not read
that could change a fact makes that fact undecided, never defaulted; two spellings that disagree too. Does not plan
anything (layout_plan.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from porter.init import config_keys as keys
from porter.init.attention_facts import Attention, mixer_heads, read_attention
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
    gated: bool = True  # the MLPs' gate and up projections (SwiGLU); False: up -> activation -> down
    sharded_heads: dict[str, int] = field(default_factory=dict)  # heads of the other mixers, which TP shards too
    why: Why = field(default_factory=Why)
    undecided: list[str] = field(default_factory=list)

    @property
    def open(self) -> set[str]:
        """The facts the undecided lines leave open: those named before a line's first ": " (config_keys.FACT_WORDS)."""
        heads = [line.split(": ", 1)[0] for line in self.undecided if ": " in line]
        return {fact for fact, words in keys.FACT_WORDS.items() if any(re.search(words, head) for head in heads)}

    def kv_bytes_per_token(self, kv_bytes: float) -> float:
        """Every full-attention layer's KV for one token, at `kv_bytes` a value (2: bf16, 1: fp8)."""
        return self.attention.kv_elements_per_token * kv_bytes + self.attention.fixed_bytes_per_token


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
    head_dim = _one(text, keys.HEAD_DIM, "head dim", undecided)
    attention, why.attention = read_attention(text, kinds, head_dim, undecided)
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
        sharded_heads=mixer_heads(text, kinds),
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
    coded = next((key for key in keys.LAYER_CODES if isinstance(text.get(key), list) and text[key]), None)
    if coded:
        return _coded_mixers(text, coded, count, why, undecided)
    kda = text.get("linear_attn_config")
    if isinstance(kda, dict) and isinstance(kda.get("kda_layers"), list):
        # sglang srt/configs/kimi_linear.py KimiLinearConfig.is_kda_layer: kda_layers counts layers from 1; the rest
        # are full (MLA) attention
        listed = set(kda["kda_layers"])
        why.attention_layers = "linear_attn_config.kda_layers (counted from 1: KDA linear attention), the rest full"
        return ["linear" if i + 1 in listed else "full" for i in range(count)]
    if text.get("full_attention_interval"):
        interval = int(text["full_attention_interval"])
        why.attention_layers = f"full_attention_interval = {interval}: the others linear attention"
        return ["full" if (i + 1) % interval == 0 else "linear" for i in range(count)]
    if text.get("sliding_window") and text.get("use_sliding_window") is not False:
        undecided.append(
            f"KV bytes per token: sliding_window = {text['sliding_window']!r} with no layer_types; which layers "
            "slide is not read (all counted as full attention)"
        )
    if text.get("attention_chunk_size"):
        why.attention_layers = f"chunked attention ({text['attention_chunk_size']}) counted as full (upper bound)"
    return ["full"] * count


def _coded_mixers(text: dict, key: str, count: int, why: Why, undecided: list[str]) -> list[str]:
    codes, meaning = text[key], keys.LAYER_CODES[key]
    unknown = sorted({str(code) for code in codes} - {str(code) for code in meaning})
    if unknown or len(codes) < count:
        undecided.append(f"layers by kind and KV bytes: {key!r} lists {unknown or len(codes)!r}, not read")
    why.attention_layers = f"{key} ({', '.join(f'{code} {kind}' for code, kind in meaning.items())})"
    return [meaning.get(codes[i], "full") if i < len(codes) else "full" for i in range(count)]


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
    latent = int(_one(text, keys.LATENT, "the experts' latent width", undecided)[1] or 0)
    dense_width = int(text.get("intermediate_size_mlp") or text.get("intermediate_size") or width)
    shared, shared_width, shared_why = _shared_experts(text, width, undecided)
    why.moe = (
        f"{experts_key} = {experts}, {top_key} = {top_k}, expert width {width_key} = {width}, "
        + (f"experts on a latent of {latent} (projected from hidden_size)" if latent else "hidden_size")
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
    count_key, count = _one(text, keys.SHARED_EXPERTS, "shared experts", undecided)
    if count:
        if size_key:
            return int(count), int(size), f"{count_key} = {count} of {size_key} = {size}"
        return int(count), width, f"{count_key} = {count} of the expert width"
    if size_key:
        return (1, int(size), f"{size_key} = {size}: one shared expert") if size else (0, 0, f"{size_key} = 0: none")
    if text.get("enable_moe_block"):
        # transformers models/gemma4/modeling_gemma4.py Gemma4TextDecoderLayer: the dense MLP runs beside the experts
        # on every token and the two outputs add, as a shared expert's would
        size = int(text["intermediate_size"])
        return 1, size, f"enable_moe_block: the dense MLP (intermediate_size = {size}) runs beside the experts"
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
