"""Shapes a config lists one layer at a time, and `count`, how init reads any size in a config.

Covers Nemotron-NAS (DeciLM) `block_configs`: one block a layer, whose attention is there or a no-op, with
num_attention_heads / n_heads_in_group KV heads, and whose FFN is there or a no-op, ffn_mult wide; as sglang and vLLM
build them (srt/models/nemotron_nas.py and model_executor/models/nemotron_nas.py, DeciLMDecoderLayer). A block
field neither engine reads leaves the layers undecided. Does not build the facts (checkpoint_facts.py) nor price
the weights (weight_estimate.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from porter.init import config_keys as keys

# Block fields of the HF remote code (modeling_decilm.py) that neither engine's DeciLMDecoderLayer reads: set, the
# engine builds a layer other than the checkpoint's (a Linear in place of attention, sink tokens, a window).
UNREAD_BLOCK_FIELDS = (
    "replace_with_linear sparsify num_sink_tokens unshifted_sink use_prefill_window_in_sink_attention window_length"
).split()


def count(value: Any) -> int | None:
    """A config value as a whole number; None when it is none (null, a list, a string, a fraction, a bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not float(value).is_integer():
        return None
    return int(value) if abs(value) <= keys.MAX_SIZE else None


@dataclass
class LayerShapes:
    kinds: list[tuple[str, str]]  # (mixer, mlp) of each layer
    kv_heads: list[int]  # each layer's KV heads; 0 where its attention is a no-op
    mlp_widths: list[int]  # each layer's MLP width; 0 where its FFN is a no-op
    kv_note: str = ""  # said after the attention kind when the layers' KV heads differ
    why: str = "block_configs (one block a layer: its attention and FFN each there or a no-op; FFN ffn_mult wide)"
    why_kv: str = ""


def ffn_width(ffn_mult: float, hidden: int) -> int:
    """DeciLM's FFN width (both engines' _ffn_mult_to_intermediate_size): 2/3 of ffn_mult x hidden, up to 256."""
    width = int(2 * ffn_mult * hidden / 3)
    return width + -width % 256


def read_block_configs(text: dict, undecided: list[str]) -> LayerShapes | None:
    """Each layer's shapes from `block_configs` (None: the config has none); a block init cannot read is counted as
    a no-op and named."""
    blocks = text.get("block_configs")
    if not isinstance(blocks, list):
        return None
    layers, heads, hidden = text["num_hidden_layers"], text["num_attention_heads"], text["hidden_size"]
    if len(blocks) != layers:
        undecided.append(f"layers by kind, KV and weights: 'block_configs' lists {len(blocks)} blocks, not {layers}")
    shapes, unread, broken = LayerShapes([], [], []), set(), []
    for index in range(layers):
        block = blocks[index] if index < len(blocks) and isinstance(blocks[index], dict) else {}
        attention, ffn = (block.get(part) if isinstance(block.get(part), dict) else {} for part in ("attention", "ffn"))
        unread |= {f"{part}.{field}" for part, fields in (("attention", attention), ("ffn", ffn))
                   for field in UNREAD_BLOCK_FIELDS if fields.get(field)}  # fmt: skip
        group = count(attention.get("n_heads_in_group"))
        kv_heads = heads // group if attention.get("no_op") is False and group and 0 < group <= heads else 0
        mult = ffn.get("ffn_mult")
        number = isinstance(mult, int | float) and not isinstance(mult, bool) and 0 < mult < keys.MAX_SIZE
        width = ffn_width(mult, hidden) if ffn.get("no_op") is False and number else 0
        if (attention.get("no_op") is not True and not kv_heads) or (ffn.get("no_op") is not True and not width):
            broken.append(index)
        shapes.kinds.append(("full" if kv_heads else "none", "dense" if width else "none"))
        shapes.kv_heads.append(kv_heads)
        shapes.mlp_widths.append(width)
    _kv_heads(text, shapes, undecided)
    if unread:
        undecided.append(
            f"layers by kind, KV and weights: 'block_configs' sets {', '.join(sorted(unread)[:4])}, which sglang's "
            "and vLLM's nemotron_nas.py do not read"
        )
    if broken:
        undecided.append(
            f"layers by kind, KV and weights: 'block_configs' blocks {broken[:8]} lack a no_op or have an "
            "n_heads_in_group or ffn_mult init cannot read (counted as no-ops)"
        )
    return shapes


def _kv_heads(text: dict, shapes: LayerShapes, undecided: list[str]) -> None:
    """The fewest KV heads as num_key_value_heads (sglang's model_config get_num_kv_heads reads nemotron-nas's one
    value so); the KV bytes sum each layer's (checkpoint_facts)."""
    present, attending, layers = sorted(set(shapes.kv_heads) - {0}), sum(map(bool, shapes.kv_heads)), len(shapes.kinds)
    text["num_key_value_heads"] = present[0] if present else text["num_attention_heads"]
    shapes.why_kv = (
        f"block_configs: num_attention_heads = {text['num_attention_heads']} / n_heads_in_group KV heads in the "
        f"{attending} layers whose attention is not a no-op, head dim {text.get('head_dim') or 'hidden_size / heads'}"
    )
    if len(present) > 1:
        shapes.kv_note = f" with {present[0]} to {present[-1]} KV heads by layer (the fewest shown)"
        undecided.append(
            f"KV heads: block_configs gives layers {present} KV heads; sglang's model_config get_num_kv_heads refuses "
            "a nemotron-nas with more than one (variable GQA)"
        )
    if attending < layers:
        undecided.append(
            f"KV bytes per token: sglang sizes its KV pool for all {layers} layers (pool_configurator.py counts the "
            f"layers, not the attention), vLLM for the {attending} that attend; {attending} counted"
        )
