"""Corvid-V3 FP8, the twin's second family: a DeepSeek-V3-style MLA MoE with FP8 block quantization and MTP.

Its own values, in DeepSeek-V3's config keys and checkpoint layout (config keys as real FP8-block checkpoints
write them: `quantization_config` with quant_method fp8, fmt e4m3, weight_block_size [128, 128], an exact-name
`modules_to_not_convert`): hidden 5120, 48 layers (the first dense) + MTP layer 48, 64 heads, MLA with
kv_lora 512 + rope 64 and a 96 + 64 = 160 query/key head (v 128), 160 routed experts, top-6, 2 shared experts,
expert width 1536. Each routed expert is its own tensors (`mlp.experts.E.gate_proj.weight`), e4m3 with a float32
`weight_scale_inv` per 128x128 block; norms, the router, embeddings, lm_head and the MTP head's projections stay
bf16. 1536 is 192 per rank at TP8 (not a multiple of the 128 block), 384 at TP4, 1536 whole with expert
parallelism. Does not cover writing the files (make_checkpoint.py) or the engine's view of the model
(engine/twin/models/deepseek_v3.py).
"""

import math

NAME = "corvid3"
MODEL_ID = "corvid-ai/Corvid-V3-FP8"
MODEL_DIR = "corvid-v3-fp8"  # under /models in the image
SHARDS = 6
BLOCK = 128
# The device's view of this family beyond its shape: MTP acceptance by draft position (one MTP layer drafts every
# position, num_nextn_predict_layers 1, so acceptance falls fast; the first position is in the range DeepSeek-V3
# reports for its MTP token, 85-90%, DeepSeek-V3 technical report section 5.4.3), and the error rates of a correct
# load on the word-problem and multiple-choice sets (a smaller model than GLM-5.2: a few points lower).
DEVICE = {"draft_acceptance_by_position": [0.86, 0.58, 0.31, 0.14, 0.06], "base_error_rates": [0.065, 0.230]}

CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "ep_size": 1,
    "first_k_dense_replace": 1,
    "hidden_act": "silu",
    "hidden_size": 5120,
    "initializer_range": 0.02,
    "intermediate_size": 12288,
    "kv_lora_rank": 512,
    "max_position_embeddings": 131072,
    "moe_intermediate_size": 1536,
    "moe_layer_freq": 1,
    "n_group": 8,
    "n_routed_experts": 160,
    "n_shared_experts": 2,
    "norm_topk_prob": True,
    "num_attention_heads": 64,
    "num_experts_per_tok": 6,
    "num_hidden_layers": 48,
    "num_key_value_heads": 64,
    "num_nextn_predict_layers": 1,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 96,
    "qk_rope_head_dim": 64,
    "rms_norm_eps": 1e-06,
    "rope_scaling": {
        "beta_fast": 32,
        "beta_slow": 1,
        "factor": 32,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 4096,
        "type": "yarn",
    },
    "rope_theta": 10000,
    "routed_scaling_factor": 2.0,
    "scoring_func": "sigmoid",
    "tie_word_embeddings": False,
    "topk_group": 3,
    "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16",
    "transformers_version": "4.46.3",
    "use_cache": True,
    "v_head_dim": 128,
    "vocab_size": 131072,
}
MTP_LAYER = CONFIG["num_hidden_layers"]


def modules_to_not_convert() -> list[str]:
    """Kept bf16, by exact module name (how vLLM's and sglang's Fp8Config match them): every router, the lm_head
    and the MTP head's input projection and output head."""
    first, last = CONFIG["first_k_dense_replace"], MTP_LAYER
    gates = [f"model.layers.{index}.mlp.gate" for index in range(first, last + 1)]
    return ["lm_head", *gates, f"model.layers.{MTP_LAYER}.eh_proj", f"model.layers.{MTP_LAYER}.shared_head.head"]


EXCLUDED = frozenset(modules_to_not_convert())


def _linear(name: str, out_features: int, in_features: int) -> dict:
    if name in EXCLUDED:
        return {f"{name}.weight": ("BF16", (out_features, in_features))}
    scales = (math.ceil(out_features / BLOCK), math.ceil(in_features / BLOCK))
    return {f"{name}.weight": ("F8_E4M3", (out_features, in_features)), f"{name}.weight_scale_inv": ("F32", scales)}


def _mlp(prefix: str, inter: int) -> dict:
    hidden = CONFIG["hidden_size"]
    found = _linear(f"{prefix}.gate_proj", inter, hidden) | _linear(f"{prefix}.up_proj", inter, hidden)
    return found | _linear(f"{prefix}.down_proj", hidden, inter)


def _attention(prefix: str) -> dict:
    c = CONFIG
    hidden, heads, rope = c["hidden_size"], c["num_attention_heads"], c["qk_rope_head_dim"]
    found = {
        f"{prefix}.q_a_layernorm.weight": ("BF16", (c["q_lora_rank"],)),
        f"{prefix}.kv_a_layernorm.weight": ("BF16", (c["kv_lora_rank"],)),
    }
    found |= _linear(f"{prefix}.q_a_proj", c["q_lora_rank"], hidden)
    found |= _linear(f"{prefix}.q_b_proj", heads * (c["qk_nope_head_dim"] + rope), c["q_lora_rank"])
    found |= _linear(f"{prefix}.kv_a_proj_with_mqa", c["kv_lora_rank"] + rope, hidden)
    found |= _linear(f"{prefix}.kv_b_proj", heads * (c["qk_nope_head_dim"] + c["v_head_dim"]), c["kv_lora_rank"])
    return found | _linear(f"{prefix}.o_proj", hidden, heads * c["v_head_dim"])


def _layer(index: int) -> dict:
    c, prefix = CONFIG, f"model.layers.{index}"
    hidden = c["hidden_size"]
    found = {
        f"{prefix}.input_layernorm.weight": ("BF16", (hidden,)),
        f"{prefix}.post_attention_layernorm.weight": ("BF16", (hidden,)),
    }
    found |= _attention(f"{prefix}.self_attn")
    if index < c["first_k_dense_replace"]:
        return found | _mlp(f"{prefix}.mlp", c["intermediate_size"])
    experts, inter = c["n_routed_experts"], c["moe_intermediate_size"]
    found |= _linear(f"{prefix}.mlp.gate", experts, hidden)
    found[f"{prefix}.mlp.gate.e_score_correction_bias"] = ("F32", (experts,))
    for expert in range(experts):
        found |= _mlp(f"{prefix}.mlp.experts.{expert}", inter)
    return found | _mlp(f"{prefix}.mlp.shared_experts", inter * c["n_shared_experts"])


def _mtp_extras() -> dict:
    hidden, vocab, prefix = CONFIG["hidden_size"], CONFIG["vocab_size"], f"model.layers.{MTP_LAYER}"
    found = {f"{prefix}.{norm}.weight": ("BF16", (hidden,)) for norm in ("enorm", "hnorm", "shared_head.norm")}
    found[f"{prefix}.embed_tokens.weight"] = ("BF16", (vocab, hidden))
    found |= _linear(f"{prefix}.eh_proj", hidden, 2 * hidden)
    return found | _linear(f"{prefix}.shared_head.head", vocab, hidden)


def tensors() -> dict:
    """Checkpoint tensor name -> (safetensors dtype, shape), in file order."""
    hidden, vocab = CONFIG["hidden_size"], CONFIG["vocab_size"]
    found = {"model.embed_tokens.weight": ("BF16", (vocab, hidden))}
    for index in range(MTP_LAYER + 1):
        found |= _layer(index)
    found |= _mtp_extras()
    found["model.norm.weight"] = ("BF16", (hidden,))
    return found | _linear("lm_head", vocab, hidden)


def config() -> dict:
    """The checkpoint's config.json: DeepSeek-V3's keys, then the FP8 block `quantization_config`."""
    quantization = {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "weight_block_size": [BLOCK, BLOCK],
        "modules_to_not_convert": modules_to_not_convert(),
    }
    return CONFIG | {"quantization_config": quantization}
