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

from porter.engines.engine import Engine
from porter.init import config_keys as keys
from porter.init.attention_facts import Attention, mixer_heads, read_attention
from porter.init.per_layer import count, read_block_configs
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
    expert_format: Quantization | None = None  # the routed experts' format (None: unquantized or no experts)
    gated: bool = True  # the MLPs' gate and up projections (SwiGLU); False: up -> activation -> down
    layer_kv_heads: list[int] = field(default_factory=list)  # each layer's KV heads where layers differ (block_configs)
    mlp_widths: list[int] = field(default_factory=list)  # each layer's dense MLP width where layers differ
    sharded_heads: dict[str, int] = field(default_factory=dict)  # heads of the other mixers, which TP shards too
    why: Why = field(default_factory=Why)
    undecided: list[str] = field(default_factory=list)

    @property
    def open(self) -> set[str]:
        """The facts the undecided lines leave open: those named before a line's first ": " (config_keys.FACT_WORDS)."""
        heads = [line.split(": ", 1)[0] for line in self.undecided if ": " in line]
        return {fact for fact, words in keys.FACT_WORDS.items() if any(re.search(words, head) for head in heads)}

    def count_windows(self, engine: Engine) -> None:
        """Count a windowed layer kind's KV as growing where `engine` keeps every token of it (Engine.bounds_window)."""
        whole = [mixer for mixer in self.attention.windowed if not engine.bounds_window(self.architecture, mixer)]
        for mixer in whole:
            self.attention.kv_elements_per_token += self.attention.windowed[mixer]
            self.attention.full_layers += sum(kind == mixer for kind, _ in self.layer_kinds)
        if whole:
            self.attention.bounded_layers += (
                f"; {engine.name} {engine.version} keeps every token of the {' and '.join(whole)} layers for "
                f"{self.architecture}, so their KV grows too and is counted"
            )

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


def _size(text: dict, key: str | None, fact: str, undecided: list[str], default: int = 0) -> int:
    """text[key] as a whole number: absent or null is `default`; any other value that is none leaves `fact`
    undecided (counted as `default`) rather than ending init."""
    value = text.get(key) if key else None
    if value is not None and count(value) is None:
        shown = repr(value)
        undecided.append(f"{fact}: {key} = {shown[:40]}{'...' * (len(shown) > 40)} is not a whole number init reads")
    return default if count(value) is None else count(value)


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
        undecided.append(
            "the dtype: none of torch_dtype, dtype; sglang 0.5.20 then runs float16 (bfloat16 for Gemma: "
            "configs/model_config.py _get_and_verify_dtype), 2 bytes a weight either way"
        )
    quantization, why.quantization = read_quantization(config, text, quant_file, undecided)
    shapes = read_block_configs(text, undecided)
    kinds = shapes.kinds if shapes else read_layer_kinds(text, why, undecided)
    moe = read_moe(text, kinds, why, undecided)
    mtp_layers = _mtp_layers(text, why, undecided)
    _mtp_exclude_note(text, quantization, mtp_layers, why)
    head_dim = _one(text, keys.HEAD_DIM, "head dim", undecided)
    attention, why.attention = read_attention(text, kinds, head_dim, undecided)
    if shapes:  # KV heads set layer by layer: read_attention read the fewest (num_key_value_heads, set from them)
        attention.kind, why.layers, why.attention = attention.kind + shapes.kv_note, shapes.why, shapes.why_kv
        attention.kv_elements_per_token = 2 * attention.head_dim * sum(shapes.kv_heads)
    _sparse_index_note(text, undecided)
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
        context_length=_size(text, context_key, "context", undecided),
        layers=len(kinds),
        layer_kinds=kinds,
        remote_code=bool(config.get("auto_map") or text.get("auto_map")),
        activation=_activation(text, why, undecided),
        gated=str(text.get("model_type")) not in keys.NOT_GATED,
        sharded_heads=mixer_heads(text, kinds),
        layer_kv_heads=shapes.kv_heads if shapes else [],
        mlp_widths=shapes.mlp_widths if shapes else [],
        why=why,
        undecided=undecided,
    )


def _mtp_layers(text: dict, why: Why, undecided: list[str]) -> int:
    # MiniMax counts its MTP layers in num_mtp_modules, the key its engines read (sglang minimax_m3.py
    # get_spec_layer_idx_from_weight_name, vLLM config/speculative.py n_predict); a num_nextn_predict_layers beside
    # it is read by neither
    spellings = ("num_mtp_modules",) if text.get("num_mtp_modules") is not None else keys.MTP
    mtp_key, mtp = _one(text, spellings, "MTP layers", undecided)
    layers = _size(text, mtp_key, "MTP layers", undecided)
    layers = layers if mtp_key != "num_mtp_modules" or text.get("use_mtp", True) else 0
    if layers > keys.MAX_LAYERS:
        raise FactsError(f"config.json: {mtp_key} = {layers}: no checkpoint has that many MTP layers")
    why.mtp = f"{mtp_key} = {mtp}" if mtp_key else f"none of {', '.join(keys.MTP)}"
    others = [f"{key} = {text[key]!r}" for key in keys.MTP if key not in spellings and text.get(key) is not None]
    why.mtp += f" (MiniMax's key, which its engines read; not {', '.join(others)})" if others else ""
    return max(layers, 0)


def _sparse_index_note(text: dict, undecided: list[str]) -> None:
    # MiniMax-M3: each layer sparse_attention_freq marks also caches an index key of sparse_index_dim, and a value
    # unless sparse_disable_index_value marks it, at a dtype sglang picks apart from the KV's (pool_configurator.py,
    # memory_pool.py get_minimax_sparse_index_dtype); the KV here is one dtype a value, so it is not counted
    sparse = text.get("sparse_attention_config")
    if isinstance(sparse, dict) and sparse:
        undecided.append(
            "KV bytes per token: sparse_attention_config's sparse layers also cache an index key of sparse_index_dim "
            f"= {str(sparse.get('sparse_index_dim'))[:20]} (and a value where sparse_disable_index_value is 0) at a "
            "dtype the engine picks apart from the KV's: not counted"
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


def _mixers(text: dict, layers: int, why: Why, undecided: list[str]) -> list[str]:
    kinds = text.get("layer_types")
    if isinstance(kinds, list) and kinds:
        unknown = sorted({str(kind) for kind in kinds} - set(keys.LAYER_TYPES))
        if unknown or len(kinds) != layers:
            undecided.append(f"layers by kind, KV and weights: layer_types lists {unknown or len(kinds)!r}")
        why.attention_layers = "layer_types"
        return [keys.LAYER_TYPES.get(str(kinds[i]), "full") if i < len(kinds) else "full" for i in range(layers)]
    coded = next((key for key in keys.LAYER_CODES if isinstance(text.get(key), list) and text[key]), None)
    if coded:
        return _coded_mixers(text, coded, layers, why, undecided)
    kda = text.get("linear_attn_config")
    if isinstance(kda, dict) and isinstance(kda.get("kda_layers"), list):
        # sglang srt/configs/kimi_linear.py KimiLinearConfig.is_kda_layer: kda_layers counts layers from 1; the rest
        # are full (MLA) attention
        listed = set(kda["kda_layers"])
        why.attention_layers = "linear_attn_config.kda_layers (counted from 1: KDA linear attention), the rest full"
        return ["linear" if i + 1 in listed else "full" for i in range(layers)]
    if (pattern := count(text.get("sliding_window_pattern"))) and text.get("sliding_window"):
        # transformers' Gemma 3, Cohere 2 and their kin build layer_types from it: a full layer every `pattern`
        # (models/gemma3/configuration_gemma3.py, cohere2/configuration_cohere2.py), the others sliding
        why.attention_layers = f"sliding_window_pattern = {pattern}: every {pattern}th layer full, the others sliding"
        return ["full" if (i + 1) % pattern == 0 else "sliding" for i in range(layers)]
    if text.get("full_attention_interval"):
        interval = int(text["full_attention_interval"])
        why.attention_layers = f"full_attention_interval = {interval}: the others linear attention"
        return ["full" if (i + 1) % interval == 0 else "linear" for i in range(layers)]
    if text.get("sliding_window") and text.get("use_sliding_window") is not False:
        undecided.append(
            f"KV bytes per token: sliding_window = {text['sliding_window']!r} with no layer_types; which layers "
            "slide is not read (all counted as full attention)"
        )
    if text.get("attention_chunk_size"):
        return _chunked_mixers(text, layers, why, undecided)
    return ["full"] * layers


def _chunked_mixers(text: dict, layers: int, why: Why, undecided: list[str]) -> list[str]:
    """Llama 4's chunked attention: transformers models/llama4/configuration_llama4.py Llama4TextConfig makes a layer
    whose no_rope_layers entry is 1 chunked_attention and a 0 (a NoPE layer) full_attention, and fills an empty list
    with a NoPE layer every no_rope_layer_interval (4); sglang 0.5.20 configs/model_config.py get_hybrid_layer_ids
    keeps every 4th layer full and bounds the others' KV in its hybrid SWA pool."""
    chunk = text["attention_chunk_size"]
    if not str(text.get("model_type", "")).startswith("llama4"):
        undecided.append(f"layers by kind and KV: attention_chunk_size = {chunk!r} outside Llama 4 (all counted full)")
        return ["full"] * layers
    interval = count(text.get("no_rope_layer_interval")) or 4
    rope = text.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(layers)]
    if list(rope) != [int((i + 1) % 4 != 0) for i in range(layers)]:
        undecided.append("KV: no_rope_layers chunk other layers than sglang's hybrid pool bounds (every 4th full)")
    why.attention_layers = f"attention_chunk_size = {chunk}: the layers no_rope_layers marks 1 chunked, the others full"
    return ["chunked" if i < len(rope) and rope[i] else "full" for i in range(layers)]


def _coded_mixers(text: dict, key: str, count: int, why: Why, undecided: list[str]) -> list[str]:
    codes, meaning = text[key], keys.LAYER_CODES[key]
    unknown = sorted({str(code) for code in codes} - {str(code) for code in meaning})
    if unknown or len(codes) < count:
        undecided.append(f"layers by kind and KV bytes: {key!r} lists {unknown or len(codes)!r}, not read")
    why.attention_layers = f"{key} ({', '.join(f'{code} {kind}' for code, kind in meaning.items())})"
    return [meaning.get(codes[i], "full") if i < len(codes) else "full" for i in range(count)]


def _mlps(text: dict, layers: int, why: Why, undecided: list[str]) -> list[str]:
    if max(_size(text, key, "routed experts", undecided) for key in keys.EXPERTS) <= 1:
        return ["dense"] * layers
    listed = next((key for key in keys.MLP_LISTS if isinstance(text.get(key), list)), None)
    if listed:
        kinds, meaning = text[listed], keys.MLP_LISTS[listed]
        if any(not isinstance(kind, str | int) or kind not in meaning for kind in kinds) or len(kinds) != layers:
            undecided.append(f"MoE layers: {listed} lists kinds or a length init does not read")
        why.moe_layers = f"{listed} (one entry a layer: {', '.join(f'{k!r} {v}' for k, v in meaning.items())})"
        return [meaning.get(kinds[i], "dense") if i < len(kinds) and isinstance(kinds[i], str | int) else "dense"
                for i in range(layers)]  # fmt: skip
    if text.get("first_k_dense_replace") is not None:
        dense = _size(text, "first_k_dense_replace", "MoE layers", undecided)
        freq = _size(text, "moe_layer_freq", "MoE layers", undecided, 1) or 1
        why.moe_layers = f"first_k_dense_replace = {dense} dense layers first, then every {freq} (moe_layer_freq)"
        return ["moe" if i >= dense and i % freq == 0 else "dense" for i in range(layers)]
    if text.get("interleave_moe_layer_step"):
        step = _size(text, "interleave_moe_layer_step", "MoE layers", undecided, 1) or 1
        why.moe_layers = f"interleave_moe_layer_step = {step}"
        return ["moe" if (i + 1) % step == 0 else "dense" for i in range(layers)]
    only = text.get("mlp_only_layers") or []
    if not isinstance(only, list):
        undecided.append(f"MoE layers: mlp_only_layers = {str(only)[:40]!r} is not a list of layers")
    only = {count(layer) for layer in only} if isinstance(only, list) else set()
    step = _size(text, "decoder_sparse_step", "MoE layers", undecided, 1) or 1
    why.moe_layers = "every layer" if not only and step == 1 else "decoder_sparse_step, mlp_only_layers"
    return ["moe" if i not in only and (i + 1) % step == 0 else "dense" for i in range(layers)]


def read_moe(text: dict, kinds: list[tuple[str, str]], why: Why, undecided: list[str]) -> MoeShape | None:
    moe_layers = sum(mlp == "moe" for _, mlp in kinds)
    experts_key, experts = _one(text, keys.EXPERTS, "routed experts", undecided)
    if not moe_layers or (count(experts) or 0) <= 1:
        why.moe = f"dense: none of {', '.join(keys.EXPERTS)}"
        return None
    top_key, top_k = _one(text, keys.TOP_K, "top-k", undecided)
    if not top_key:
        undecided.append(f"top-k: none of {', '.join(keys.TOP_K)} (no MoE tuning rows)")
    # moe_intermediate_size where a family has it; families that name experts num_local_experts (Mixtral's
    # spelling: MiniMax, gpt-oss, Llama 4) size each expert with intermediate_size
    width_key = "moe_intermediate_size" if text.get("moe_intermediate_size") else "intermediate_size"
    width, hidden = _size(text, width_key, "expert width", undecided), text["hidden_size"]
    latent_key, _ = _one(text, keys.LATENT, "the experts' latent width", undecided)
    latent = _size(text, latent_key, "MoE latent width", undecided)
    dense_key = next((key for key in keys.DENSE_WIDTH if text.get(key) is not None), None)
    dense_width = _size(text, dense_key, "dense MLP width", undecided) or width
    dense_layers = sum(mlp == "dense" for _, mlp in kinds)
    shared, shared_width, shared_why = _shared_experts(text, width, undecided)
    why.moe = (
        f"{experts_key} = {experts}, {top_key} = {top_k}, expert width {width_key} = {width}, "
        + (f"experts on a latent of {latent} (projected from hidden_size)" if latent else "hidden_size")
        + f"; {shared_why}; {why.moe_layers or why.layers}"
        + (f"; dense layers {dense_key} = {dense_width} wide" if dense_key and dense_layers else "")
    )
    top_k = _size(text, top_key, "top-k", undecided)
    return MoeShape(latent or hidden, width, count(experts), top_k, shared, shared_width, moe_layers, dense_layers,
                    dense_width)  # fmt: skip


def _shared_experts(text: dict, width: int, undecided: list[str]) -> tuple[int, int, str]:
    size_key, _ = _one(text, keys.SHARED_WIDTH, "shared expert width", undecided)
    size = _size(text, size_key, "shared expert width", undecided)
    count_key, _ = _one(text, keys.SHARED_EXPERTS, "shared experts", undecided)
    if shared := _size(text, count_key, "shared experts", undecided):
        if size_key:
            return shared, size, f"{count_key} = {shared} of {size_key} = {size}"
        return shared, width, f"{count_key} = {shared} of the expert width"
    if size_key:
        return (1, size, f"{size_key} = {size}: one shared expert") if size else (0, 0, f"{size_key} = 0: none")
    if text.get("enable_moe_block"):
        # transformers models/gemma4/modeling_gemma4.py Gemma4TextDecoderLayer: the dense MLP runs beside the experts
        # on every token and the two outputs add, as a shared expert's would
        size = _size(text, "intermediate_size", "shared expert width", undecided)
        return 1, size, f"enable_moe_block: the dense MLP (intermediate_size = {size}) runs beside the experts"
    if str(text.get("model_type", "")).startswith("llama4"):
        # transformers models/llama4/modeling_llama4.py Llama4TextMoe: a shared_expert of intermediate_size always
        return 1, width, "Llama 4 runs one shared expert of the expert width in every MoE layer (no config key)"
    return 0, 0, "no shared-expert key"


def _activation(text: dict, why: Why, undecided: list[str]) -> str:
    if text.get("swiglu_limit"):
        # gpt-oss's (hidden_act_alpha, 1.702 unset) and MiniMax-M3's (hidden_act swigluoai, swiglu_alpha) clamped
        # SwiGLU, gate * sigmoid(alpha * gate) * (up + 1): sglang fused_moe.py swiglu_*_with_alpha_and_limit
        alpha = next((f", {key} = {text[key]}" for key in ("swiglu_alpha", "hidden_act_alpha") if key in text), "")
        why.activation = f"swiglu_limit = {text['swiglu_limit']}{alpha}: gpt-oss's clamped SwiGLU"
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
