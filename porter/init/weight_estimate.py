"""An estimate of a checkpoint's weight bytes from its config's shapes, for when it publishes no weight index.

Counts the parameters of each part (embeddings, lm_head, each layer's attention: MLA with its DSA indexer, GQA or
linear attention; each layer's MLP: routed experts, shared experts, router, or a dense MLP; the MTP layers) and
prices each at the quantization's bytes per weight (scales included) unless the exclude list keeps it
unquantized, by a representative module name per part matched as the formats write their entries: exact, a dotted
prefix or component, a glob with `*`, or a regex after `re:`. Embeddings and norms are never quantized (they are
not Linear layers). What it leaves out is said (a vision tower; norms and biases, which are tiny). Used only
when the index's metadata.total_size is missing; init says so. Does not read files.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from porter.init.checkpoint_facts import CheckpointFacts, Quantization

DTYPE_BYTES = {"bfloat16": 2.0, "float16": 2.0, "float32": 4.0}
WRAPPER_PREFIXES = ("", "language_model.")  # a multimodal wrapper's exclude entries name its text model so


@dataclass
class Estimate:
    bytes: int
    how: str
    routed_fraction: float  # the share of the bytes in routed experts (what expert or MoE-over-DP sharding splits)
    left_out: list[str] = field(default_factory=list)


def bytes_per_weight(quant: Quantization, dtype_bytes: float) -> float:
    """Bytes one quantized weight takes with its share of the scales."""
    bits, group = quant.weight_bits, quant.group_size
    if not bits:
        return dtype_bytes
    value = bits / 8
    if quant.block:
        return value + 4 / (quant.block[0] * quant.block[1])  # one float32 scale per block
    if group:
        # e8m0 scales (MX formats, Quark fp4) are 1 byte, NVFP4's fp8 scales 1 byte, int groups' bf16 scales 2
        scale = 2 if quant.weight_kind == "int" else 1
        return value + scale / group
    return value


@functools.lru_cache(maxsize=4096)
def _regex(pattern: str) -> re.Pattern | None:
    try:
        return re.compile(pattern)
    except re.error:
        return None


def excluded(name: str, entries: tuple[str, ...]) -> bool:
    """Whether an exclude entry covers the module `name`, read as generously as any format writes it."""
    for prefix in WRAPPER_PREFIXES:
        full = prefix + name
        for entry in entries:
            if entry.startswith("re:"):
                compiled = _regex(entry[3:])
                if compiled is not None and compiled.match(full):
                    return True
            elif "*" in entry:
                if fnmatch.fnmatchcase(full, entry) or fnmatch.fnmatchcase(full, entry.rstrip(".*") + ".*"):
                    return True
            elif full == entry or full.startswith(entry + ".") or f".{entry}." in f".{full}.":
                return True
    return False


def estimate(text: dict, facts: CheckpointFacts) -> Estimate:
    parts = list(_parts(text, facts))
    quant = facts.quantization
    dtype_bytes = DTYPE_BYTES.get(facts.dtype, 2.0)
    quantized_bytes = bytes_per_weight(quant, dtype_bytes)
    entries = tuple(quant.exclude)
    total, routed, quantized_params, params = 0.0, 0.0, 0, 0
    for name, count, linear in parts:
        params += count
        quantized = linear and quant.method != "none" and not excluded(name, entries)
        size = count * (quantized_bytes if quantized else dtype_bytes)
        total += size
        quantized_params += count if quantized else 0
        routed += size if ".experts." in name else 0
    how = (
        f"{params / 1e9:.1f}B parameters, {quantized_params / 1e9:.1f}B of them quantized at "
        f"{quantized_bytes:.3f} bytes each (scales included), the rest at {dtype_bytes:g} ({facts.dtype})"
    )
    left_out = ["the weight bytes are an estimate from the shapes (the checkpoint has no weight index)"]
    if "vision_config" in text:
        left_out.append("the vision tower (vision_config) is not in the weight estimate")
    return Estimate(int(total), how, routed / total if total else 0.0, left_out)


def _parts(text: dict, facts: CheckpointFacts):
    """(representative module name, parameters, is a Linear layer) of every part of the model."""
    hidden, vocab = int(text["hidden_size"]), int(text.get("vocab_size") or 0)
    yield "model.embed_tokens", vocab * hidden, False
    if not text.get("tie_word_embeddings"):
        yield "lm_head", vocab * hidden, True
    moe = facts.moe
    dense_first = moe.dense_layers if moe else facts.layers
    for index in range(facts.layers + facts.mtp_layers):
        yield from _attention(text, facts, index)
        if moe and index >= dense_first:
            yield from _moe(index, moe)
        else:
            width = moe.dense_width if moe else int(text.get("intermediate_size") or 4 * hidden)
            yield f"model.layers.{index}.mlp.down_proj", 3 * hidden * width, True
        if index >= facts.layers:  # an MTP layer: its projection of [embedding; hidden] back to hidden
            yield f"model.layers.{index}.eh_proj", 2 * hidden * hidden, True


def _moe(index: int, moe):
    prefix = f"model.layers.{index}.mlp"
    yield f"{prefix}.experts.0.down_proj", moe.experts * 3 * moe.hidden * moe.expert_width, True
    if moe.shared_experts:
        yield f"{prefix}.shared_experts.down_proj", moe.shared_experts * 3 * moe.hidden * moe.shared_width, True
    yield f"{prefix}.gate", moe.hidden * moe.experts, True


def _attention(text: dict, facts: CheckpointFacts, index: int):
    attention, hidden = facts.attention, int(text["hidden_size"])
    heads = attention.heads
    if attention.kv_lora_rank:
        nope, rope = int(text.get("qk_nope_head_dim") or 0), int(text.get("qk_rope_head_dim") or 0)
        value, q_rank = int(text.get("v_head_dim") or nope), int(text.get("q_lora_rank") or 0)
        query = hidden * q_rank + q_rank * heads * (nope + rope) if q_rank else hidden * heads * (nope + rope)
        latent = hidden * (attention.kv_lora_rank + rope) + attention.kv_lora_rank * heads * (nope + value)
        count = query + latent + heads * value * hidden
        if attention.index_topk:
            index_heads, index_dim = int(text.get("index_n_heads") or 0), int(text.get("index_head_dim") or 0)
            count += (q_rank or hidden) * index_heads * index_dim + hidden * index_dim + hidden * index_heads
        yield f"model.layers.{index}.self_attn.o_proj", count, True
        return
    if _is_linear_attention(text, index):
        key_dim = int(text.get("linear_num_key_heads") or 0) * int(text.get("linear_key_head_dim") or 0)
        value_heads = int(text.get("linear_num_value_heads") or 0)
        value_dim = value_heads * int(text.get("linear_value_head_dim") or 0)
        count = hidden * (2 * key_dim + 2 * value_dim + 2 * value_heads) + value_dim * hidden
        yield f"model.layers.{index}.linear_attn.out_proj", count, True
        return
    head_dim = attention.head_dim
    query = hidden * heads * head_dim * (2 if text.get("attn_output_gate") else 1)
    count = query + 2 * hidden * attention.kv_heads * head_dim + heads * head_dim * hidden
    yield f"model.layers.{index}.self_attn.o_proj", count, True


def _is_linear_attention(text: dict, index: int) -> bool:
    kinds = text.get("layer_types")
    if isinstance(kinds, list) and index < len(kinds):
        return kinds[index] == "linear_attention"
    interval = text.get("full_attention_interval")
    return bool(interval) and (index + 1) % int(interval) != 0 and index < int(text["num_hidden_layers"])
