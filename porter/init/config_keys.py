"""The config.json keys `porter init` reads, as each family spells them (with the upstream file each spelling was
read from), and how an unread key is judged: a name that says it could shape layers, attention, experts or their
dtype makes a fact undecided unless the key is known to change none of them. Does not read a config
(checkpoint_facts.py)."""

from __future__ import annotations

import re

# Each fact's keys, as the families spell them; two present with different values leave the fact undecided.
EXPERTS = ("n_routed_experts", "num_experts", "num_local_experts")
TOP_K = ("num_experts_per_tok", "experts_per_token", "moe_topk")
MTP = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules")
HEAD_DIM = ("head_dim", "attention_head_dim")
ACTIVATION = ("mlp_hidden_act", "hidden_act")
SHARED_WIDTH = ("moe_shared_expert_intermediate_size", "shared_expert_intermediate_size", "shared_intermediate_size")
# Per-layer kinds as (mixer, mlp). nemotron_h lists one block a layer in layers_block_type, or in its legacy
# hybrid_override_pattern one character a block (sglang srt/configs/nemotron_h.py _pattern_to_list; the engine takes
# the list's length as the layer count); layer_types: transformers' qwen3_next / qwen3_5 / gpt_oss configurations.
BLOCK_TYPES = {
    "mamba": ("mamba", "none"),
    "attention": ("full", "none"),
    "mlp": ("none", "dense"),
    "moe": ("none", "moe"),
}
HYBRID_PATTERN = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
LAYER_TYPES = {"full_attention": "full", "linear_attention": "linear", "sliding_attention": "sliding"}
# Families whose MLP is not gated (up -> act -> down, two matrices): sglang srt/models/nemotron_h.py NemotronHMLP.
NOT_GATED = {"nemotron_h"}
# Activations the other families gate (SwiGLU: transformers' Llama/Qwen/DeepSeek MLPs; GeGLU: Gemma's).
GATED_ACTIVATIONS = {"silu", "swish", "gelu", "gelu_pytorch_tanh"}
# Where a multimodal wrapper keeps its language model's config: transformers' Llava / Qwen-VL / Kimi `text_config`,
# DeepSeek-VL2's `language_config`, InternVL's `llm_config`.
WRAPPED = ("text_config", "language_config", "llm_config")
# How a family names a layer's modules where it differs from the DeepSeek/Qwen names the weight estimate uses
# (self_attn, mlp.experts, mlp.gate, mlp.shared_experts), for reading an exclude list written in the family's names:
# Gemma 4 runs its experts and router beside a dense `mlp` (transformers models/gemma4/modeling_gemma4.py
# Gemma4TextDecoderLayer: self.mlp, self.router, self.experts; vLLM models/gemma4.py the same prefixes); nemotron_h
# calls every block its layer's `mixer` (sglang srt/models/nemotron_h.py NemotronH*DecoderLayer.mixer).
MODULE_NAMES = {
    "gemma4": (("mlp.experts", "experts"), ("mlp.gate", "router")),
    "nemotron_h": (("self_attn.", "mixer."), ("mlp.", "mixer.")),
}
MAX_SIZE = 1 << 40  # no count or width in a real config comes near; a larger integer is refused, not computed with
MAX_LAYERS = 10_000  # init lists every layer: a count past this is no checkpoint's
# A key init does not read is a risk when its name says it shapes layers, attention, experts or their dtype.
RISKY = re.compile(
    r"layer|pattern|block|ratio|compress|window|sliding|swa|global|local|expert|topk|top_k|per_tok|latent|head|kv|"
    r"dtype|quant|bits|mixer|attn|attention|moe|mlp|intermediate|mamba|ssm|linear|mtp|nextn|hidden|rank|dim|^index|indexer|_types"
)
# Keys whose names look risky but change none of the facts (dropout, biases, norms, routing scores, training knobs,
# transformers' PretrainedConfig generation defaults such as top_k).
HARMLESS = frozenset(
    "attention_bias attention_dropout hidden_dropout mlp_bias mamba_hidden_act mamba_proj_bias mamba_ssm_cache_dtype "
    "mamba_ssm_dtype moe_router_dtype moe_shared_expert_overlap output_attentions output_hidden_states "
    "add_cross_attention cross_attention_hidden_size use_mamba_kernels linear_conv_kernel_dim no_rope_layers "
    "use_qk_norm qk_norm_type mtp_use_dedicated_embeddings indexer_rope_interleave output_router_logits "
    "router_aux_loss_coef router_jitter_noise ep_size topk_group topk_method norm_topk_prob n_group "
    "max_window_layers mtp_transformer_layers mtp_hybrid_override_pattern qk_head_dim rope_interleave "
    "partial_rotary_factor rotary_dim initializer_range chunk_size_feed_forward attn_output_gate use_sliding_window "
    "sliding_window vision_config text_config language_config llm_config quantization_config layer_norm_epsilon "
    "pruned_heads time_step_rank top_k _attn_implementation_autoset for_llm_compressor".split()
)


def unread_keys(text: dict) -> list[str]:
    """Keys this module neither reads nor knows to be harmless, whose names say they could change a fact."""
    found = []
    for key in sorted(text):
        unset = text[key] in (None, False, [], {})
        if not unset and RISKY.search(str(key).lower()) and key not in HARMLESS and key not in READ:
            shown = repr(text[key])
            found.append(
                f"{str(key)[:60]!r} = {shown[:60]}{'...' if len(shown) > 60 else ''}: a key init does not read; it "
                "could change the layers by kind, the MoE shape, the KV bytes or the weight bytes"
            )
    return found


READ = frozenset(
    (*EXPERTS, *TOP_K, *MTP, *HEAD_DIM, *ACTIVATION, *SHARED_WIDTH)
    + tuple(
        "model_type hidden_size num_hidden_layers num_attention_heads num_key_value_heads torch_dtype dtype "
        "hybrid_override_pattern layers_block_type mtp_layers_block_type "
        "layer_types full_attention_interval attn_type_list attention_chunk_size mlp_layer_types first_k_dense_replace "
        "moe_layer_freq interleave_moe_layer_step mlp_only_layers decoder_sparse_step moe_intermediate_size "
        "intermediate_size intermediate_size_mlp moe_latent_size n_shared_experts kv_lora_rank qk_rope_head_dim "
        "qk_nope_head_dim v_head_dim q_lora_rank index_topk index_head_dim index_n_heads linear_num_key_heads "
        "linear_key_head_dim linear_num_value_heads linear_value_head_dim mamba_num_heads mamba_head_dim n_groups "
        "ssm_state_size swiglu_limit use_mtp expert_dtype".split()
    )
)
