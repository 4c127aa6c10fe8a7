"""What every MLA (multi-head latent attention) decoder layer registers, whatever the model around it: the layer's
norms and the five attention projections, with DeepSeek-V3's names (q_a_proj to the query's low rank, q_b_proj up to
heads x (nope + rope), kv_a_proj_with_mqa to the latent KV and the shared rope key, kv_b_proj up to heads x
(nope + v), o_proj back to the hidden size). Does not cover the MLP or MoE beside it (the model modules).
"""


def norm_slots(prefix: str, config: dict) -> dict[str, tuple[tuple, str]]:
    hidden = config["hidden_size"]
    return {
        f"{prefix}.input_layernorm.weight": ((hidden,), "BF16"),
        f"{prefix}.post_attention_layernorm.weight": ((hidden,), "BF16"),
        f"{prefix}.self_attn.q_a_layernorm.weight": ((config["q_lora_rank"],), "BF16"),
        f"{prefix}.self_attn.kv_a_layernorm.weight": ((config["kv_lora_rank"],), "BF16"),
    }


def attention_modules(prefix: str, config: dict) -> list[tuple[str, int, int]]:
    """(module name, out features, in features) of the layer's attention projections."""
    hidden, heads, rope = config["hidden_size"], config["num_attention_heads"], config["qk_rope_head_dim"]
    q_rank, kv_rank = config["q_lora_rank"], config["kv_lora_rank"]
    return [
        (f"{prefix}.self_attn.q_a_proj", q_rank, hidden),
        (f"{prefix}.self_attn.q_b_proj", heads * (config["qk_nope_head_dim"] + rope), q_rank),
        (f"{prefix}.self_attn.kv_a_proj_with_mqa", kv_rank + rope, hidden),
        (f"{prefix}.self_attn.kv_b_proj", heads * (config["qk_nope_head_dim"] + config["v_head_dim"]), kv_rank),
        (f"{prefix}.self_attn.o_proj", hidden, heads * config["v_head_dim"]),
    ]
