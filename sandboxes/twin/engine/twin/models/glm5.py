"""GLM-5.2 (GlmMoeDsaForCausalLM) as the engine registers it: module names and parameter slots.

Layers 0-2 are dense, 3-77 are MoE (256 routed experts, top-8, one shared expert); the checkpoint's layer 78
is the MTP (next-n) head. The target model skips layer 78. With speculative decoding the draft model
registers that layer as `model.decoder.*` (its embedding projections at `model.eh_proj` etc.), the way
sglang's next-n model does, and `load_weights` renames checkpoint names accordingly.
Does not cover reading files (model_loader/) or the quant config format (quantization.py).
"""

from twin.model_loader.weight_utils import default_weight_loader
from twin.models import mla
from twin.quantization import QuarkConfig

ARCHITECTURES = ("GlmMoeDsaForCausalLM",)
DENSE_LAYERS = 3


def _linear_modules(prefix: str, config: dict, layer_index: int) -> list[tuple[str, int, int]]:
    hidden = config["hidden_size"]
    modules = mla.attention_modules(prefix, config)
    if layer_index < DENSE_LAYERS:
        inter = config["intermediate_size"]
        mlp = [("gate_proj", inter, hidden), ("up_proj", inter, hidden), ("down_proj", hidden, inter)]
        return modules + [(f"{prefix}.mlp.{name}", out, inp) for name, out, inp in mlp]
    shared = config["moe_intermediate_size"] * config["n_shared_experts"]
    mlp = [("gate_proj", shared, hidden), ("up_proj", shared, hidden), ("down_proj", hidden, shared)]
    return modules + [(f"{prefix}.mlp.shared_experts.{name}", out, inp) for name, out, inp in mlp]


def _layer_slots(prefix: str, config: dict, layer_index: int, quant: QuarkConfig) -> dict[str, tuple[tuple, str]]:
    hidden = config["hidden_size"]
    slots = mla.norm_slots(prefix, config)
    for module, out_features, in_features in _linear_modules(prefix, config, layer_index):
        slots.update(quant.weight_slots(module, out_features, in_features))
    if layer_index >= DENSE_LAYERS:
        experts, inter = config["n_routed_experts"], config["moe_intermediate_size"]
        group = quant.group_size
        slots[f"{prefix}.mlp.gate.weight"] = ((experts, hidden), "BF16")
        slots[f"{prefix}.mlp.gate.e_score_correction_bias"] = ((experts,), "F32")
        slots[f"{prefix}.mlp.experts.w13_weight"] = ((experts, 2 * inter, hidden // 2), "U8")
        slots[f"{prefix}.mlp.experts.w13_weight_scale"] = ((experts, 2 * inter, hidden // group), "U8")
        slots[f"{prefix}.mlp.experts.w2_weight"] = ((experts, hidden, inter // 2), "U8")
        slots[f"{prefix}.mlp.experts.w2_weight_scale"] = ((experts, hidden, inter // group), "U8")
    return slots


def target_params(config: dict, quant: QuarkConfig, parallel=None) -> dict[str, tuple[tuple, str]]:
    """Slots of the target model: embeddings, layers 0..N-1, final norm, lm_head."""
    hidden, vocab = config["hidden_size"], config["vocab_size"]
    slots = {"model.embed_tokens.weight": ((vocab, hidden), "BF16"), "model.norm.weight": ((hidden,), "BF16")}
    for layer_index in range(config["num_hidden_layers"]):
        slots.update(_layer_slots(f"model.layers.{layer_index}", config, layer_index, quant))
    slots.update(quant.weight_slots("lm_head", vocab, hidden))
    return slots


def draft_params(config: dict, quant: QuarkConfig, parallel=None) -> dict[str, tuple[tuple, str]]:
    """Slots of the MTP draft model: one decoder layer registered as `model.decoder`, plus its projections."""
    hidden, vocab = config["hidden_size"], config["vocab_size"]
    slots = {
        "model.enorm.weight": ((hidden,), "BF16"),
        "model.hnorm.weight": ((hidden,), "BF16"),
        "model.shared_head.norm.weight": ((hidden,), "BF16"),
    }
    slots.update(quant.weight_slots("model.eh_proj", hidden, 2 * hidden))
    slots.update(quant.weight_slots("model.shared_head.head", vocab, hidden))
    slots.update(_layer_slots("model.decoder", config, config["num_hidden_layers"], quant))
    return slots


def draft_name(checkpoint_name: str, nextn_layer: int) -> str | None:
    """Engine name of an MTP checkpoint tensor, or None when the tensor is not part of the MTP layer."""
    prefix = f"model.layers.{nextn_layer}."
    if not checkpoint_name.startswith(prefix):
        return None
    rest = checkpoint_name[len(prefix) :]
    if rest.split(".", 1)[0] in ("enorm", "hnorm", "eh_proj", "shared_head"):
        return f"model.{rest}"
    return f"model.decoder.{rest}"


def load_weights(params: dict, tensors, config: dict, draft: bool) -> int:
    """Copy checkpoint tensors into slots; the target skips the MTP layer, the draft loads only it."""
    nextn_layer = config["num_hidden_layers"]
    loaded = 0
    for tensor in tensors:
        mtp_name = draft_name(tensor.name, nextn_layer)
        if draft != (mtp_name is not None):
            continue
        name = mtp_name if draft else tensor.name
        param = params[name]
        default_weight_loader(param, tensor)
        loaded += 1
    return loaded
