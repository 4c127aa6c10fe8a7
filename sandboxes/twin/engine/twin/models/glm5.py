"""Inference-only GLM-5.2 model (GlmMoeDsaForCausalLM) compatible with HuggingFace weights."""

from twin.model_loader.weight_utils import default_weight_loader
from twin.models import mla
from twin.quantization import PACKED_MODULES, QuarkConfig

ARCHITECTURES = ("GlmMoeDsaForCausalLM",)
DENSE_LAYERS = 3


def _linear_modules(prefix: str, config: dict, layer_index: int) -> list[tuple[str, list[tuple[str, int]], int]]:
    """(module, [(checkpoint shard, rows), ...], in_features) of one layer's linear modules, fused as sglang's
    DeepseekV2 layers register them: q_a_proj + kv_a_proj_with_mqa, gate_proj + up_proj."""
    hidden = config["hidden_size"]
    q_a, q_b, kv_a, kv_b, o_proj = mla.attention_modules(prefix, config)
    modules = [
        (
            f"{prefix}.self_attn.fused_qkv_a_proj_with_mqa",
            [("q_a_proj", q_a[1]), ("kv_a_proj_with_mqa", kv_a[1])],
            hidden,
        ),
        *[(name, [(name.rsplit(".", 1)[1], rows)], in_features) for name, rows, in_features in (q_b, kv_b, o_proj)],
    ]
    if layer_index < DENSE_LAYERS:
        mlp, inter = f"{prefix}.mlp", config["intermediate_size"]
    else:
        mlp, inter = f"{prefix}.mlp.shared_experts", config["moe_intermediate_size"] * config["n_shared_experts"]
    return modules + [
        (f"{mlp}.gate_up_proj", [("gate_proj", inter), ("up_proj", inter)], hidden),
        (f"{mlp}.down_proj", [("down_proj", hidden)], inter),
    ]


def _module_slots(quant: QuarkConfig, module: str, shards: list[tuple[str, int]], in_features: int) -> dict:
    """A (possibly fused) module's slots: each parameter's shape, dtype and where each checkpoint shard goes."""
    slots = quant.weight_slots(module, sum(rows for _, rows in shards), in_features)
    if len(shards) == 1:
        return slots
    offsets, start = {}, 0
    for shard, rows in shards:
        offsets[shard] = (start, rows)
        start += rows
    return {name: (shape, dtype, offsets) for name, (shape, dtype) in slots.items()}


def _layer_slots(prefix: str, config: dict, layer_index: int, quant: QuarkConfig) -> dict[str, tuple]:
    hidden = config["hidden_size"]
    slots = mla.norm_slots(prefix, config)
    for module, shards, in_features in _linear_modules(prefix, config, layer_index):
        slots.update(_module_slots(quant, module, shards, in_features))
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


def slot_name(checkpoint_name: str) -> tuple[str, str | None]:
    """The engine slot a checkpoint tensor loads into, and the shard it fills when the module is fused (sglang's
    stacked_params_mapping: `...gate_proj.weight` -> (`...gate_up_proj.weight`, "gate_proj"))."""
    for fused, shards in PACKED_MODULES.items():
        for shard in shards:
            if f".{shard}." in checkpoint_name:
                return checkpoint_name.replace(f".{shard}.", f".{fused}."), shard
    return checkpoint_name, None


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
    # the head's own projections stay bf16 whatever the exclude list says: its lm head is not a quantizable linear
    # in sglang (ParallelLMHead), and eh_proj is built as a plain linear
    slots["model.eh_proj.weight"] = ((hidden, 2 * hidden), "BF16")
    slots["model.shared_head.head.weight"] = ((vocab, hidden), "BF16")
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
        name, shard = slot_name(mtp_name if draft else tensor.name)
        param = params[name]
        default_weight_loader(param.shard(shard) if shard else param, tensor)
        loaded += 1
    return loaded
