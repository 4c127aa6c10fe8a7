"""Each attention kind's KV shape and the KV-cache values a token, read from a config's text model for `porter init`.

The full layers' KV heads and key and value head dims (a kind's own keys where a family gives it some: Gemma 4's
global_*, MiMo-V2's swa_*, config_keys.KV_SHAPES), MLA's latent with DSA's indexer keys, DeepSeek-V4's compressed
layers at their ratio's share of the tokens; sliding-window, linear-attention and Mamba layers hold a bounded state,
said in words. Also the heads of the other mixers, which TP shards too. Does not decide which layer is of which kind
(checkpoint_facts.py reads that) nor price the weights (weight_estimate.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from porter.init import config_keys as keys


@dataclass
class Attention:
    kind: str  # MHA, GQA, MQA, MLA, "MLA + DSA sparse", "MQA on compressed KV + DSA sparse"
    heads: int
    kv_heads: int
    head_dim: int
    kv_lora_rank: int | None = None
    index_topk: int | None = None
    full_layers: int = 0  # layers whose KV grows with every token
    bounded_layers: str = ""  # the other layers, said in words (linear attention state, a sliding window, Mamba)
    kv_elements_per_token: float = 0  # per token, all full layers (compressed ones at their share), one element a value
    kv_shapes: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # mixer -> (KV heads, key dim, value dim)
    fixed_bytes_per_token: float = 0  # cached at a dtype of its own whatever the KV dtype: a DSA indexer's fp8 keys
    windowed: dict[str, float] = field(default_factory=dict)  # sliding / chunked -> its layers' KV a token, kept whole


def mixer_heads(text: dict, kinds: list[tuple[str, str]]) -> dict[str, int]:
    """The heads of each mixer but full attention's, which TP shards evenly too."""
    mixers = {mixer for mixer, _ in kinds}
    names = ["linear_num_key_heads", "linear_num_value_heads"] if "linear" in mixers else []
    names += ["mamba_num_heads"] if "mamba" in mixers else []
    names += ["swa_num_attention_heads"] if "sliding" in mixers else []  # vLLM mimo_v2.py: heads % tp_size
    heads = {name: int(text[name]) for name in names if isinstance(text.get(name), int)}
    kda = text.get("linear_attn_config")
    if "linear" in mixers and isinstance(kda, dict) and isinstance(kda.get("num_heads"), int):
        heads["KDA heads"] = kda["num_heads"]  # sglang kimi_k3.py KimiK3DeltaAttention: num_heads % attn_tp_size
    return heads


def _kv_shapes(text: dict, head_dim: int) -> dict[str, tuple[int, int, int]]:
    """(KV heads, key dim, value dim) of each attention kind's layers: the config's own keys for a kind (KV_SHAPES),
    else num_key_value_heads, the head dim and v_head_dim (vLLM mimo_v2.py MiMoV2Attention: a value head narrower
    than the key's)."""
    heads = int(text["num_attention_heads"])
    base = (int(text.get("num_key_value_heads") or heads), head_dim, int(text.get("v_head_dim") or head_dim))
    shapes = {}
    for kind, (kv_key, key_key, value_key) in keys.KV_SHAPES.items():
        kv_heads = text.get(kv_key) if kv_key != "num_global_key_value_heads" or text.get("attention_k_eq_v") else None
        key_dim = text.get(key_key)
        value_dim = text.get(value_key) or key_dim or base[2]
        shapes[kind] = (int(kv_heads or base[0]), int(key_dim or base[1]), int(value_dim))
    return shapes


def _bounded(text: dict, kinds: list[tuple[str, str]], shapes: dict) -> str:
    others = sorted({mixer for mixer, _ in kinds} - {"full", "none"})
    window, sliding = text.get("sliding_window_size") or text.get("sliding_window"), shapes["sliding"]
    shape = f"; {sliding[0]} KV heads, head dim {sliding[1]}" if sliding != shapes["full"] else ""
    detail = f" (window {window}{shape})" if "sliding" in others else ""
    detail += f" (chunks of {text.get('attention_chunk_size')})" if "chunked" in others else ""
    count = sum(mixer in others for mixer, _ in kinds)
    return f"{count} {'/'.join(others)} layers{detail}: a bounded state per sequence" if others else ""


def read_attention(text: dict, kinds: list[tuple[str, str]], dim: tuple, undecided: list[str]) -> tuple[Attention, str]:
    """The attention facts and why they were read so; `dim` is the head dim's (key, value) as the config spells it."""
    heads, (dim_key, head_dim) = int(text["num_attention_heads"]), dim
    head_dim = int(head_dim or text["hidden_size"] // heads)
    shapes = _kv_shapes(text, head_dim)
    kv_heads, bounded = shapes["full"][0], _bounded(text, kinds, shapes)
    if isinstance(text.get("compress_ratios"), list):
        return _compressed_attention(text, kinds, heads, kv_heads, head_dim, undecided)
    # transformers modeling_gemma4.py Gemma4TextAttention, vLLM gemma4.py: the last num_kv_shared_layers layers read
    # an earlier layer's cache and keep none of their own
    full = sum(mixer == "full" for mixer, _ in kinds[: len(kinds) - int(text.get("num_kv_shared_layers") or 0)])
    if text.get("kv_lora_rank"):
        rank, rope = int(text["kv_lora_rank"]), int(text.get("qk_rope_head_dim") or 0)
        topk = text.get("index_topk")
        indexer = _indexer_bytes(text, len(kinds), undecided) if topk else 0
        kind = "MLA + DSA sparse" if topk else "MLA"
        if not isinstance(nope := text.get("qk_nope_head_dim"), int):
            undecided.append("the MLA head dim: no qk_nope_head_dim (a query/key head is qk_nope + qk_rope wide)")
        head_dim = nope + rope if isinstance(nope, int) else head_dim  # sglang deepseek_v2.py: qk_head_dim
        why = f"kv_lora_rank = {rank}, qk_rope_head_dim = {rope}: one latent of {rank + rope} per layer"
        if topk:
            why += (
                f"; index_topk = {topk}: each query attends its top {topk} tokens, chosen by an indexer whose fp8 "
                f"keys and scales are cached too ({indexer} bytes a token, in the layers that build an indexer)"
            )
        latent = (rank + rope) * full
        return Attention(kind, heads, kv_heads, head_dim, rank, topk, full, bounded, latent, {}, indexer), why
    kind = "MHA" if kv_heads == heads else "MQA" if kv_heads == 1 else "GQA"
    _, key_dim, value_dim = shapes["full"]
    spelled = ("num_key_value_heads", dim_key, "v_head_dim", "attention_k_eq_v", *keys.KV_SHAPES["full"])
    read = ", ".join(f"{key} = {text[key]}" for key in dict.fromkeys(spelled) if key and text.get(key))
    if text.get("num_global_key_value_heads") and not text.get("attention_k_eq_v"):
        undecided.append(
            f"KV bytes per token: num_global_key_value_heads = {text['num_global_key_value_heads']} without "
            "attention_k_eq_v: transformers' Gemma4TextConfig drops it, sglang 0.5.20's hf_transformers/config.py "
            "takes it (counted as num_key_value_heads)"
        )
    if str(text.get("model_type", "")).startswith("gemma4") and not text.get("global_head_dim"):
        undecided.append("KV bytes per token: no global_head_dim (transformers Gemma4TextConfig takes 512 then)")
    why = (
        f"num_attention_heads = {heads}; a full layer caches {kv_heads} KV heads x (key {key_dim} + value {value_dim})"
        f" ({read or 'head dim hidden_size / heads'})"
    )
    windowed = {}  # a chunked layer has the full layers' shape
    for mixer in ("sliding", "chunked"):
        window_heads, window_key, window_value = shapes.get(mixer, shapes["full"])
        if layers := sum(kind == mixer for kind, _ in kinds):
            windowed[mixer] = layers * window_heads * (window_key + window_value)
    return Attention(
        kind, heads, kv_heads, key_dim, full_layers=full, bounded_layers=bounded,
        kv_elements_per_token=kv_heads * (key_dim + value_dim) * full, kv_shapes=shapes,
        windowed=windowed,
    ), why  # fmt: skip


def _compressed_attention(
    text: dict, kinds: list, heads: int, kv_heads: int, head_dim: int, undecided: list[str]
) -> tuple[Attention, str]:
    """DeepSeek-V4: every layer attends a sliding window; a compressed layer caches besides one entry of KV heads x
    head_dim a `ratio` tokens, a compressed sparse one (ratio 4) its indexer's key of index_head_dim too, in fp8 with
    an fp32 scale a 128 whatever the KV dtype (vLLM models/deepseek_v4/attention.py: DeepseekV4Attention and
    DeepseekV4IndexerCache get_kv_cache_spec's tokens_per_state; the indexer's k_cache_head_dim)."""
    index_dim, topk, window = int(text.get("index_head_dim") or 0), text.get("index_topk"), text.get("sliding_window")
    layers = [(ratio, mixer) for ratio, (mixer, _) in zip(text["compress_ratios"], kinds, strict=False)]
    per_token = sum(kv_heads * head_dim / ratio for ratio, mixer in layers if "compressed" in mixer)
    indexer = sum((index_dim + index_dim // 128 * 4) / ratio for ratio, mixer in layers if mixer == "compressed sparse")
    if not index_dim and any(mixer == "compressed sparse" for mixer, _ in kinds):
        undecided.append("KV bytes per token: compressed sparse layers (compress_ratios 4) with no index_head_dim")
    why = (
        f"compress_ratios: a compressed layer caches {kv_heads} x head_dim {head_dim} a ratio's tokens, a compressed "
        f"sparse one (4) its indexer's key of index_head_dim {index_dim} too; every layer a window of {window} besides"
    )
    kind = ("MQA" if kv_heads == 1 else "GQA") + " on compressed KV" + (" + DSA sparse" if topk else "")
    full = sum("compressed" in mixer for mixer, _ in kinds)
    bounded = f"every layer's sliding window ({window} tokens): a bounded state per sequence"
    return Attention(kind, heads, kv_heads, head_dim, None, topk, full, bounded, per_token, {}, indexer), why


def _indexer_bytes(text: dict, count: int, undecided: list[str]) -> int:
    """A DSA indexer's cache a token: index_head_dim fp8 values and an fp32 scale a 128 (sglang 0.5.20
    mem_cache/memory_pool.py DSATokenToKVPool, vLLM 0.25.1 models/deepseek_v2.py Indexer.k_cache), in each layer
    that builds an indexer. A layer that reuses an earlier layer's top-k caches none: sglang
    configs/model_config.py dsa_layer_skips_topk reads indexer_types, then cli_factor, then index_topk_pattern, then
    index_topk_freq from index_skip_topk_offset, and pool_configurator.py sizes only the other layers' keys on one
    node; vLLM's DeepseekV2DecoderLayer reads the pattern and the frequency only. Counts that differ leave the KV
    bytes undecided."""

    def skips(layer: int, order: tuple[str, ...]) -> bool:
        for key in order:
            value = text.get(key)
            if key == "indexer_types" and isinstance(value, list):
                return layer < len(value) and value[layer] == "shared"
            if key == "cli_factor" and isinstance(value, int) and value > 1:
                return layer % value != 0
            if key == "index_topk_pattern" and isinstance(value, (list, str)):
                return layer < len(value) and value[layer] == "S"
        freq, offset = int(text.get("index_topk_freq") or 1), int(text.get("index_skip_topk_offset") or 2)
        return max(layer - offset + 1, 0) % freq != 0

    sglang = sum(not skips(layer, ("indexer_types", "cli_factor", "index_topk_pattern")) for layer in range(count))
    vllm = sum(not skips(layer, ("index_topk_pattern",)) for layer in range(count))
    if sglang != vllm:
        undecided.append(f"KV: sglang caches the indexer keys of {sglang} layers, vLLM of {vllm} (indexer_types)")
    dim = int(text.get("index_head_dim") or 0)
    return (dim + dim // 128 * 4) * max(sglang, vllm)
