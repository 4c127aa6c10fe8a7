"""The config.json keys `porter init` reads, as each family spells them (with the upstream file each spelling was
read from), and how an unread key is judged: a name that says it could shape layers, attention, experts or their
dtype makes a fact undecided unless the key is known to change none of them. Does not read a config
(checkpoint_facts.py)."""

from __future__ import annotations

import re

# Each fact's keys, as the families spell them; two present with different values leave the fact undecided.
EXPERTS = ("n_routed_experts", "num_experts", "num_local_experts")
# top-k: also sglang srt/configs/kimi_linear.py KimiLinearConfig (num_experts_per_token) and transformers
# models/gemma4/configuration_gemma4.py Gemma4TextConfig (top_k_experts, read by Gemma4TextRouter)
TOP_K = ("num_experts_per_tok", "experts_per_token", "moe_topk", "num_experts_per_token", "top_k_experts")
# shared experts: sglang srt/models/kimi_k3.py KimiK3MoE builds one MLP of num_shared_experts x moe_intermediate_size
SHARED_EXPERTS = ("n_shared_experts", "num_shared_experts")
# the width routed experts run at (latent MoE): nemotron_h's moe_latent_size; Kimi-K3's routed_expert_hidden_size
# (sglang srt/models/kimi_k3.py KimiK3MoE: routed_expert_down_proj from hidden_size, routed_expert_up_proj back)
LATENT = ("moe_latent_size", "routed_expert_hidden_size")
MTP = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules")
HEAD_DIM = ("head_dim", "attention_head_dim")
ACTIVATION = ("mlp_hidden_act", "hidden_act", "hidden_activation")  # Gemma 4: transformers Gemma4TextMLP
SHARED_WIDTH = ("moe_shared_expert_intermediate_size", "shared_expert_intermediate_size", "shared_intermediate_size")
# The dense layers' MLP width in a MoE model, the first spelling present: MiniMax-M3's dense_intermediate_size (sglang
# minimax_m3.py MiniMaxM3DecoderLayer), Llama 4's intermediate_size_mlp, else intermediate_size (DeepSeek, MiMo).
DENSE_WIDTH = ("dense_intermediate_size", "intermediate_size_mlp", "intermediate_size")
# Per-layer MLP lists, each entry's meaning: transformers' mlp_layer_types; a moe_layer_freq list (MiniMax-M3, MiMo-V2:
# sglang minimax_m3.py _is_layer_sparse and mimo_v2.py is_moe_layer, nonzero is MoE).
MLP_LISTS = {"mlp_layer_types": {"sparse": "moe", "dense": "dense"}, "moe_layer_freq": {1: "moe", 0: "dense"}}
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
LAYER_TYPES = {
    "full_attention": "full", "linear_attention": "linear", "sliding_attention": "sliding",
    # every token's KV kept, the attended ones chosen by the DSA indexer (sglang 0.5.23 srt/configs/hy_v4.py)
    "deepseek_sparse_attention": "full", "indexed_attention": "full",
    "chunked_attention": "chunked",  # transformers' Llama4TextConfig: attention within chunks of attention_chunk_size
}  # fmt: skip
# Keys listing each layer's mixer as a code: MiniMax's attn_type_list (1 softmax, 0 lightning attention); MiMo-V2's
# hybrid_layer_pattern (1 sliding window, 0 full: vLLM model_executor/models/mimo_v2.py is_compressed_softmax_layer,
# sglang srt/models/mimo_v2.py is_swa_layer); DeepSeek-V4's compress_ratios (transformers
# models/deepseek_v4/configuration_deepseek_v4.py _COMPRESS_RATIO_TO_LAYER_TYPE; a list longer than the layers
# names the MTP layer last, which that config drops).
LAYER_CODES = {
    "attn_type_list": {1: "full", 0: "linear"},
    "hybrid_layer_pattern": {0: "full", 1: "sliding"},
    "compress_ratios": {0: "sliding", 4: "compressed sparse", 128: "heavily compressed"},
}
# Keys giving one kind of layer its own KV shape, as (KV heads, key head dim, value head dim): MiMo-V2's swa_* (vLLM
# mimo_v2.py MiMoV2DecoderLayer; a missing swa_v_head_dim is swa_head_dim, sglang mimo_v2.py); Gemma 4's global_*
# (transformers Gemma4TextConfig.__post_init__ builds the full layers' per_layer_config from them, which vLLM
# gemma4.py and sglang srt/utils/hf_transformers/config.py read; the global KV heads only with attention_k_eq_v).
KV_SHAPES = {
    "sliding": ("swa_num_key_value_heads", "swa_head_dim", "swa_v_head_dim"),
    "full": ("num_global_key_value_heads", "global_head_dim", "global_head_dim"),
}
# Families whose MLP is not gated (up -> act -> down, two matrices): sglang srt/models/nemotron_h.py NemotronHMLP.
NOT_GATED = {"nemotron_h"}
# Activations the other families gate (SwiGLU: transformers' Llama/Qwen/DeepSeek MLPs; GeGLU: Gemma's, Gemma 4's
# Gemma4TextMLP and Gemma4TextExperts; SiTU: sglang srt/models/kimi_k3.py KimiK3MLP's gate_up_proj and SituAndMul).
GATED_ACTIVATIONS = {"silu", "swish", "gelu", "gelu_pytorch_tanh", "situ"}
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
    "add_cross_attention cross_attention_hidden_size use_mamba_kernels linear_conv_kernel_dim "
    "use_qk_norm qk_norm_type mtp_use_dedicated_embeddings indexer_rope_interleave output_router_logits "
    "router_aux_loss_coef router_jitter_noise ep_size topk_group topk_method norm_topk_prob n_group "
    "max_window_layers mtp_transformer_layers mtp_hybrid_override_pattern qk_head_dim rope_interleave "
    "partial_rotary_factor rotary_dim initializer_range chunk_size_feed_forward attn_output_gate use_sliding_window "
    "sliding_window vision_config text_config language_config llm_config quantization_config layer_norm_epsilon "
    "pruned_heads time_step_rank top_k _attn_implementation_autoset for_llm_compressor "
    # whether the MTP layer reuses its top-k across draft steps (vLLM models/deepseek_v2.py: the draft's compute only)
    "index_share_for_mtp_iteration "
    # how experts are routed (groups, renormalising, the scoring function), not how many or how wide
    "num_expert_group use_grouped_topk moe_renormalize moe_router_activation_func use_moe_router_bias "
    # which image tokens attend each other both ways (Gemma 4): the KV kept is the same
    "use_bidirectional_attention".split()
)
# Names that say a key is a norm's epsilon, a rotary base, a dropout, or a scale on values or scores: none sizes a
# layer, a head, an expert or a cache.
HARMLESS_NAME = re.compile(r"eps(ilon)?$|_theta$|dropout|(_scale|scaling_factor|sink_bias)$")


# The facts `porter init` states, each with the words an undecided line uses for it before its first ": " (every
# line init lists under "Could not decide" about a fact starts with the facts it leaves open).
FACT_WORDS = {
    "dtype": r"^the dtype$",
    "layers": r"layers by kind|MoE layers|block",
    "MoE": r"MoE|top-k|expert(?! dtype)",
    "MLP activation": r"activation|gated",
    "expert dtype": r"expert dtype",
    "MTP layers": r"MTP",
    "attention": r"attention|head dim|heads",
    "context": r"context",
    "weights": r"weight|gated|head dim|routed experts|shared expert|MoE layers|layers by kind|width",
    "KV per token": r"KV|head dim|layers by kind",
}
# What an unread key could leave open, by the first rule its name matches; a name no rule matches could change any
# fact. An indexer's keys leave the attention and the KV open, not the weight bytes: its projections are a few
# matrices a layer, well under 1% of a checkpoint's bytes.
KEY_FACTS = (
    (r"index", ("attention", "KV")),
    (r"dtype|quant|bits", ("expert dtype", "weight bytes")),
    (r"mtp|nextn", ("MTP layers", "weight bytes")),
    (r"activation|(^|_)act(_|$)", ("MLP activation",)),
    (r"layer|pattern|block|mixer|linear|mamba|ssm", ("layers by kind", "MoE", "attention", "KV", "weight bytes")),
    (r"expert|moe|topk|top_k|per_tok|routed|shared|intermediate|mlp|latent", ("MoE", "weight bytes")),
    (r"window|sliding|swa|global|local|compress|ratio|kv|head|att|rank|dim", ("attention", "KV", "weight bytes")),
    (r"hidden", ("MoE", "weight bytes")),
)
FACT_ORDER = (
    "layers by kind", "MoE", "MLP activation", "expert dtype", "MTP layers", "attention", "KV", "weight bytes",
)  # fmt: skip


def unread_keys(text: dict) -> list[str]:
    """Keys this module neither reads nor knows to be harmless, whose names say they could change a fact, each line
    led by the facts its key leaves open."""
    found = []
    for key in sorted(text):
        # a vocabulary for an input no layer takes: transformers' Gemma4TextDecoderLayer adds per-layer inputs only
        # when hidden_size_per_layer_input is set (models/gemma4/modeling_gemma4.py)
        no_input = str(key).startswith("vocab_size_") and not text.get(str(key).replace("vocab_size_", "hidden_size_"))
        unset = text[key] in (None, False, [], {}) or no_input
        lowered = str(key).lower()
        if not unset and RISKY.search(lowered) and key not in HARMLESS | READ and not HARMLESS_NAME.search(lowered):
            facts = next((facts for pattern, facts in KEY_FACTS if re.search(pattern, lowered)), FACT_ORDER)
            shown = repr(text[key])
            found.append(
                f"{', '.join(facts[:-1])}{' and ' if len(facts) > 1 else ''}{facts[-1]}: {str(key)[:60]!r} = "
                f"{shown[:60]}{'...' if len(shown) > 60 else ''}, a key init does not read"
            )
    return found


READ = frozenset(
    (*EXPERTS, *TOP_K, *MTP, *HEAD_DIM, *ACTIVATION, *SHARED_WIDTH, *SHARED_EXPERTS, *LATENT, *LAYER_CODES)
    + tuple(key for spellings in KV_SHAPES.values() for key in spellings)
    + tuple(
        "model_type hidden_size num_hidden_layers num_attention_heads num_key_value_heads torch_dtype dtype "
        "hybrid_override_pattern layers_block_type mtp_layers_block_type "
        "layer_types full_attention_interval attn_type_list attention_chunk_size mlp_layer_types first_k_dense_replace "
        "moe_layer_freq interleave_moe_layer_step mlp_only_layers decoder_sparse_step moe_intermediate_size "
        "intermediate_size intermediate_size_mlp moe_latent_size n_shared_experts kv_lora_rank qk_rope_head_dim "
        "qk_nope_head_dim v_head_dim q_lora_rank index_topk index_head_dim index_n_heads linear_num_key_heads "
        "linear_key_head_dim linear_num_value_heads linear_value_head_dim mamba_num_heads mamba_head_dim n_groups "
        "ssm_state_size swiglu_limit use_mtp attention_k_eq_v enable_moe_block linear_attn_config sliding_window_size "
        "swa_num_attention_heads latent_moe_use_norm num_kv_shared_layers indexer_types cli_factor index_topk_pattern "
        "index_topk_freq index_skip_topk_offset dense_intermediate_size block_configs swiglu_alpha hidden_act_alpha "
        "sparse_attention_config expert_dtype no_rope_layers no_rope_layer_interval sliding_window_pattern".split()
    )
)
