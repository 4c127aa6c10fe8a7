"""Inference-only DeepseekV3 model (DeepseekV3ForCausalLM) compatible with HuggingFace weights."""

import re

from twin.model_loader.weight_utils import default_weight_loader, expert_weight_loader
from twin.models import mla

ARCHITECTURES = ("DeepseekV3ForCausalLM",)
EXPERT_WEIGHT = re.compile(r"^(?P<layer>.+\.mlp\.experts)\.(?P<expert>\d+)\.(?P<proj>gate|up|down)_proj\.(?P<kind>.+)$")
# the MTP layer's own modules (the rest of it is a decoder block); the embedding is shared with the draft's top level
SPEC_LAYER_WEIGHT_NAMES = ("embed_tokens", "enorm", "hnorm", "eh_proj", "shared_head")
SHARED_WEIGHT_NAMES = ("embed_tokens",)


def _mlp_modules(prefix: str, hidden: int, inter: int) -> list[tuple[str, int, int]]:
    up = [(f"{prefix}.gate_proj", inter, hidden), (f"{prefix}.up_proj", inter, hidden)]
    return [*up, (f"{prefix}.down_proj", hidden, inter)]


def _layer_slots(prefix: str, config: dict, layer_index: int, quant, parallel) -> dict[str, tuple[tuple, str]]:
    hidden = config["hidden_size"]
    slots = mla.norm_slots(prefix, config)
    modules = mla.attention_modules(prefix, config)
    if layer_index < config["first_k_dense_replace"]:
        modules += _mlp_modules(f"{prefix}.mlp", hidden, config["intermediate_size"])
    else:
        experts, inter = config["n_routed_experts"], config["moe_intermediate_size"]
        modules += _mlp_modules(f"{prefix}.mlp.shared_experts", hidden, inter * config["n_shared_experts"])
        slots[f"{prefix}.mlp.gate.weight"] = ((experts, hidden), "BF16")
        slots[f"{prefix}.mlp.gate.e_score_correction_bias"] = ((experts,), "F32")
        experts_prefix = f"{prefix}.mlp.experts"
        slots.update(quant.expert_slots(experts_prefix, experts, hidden, inter, parallel.moe_tp, parallel.moe_pad_to))
    for module, out_features, in_features in modules:
        slots.update(quant.weight_slots(module, out_features, in_features))
    return slots


def target_params(config: dict, quant, parallel) -> dict[str, tuple[tuple, str]]:
    """Slots of the target model: embeddings, layers 0..N-1, final norm, lm_head."""
    hidden, vocab = config["hidden_size"], config["vocab_size"]
    slots = {"model.embed_tokens.weight": ((vocab, hidden), "BF16"), "model.norm.weight": ((hidden,), "BF16")}
    for layer_index in range(config["num_hidden_layers"]):
        slots.update(_layer_slots(f"model.layers.{layer_index}", config, layer_index, quant, parallel))
    slots.update(quant.weight_slots("lm_head", vocab, hidden))
    return slots


def draft_params(config: dict, quant, parallel) -> dict[str, tuple[tuple, str]]:
    """Slots of the MTP draft model: its own modules under the checkpoint's layer prefix, the decoder block
    under `mtp_block`, its embedding at the top level."""
    hidden, vocab, layer = config["hidden_size"], config["vocab_size"], config["num_hidden_layers"]
    prefix = f"model.layers.{layer}"
    slots = {"model.embed_tokens.weight": ((vocab, hidden), "BF16")}
    slots |= {f"{prefix}.{norm}.weight": ((hidden,), "BF16") for norm in ("enorm", "hnorm", "shared_head.norm")}
    slots.update(quant.weight_slots(f"{prefix}.eh_proj", hidden, 2 * hidden))
    slots.update(quant.weight_slots(f"{prefix}.shared_head.head", vocab, hidden))
    slots.update(_layer_slots(f"{prefix}.mtp_block", config, layer, quant, parallel))
    return slots


def spec_layer_name(checkpoint_name: str, spec_layer: int) -> str | None:
    """The draft model's name for a tensor of the MTP layer, None for a tensor of another layer."""
    prefix = f"model.layers.{spec_layer}."
    if not checkpoint_name.startswith(prefix):
        return None
    own = next((name for name in SPEC_LAYER_WEIGHT_NAMES if name in checkpoint_name), None)
    if own is None:
        return checkpoint_name.replace(prefix, f"{prefix}mtp_block.")
    return checkpoint_name.replace(prefix, "model.") if own in SHARED_WEIGHT_NAMES else checkpoint_name


def load_weights(params: dict, tensors, config: dict, draft: bool) -> int:
    """Copy checkpoint tensors into slots: routed experts into their fused slot, everything else by name; the target
    skips the MTP layer, the draft loads only it."""
    spec_layer, loaded = config["num_hidden_layers"], 0
    for tensor in tensors:
        name = spec_layer_name(tensor.name, spec_layer)
        if draft != (name is not None):
            continue
        name = name if draft else tensor.name
        expert = EXPERT_WEIGHT.match(name)
        if expert is None:
            default_weight_loader(params[name], tensor)
        else:
            fused = "w2" if expert["proj"] == "down" else "w13"
            shard = {"gate": 0, "up": 1, "down": 0}[expert["proj"]]
            param = params[f"{expert['layer']}.{fused}_{expert['kind']}"]
            expert_weight_loader(param, tensor, int(expert["expert"]), shard)
        loaded += 1
    return loaded
