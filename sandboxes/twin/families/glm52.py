"""GLM-5.2 MXFP4 (AMD Quark), the flagship family: its config.json and the tensors of its checkpoint.

Names and shapes follow the published layout (hidden 6144, 78 layers + MTP layer 78, 256 experts, top-8,
MXFP4 packed two values per byte with e8m0 group-32 scales; the routed experts stacked per layer). Quark kept the
modules its EXCLUDE_LAYERS patterns select bf16 and, as its file-to-file export does (amd-quark 0.13,
quark/torch/quantization/file2file_quantization.py, _build_exclude_aware_quant_config), writes the config's `exclude`
as the sorted exact names of the linear modules those patterns selected, named as the checkpoint names them
(`model.layers.78.mlp.shared_experts.gate_proj`, ...).
Does not cover writing the files (make_checkpoint.py) or the engine's view of the model (engine/twin/models/glm5.py).
"""

import fnmatch

NAME = "glm52"
MODEL_ID = "zai-org/GLM-5.2-MXFP4"
MODEL_DIR = "glm-5.2-mxfp4"  # under /models in the image
SHARDS = 4
# The device's view of this family beyond its shape: MTP acceptance by draft position, a public GLM-5.2 MTP run
# on MI355X (about 2 of 5 accepted); the error rates of a correct load on the word-problem and multiple-choice sets.
DEVICE = {"draft_acceptance_by_position": [0.94, 0.67, 0.28, 0.08, 0.02], "base_error_rates": [0.050, 0.190]}

CONFIG = {
    "architectures": ["GlmMoeDsaForCausalLM"],
    "model_type": "glm_moe_dsa",
    "hidden_size": 6144,
    "intermediate_size": 12288,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 78,
    "num_nextn_predict_layers": 1,
    "num_attention_heads": 64,
    "q_lora_rank": 2048,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 192,
    "qk_rope_head_dim": 64,
    "v_head_dim": 256,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "vocab_size": 154880,
    "max_position_embeddings": 202752,
    "torch_dtype": "bfloat16",
    "rope_theta": 1000000,
    # DeepSeek sparse attention's indexer (what makes sglang treat the model as DSA: configs/model_config.py,
    # is_deepseek_dsa)
    "index_topk": 2048,
    "index_head_dim": 128,
    "index_n_heads": 32,
}
# The patterns the export was made with (Quark's --exclude_layers, matched with fnmatch on module names).
EXCLUDE_LAYERS = ["lm_head", "*.mlp.gate", "*eh_proj", "*shared_head.head", "model.layers.78.mlp.shared_experts.*"]


def _excluded(module: str) -> bool:
    return any(fnmatch.fnmatch(module, pattern) for pattern in EXCLUDE_LAYERS)


def exported_exclude(tensors: dict) -> list[str]:
    """The `exclude` list as Quark's export writes it: the linear modules (2-D weights) the patterns selected."""
    modules = {name.removesuffix(".weight") for name, (_, shape) in tensors.items() if name.endswith(".weight")}
    linear = {module for module in modules if len(tensors[f"{module}.weight"][1]) == 2 and "norm" not in module}
    return sorted(module for module in linear if _excluded(module))


def _linear(name: str, out_features: int, in_features: int, leading: tuple = ()) -> dict:
    if _excluded(name):
        return {f"{name}.weight": ("BF16", (*leading, out_features, in_features))}
    return {
        f"{name}.weight": ("U8", (*leading, out_features, in_features // 2)),
        f"{name}.weight_scale": ("U8", (*leading, out_features, in_features // 32)),
    }


def _layer(index: int) -> dict:
    c, prefix = CONFIG, f"model.layers.{index}"
    hidden, heads = c["hidden_size"], c["num_attention_heads"]
    tensors = {
        f"{prefix}.input_layernorm.weight": ("BF16", (hidden,)),
        f"{prefix}.post_attention_layernorm.weight": ("BF16", (hidden,)),
        f"{prefix}.self_attn.q_a_layernorm.weight": ("BF16", (c["q_lora_rank"],)),
        f"{prefix}.self_attn.kv_a_layernorm.weight": ("BF16", (c["kv_lora_rank"],)),
    }
    tensors |= _linear(f"{prefix}.self_attn.q_a_proj", c["q_lora_rank"], hidden)
    tensors |= _linear(f"{prefix}.self_attn.q_b_proj", heads * 256, c["q_lora_rank"])
    tensors |= _linear(f"{prefix}.self_attn.kv_a_proj_with_mqa", c["kv_lora_rank"] + 64, hidden)
    tensors |= _linear(f"{prefix}.self_attn.kv_b_proj", heads * (192 + 256), c["kv_lora_rank"])
    tensors |= _linear(f"{prefix}.self_attn.o_proj", hidden, heads * 256)
    if index < c["first_k_dense_replace"]:
        inter = c["intermediate_size"]
        tensors |= _linear(f"{prefix}.mlp.gate_proj", inter, hidden) | _linear(f"{prefix}.mlp.up_proj", inter, hidden)
        return tensors | _linear(f"{prefix}.mlp.down_proj", hidden, inter)
    inter, experts = c["moe_intermediate_size"], c["n_routed_experts"]
    tensors[f"{prefix}.mlp.gate.weight"] = ("BF16", (experts, hidden))
    tensors[f"{prefix}.mlp.gate.e_score_correction_bias"] = ("F32", (experts,))
    tensors |= {
        k.replace(".w13.", ".w13_"): v
        for k, v in _linear(f"{prefix}.mlp.experts.w13", 2 * inter, hidden, (experts,)).items()
    }
    tensors |= {
        k.replace(".w2.", ".w2_"): v for k, v in _linear(f"{prefix}.mlp.experts.w2", hidden, inter, (experts,)).items()
    }
    for name, out_features, in_features in (
        ("gate_proj", inter, hidden),
        ("up_proj", inter, hidden),
        ("down_proj", hidden, inter),
    ):
        tensors |= _linear(f"{prefix}.mlp.shared_experts.{name}", out_features, in_features)
    return tensors


def _mtp_extras(index: int) -> dict:
    hidden, prefix = CONFIG["hidden_size"], f"model.layers.{index}"
    tensors = {f"{prefix}.{norm}.weight": ("BF16", (hidden,)) for norm in ("enorm", "hnorm", "shared_head.norm")}
    tensors |= _linear(f"{prefix}.eh_proj", hidden, 2 * hidden)
    return tensors | _linear(f"{prefix}.shared_head.head", CONFIG["vocab_size"], hidden)


def tensors() -> dict:
    """Checkpoint tensor name -> (safetensors dtype, shape), in file order."""
    hidden, vocab = CONFIG["hidden_size"], CONFIG["vocab_size"]
    found = {"model.embed_tokens.weight": ("BF16", (vocab, hidden))}
    for index in range(CONFIG["num_hidden_layers"] + 1):
        found |= _layer(index)
    found |= _mtp_extras(CONFIG["num_hidden_layers"])
    found["model.norm.weight"] = ("BF16", (hidden,))
    return found | _linear("lm_head", vocab, hidden)


def quark_config() -> dict:
    """The `quantization_config` Quark exports (fields as sglang's quark loader reads them)."""
    mxfp4 = {"dtype": "fp4", "qscheme": "per_group", "group_size": 32, "scale_format": "e8m0"}
    return {
        "quant_method": "quark",
        "export": {"kv_cache_group": [], "pack_method": "reorder", "weight_format": "real_quantized"},
        "global_quant_config": {
            "weight": {**mxfp4, "is_dynamic": False},
            "input_tensors": {**mxfp4, "is_dynamic": True},
            "output_tensors": None,
            "bias": None,
        },
        "layer_quant_config": {},
        "layer_type_quant_config": {},
        "exclude": exported_exclude(tensors()),
        "quant_mode": "eager_mode",
        "version": "0.10",
    }


def config() -> dict:
    """The checkpoint's config.json."""
    return CONFIG | {"quantization_config": quark_config()}
