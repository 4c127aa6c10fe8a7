"""`porter init`'s layers by kind, KV bytes a token, heads, head dims and top-k for attention layouts whose layers
differ in kind and KV shape: Gemma 4 (global layers of their own shape), MiMo-V2 (sliding layers of their own
shape, a value head narrower than the key's), DeepSeek-V4 (compressed KV layers) and Kimi-K3 (KDA linear attention
beside MLA). Each config imitates a family's keys without copying a file; every expected figure is derived by hand
in the comment beside it from the upstream file named there, not from porter's code.
"""

from __future__ import annotations

from collections import Counter

from porter.init.weight_estimate import sized_facts


def base(**keys) -> dict:
    """A small bf16 decoder; each test adds its family's keys."""
    common = {
        "hidden_size": 1024, "num_hidden_layers": 6, "num_attention_heads": 8, "num_key_value_heads": 4,
        "head_dim": 128, "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 8192,
        "torch_dtype": "bfloat16", "hidden_act": "silu", "tie_word_embeddings": True,
    }  # fmt: skip
    return {**common, **keys}


def kinds(facts) -> dict:
    return dict(Counter(facts.layer_kinds))


def decided(facts) -> list[str]:
    return [line for line in facts.undecided if "estimate" not in line]


def gemma4(**keys) -> dict:
    # imitates transformers models/gemma4/configuration_gemma4.py Gemma4TextConfig: sliding layers on the base keys,
    # the full layers on global_head_dim and (with attention_k_eq_v) num_global_key_value_heads; a MoE block beside
    # the dense MLP (enable_moe_block), top_k_experts, hidden_activation
    family = dict(
        architectures=["Gemma4ForConditionalGeneration"], model_type="gemma4_text",
        layer_types=["sliding_attention", "sliding_attention", "full_attention"] * 2, sliding_window=512,
        global_head_dim=256, num_global_key_value_heads=1, attention_k_eq_v=True, enable_moe_block=True,
        num_experts=16, top_k_experts=2, moe_intermediate_size=256, hidden_activation="gelu_pytorch_tanh",
    )  # fmt: skip
    return base(**{**family, **keys})


def test_gemma4_global_layers_cache_their_own_kv_shape():
    config = gemma4()
    del config["hidden_act"]
    facts = sized_facts(config, None)
    # 6 layers, 4 sliding + 2 full, every one MoE (num_experts 16, top_k_experts 2: Gemma4TextRouter's topk k)
    assert kinds(facts) == {("sliding", "moe"): 4, ("full", "moe"): 2}
    # the full layers' per_layer_config: head_dim = global_head_dim 256, KV heads = num_global_key_value_heads 1;
    # k_eq_v loads K's weights into both the K and V slots (vLLM gemma4.py Gemma4Attention), so the cache still holds
    # K and V: 2 layers x 1 KV head x (256 + 256) = 1024 values, 2048 bytes at bf16. The sliding layers (window 512,
    # 4 KV heads of 128) hold a bounded state and are not counted.
    attention = facts.attention
    assert (attention.heads, attention.kv_heads, attention.head_dim, attention.full_layers) == (8, 1, 256, 2)
    assert facts.kv_bytes_per_token(2) == 2048
    assert "4 sliding layers (window 512; 4 KV heads, head dim 128)" in attention.bounded_layers
    # Gemma4TextDecoderLayer: the dense MLP (intermediate_size 512) runs beside the experts and the outputs add, as
    # one shared expert's would; Gemma4TextMLP and Gemma4TextExperts gate: act(gate) * up
    moe = facts.moe
    assert (moe.experts, moe.top_k, moe.expert_width, moe.shared_experts, moe.shared_width) == (16, 2, 256, 1, 512)
    assert facts.activation == "gelu_pytorch_tanh" and facts.gated
    # weights, bf16, tied embeddings 1000 x 1024; each layer 16 experts x 3 x 1024 x 256, the dense MLP
    # 3 x 1024 x 512, router 1024 x 16; sliding attention q 1024 x 8 x 128, k and v 1024 x 4 x 128 each, o the same
    # as q; full attention q 1024 x 8 x 256, k and v 1024 x 1 x 256 each, o the same as q
    sliding = 2 * 1024 * 8 * 128 + 2 * 1024 * 4 * 128
    full = 2 * 1024 * 8 * 256 + 2 * 1024 * 1 * 256
    layer_mlp = 16 * 3 * 1024 * 256 + 3 * 1024 * 512 + 1024 * 16
    assert facts.weight_bytes == 2 * (1000 * 1024 + 6 * layer_mlp + 4 * sliding + 2 * full)
    assert decided(facts) == []


def test_gemma4_global_kv_heads_without_k_eq_v_are_undecided():
    # Gemma4TextConfig.__post_init__ overrides the full layers' KV heads only when attention_k_eq_v: without it they
    # keep num_key_value_heads 4 (head dim still global_head_dim 256): 2 layers x 4 x (256 + 256) = 4096 values
    # sglang 0.5.20 (srt/utils/hf_transformers/config.py) takes num_global_key_value_heads whatever k_eq_v says, so
    # the two disagree there: undecided
    facts = sized_facts(gemma4(attention_k_eq_v=False), None)
    assert facts.attention.kv_heads == 4 and facts.kv_bytes_per_token(2) == 2 * 4096
    assert any("num_global_key_value_heads = 1 without attention_k_eq_v" in line for line in facts.undecided)


def test_gemma4_kv_shared_layers_keep_no_cache_of_their_own():
    # transformers modeling_gemma4.py Gemma4TextAttention, vLLM gemma4.py (kv_sharing_target_layer_name): the last
    # num_kv_shared_layers 3 layers (sliding, sliding, full) read an earlier layer's cache: 1 full layer of its own,
    # 1 KV head x (256 + 256) = 512 values, 1024 bytes at bf16
    facts = sized_facts(gemma4(num_kv_shared_layers=3), None)
    assert facts.attention.full_layers == 1 and facts.kv_bytes_per_token(2) == 1024


def test_gemma4_without_global_head_dim_is_undecided():
    # Gemma4TextConfig.__post_init__ pops global_head_dim with a default of 512, never the base head_dim
    config = gemma4()
    del config["global_head_dim"]
    assert any("no global_head_dim" in line for line in sized_facts(config, None).undecided)


def mimo_v2(**keys) -> dict:
    # imitates MiMo-V2-Flash's keys (vLLM model_executor/models/mimo_v2.py MiMoV2DecoderLayer): hybrid_layer_pattern
    # 1 = sliding window (swa_* shapes, sliding_window_size), 0 = full attention (num_key_value_heads, head_dim for
    # the key, v_head_dim for the value)
    family = dict(
        architectures=["MiMoV2FlashForCausalLM"], model_type="mimo_v2_flash", num_hidden_layers=4,
        hybrid_layer_pattern=[0, 1, 1, 0], num_key_value_heads=2, head_dim=96, v_head_dim=64,
        swa_num_attention_heads=8, swa_num_key_value_heads=4, swa_head_dim=96, swa_v_head_dim=64,
        sliding_window_size=128, sliding_window=128,
    )  # fmt: skip
    return base(**{**family, **keys})


def test_mimo_v2_full_layers_cache_keys_and_narrower_values():
    facts = sized_facts(mimo_v2(), None)
    assert kinds(facts) == {("full", "dense"): 2, ("sliding", "dense"): 2}
    # 2 full layers x 2 KV heads x (key 96 + value 64) = 640 values, 1280 bytes at bf16
    assert (facts.attention.kv_heads, facts.attention.head_dim, facts.kv_bytes_per_token(2)) == (2, 96, 1280)
    assert "2 sliding layers (window 128; 4 KV heads, head dim 96)" in facts.attention.bounded_layers
    assert facts.sharded_heads == {"swa_num_attention_heads": 8}  # MiMoV2Attention asserts heads % tp_size
    # weights, bf16: full attention q 1024 x 8 x 96, k 1024 x 2 x 96, v 1024 x 2 x 64, o 8 x 64 x 1024; sliding the
    # same with 4 KV heads; dense MLP 3 x 1024 x 512 a layer; tied embeddings 1000 x 1024
    full = 1024 * 8 * 96 + 1024 * 2 * (96 + 64) + 8 * 64 * 1024
    sliding = 1024 * 8 * 96 + 1024 * 4 * (96 + 64) + 8 * 64 * 1024
    assert facts.weight_bytes == 2 * (1000 * 1024 + 2 * full + 2 * sliding + 4 * 3 * 1024 * 512)
    assert decided(facts) == []


def test_a_layer_code_list_init_cannot_read_is_undecided():
    short = sized_facts(mimo_v2(hybrid_layer_pattern=[0, 1]), None)
    unknown = sized_facts(mimo_v2(hybrid_layer_pattern=[0, 1, 2, 0]), None)
    assert any("'hybrid_layer_pattern' lists 2" in line for line in short.undecided)
    assert any("'hybrid_layer_pattern' lists ['2']" in line for line in unknown.undecided)


def deepseek_v4(**keys) -> dict:
    # imitates DeepSeek-V4's keys: compress_ratios one a layer, then the MTP layer's (transformers
    # configuration_deepseek_v4.py: 0 sliding_attention, 4 compressed_sparse_attention, 128 heavily_compressed)
    family = dict(
        architectures=["DeepseekV4ForCausalLM"], model_type="deepseek_v4", num_hidden_layers=4,
        num_key_value_heads=1, head_dim=256, compress_ratios=[0, 4, 128, 4, 0], sliding_window=64,
        index_head_dim=128, index_n_heads=8, index_topk=128, num_nextn_predict_layers=1,
    )  # fmt: skip
    return base(**{**family, **keys})


def test_deepseek_v4_compressed_layers_cache_their_share_of_the_tokens():
    facts = sized_facts(deepseek_v4(), None)
    compressed = {("compressed sparse", "dense"): 2, ("heavily compressed", "dense"): 1}
    assert kinds(facts) == {("sliding", "dense"): 1, **compressed}
    # vLLM models/deepseek_v4/attention.py: a compressed layer caches one entry of 1 KV head x 256 a `ratio` tokens
    # (tokens_per_state), a ratio-4 layer also its indexer's key of index_head_dim 128 a 4 tokens, as fp8 bytes with
    # an fp32 scale a 128 at any KV dtype (DeepseekV4IndexerCache); every layer's sliding window (64) is bounded.
    # Ratio 4: 256 / 4 = 64 values a token, twice; ratio 128: 256 / 128 = 2; 130 values, 260 bytes at bf16 and 130 at
    # fp8; the indexer (128 + 4) / 4 = 33 bytes a token, twice
    assert facts.attention.full_layers == 3 and facts.kv_bytes_per_token(2) == 260 + 66
    assert facts.kv_bytes_per_token(1) == 130 + 66
    assert facts.attention.index_topk == 128 and "sliding window (64 tokens)" in facts.attention.bounded_layers
    assert decided(facts) == []


def test_a_compress_ratio_no_upstream_config_maps_is_undecided():
    # configuration_deepseek_v4.py maps 0, 4 and 128 only
    facts = sized_facts(deepseek_v4(compress_ratios=[0, 4, 2, 4]), None)
    assert any("'compress_ratios' lists ['2']" in line for line in facts.undecided)


def test_kimi_k3_kda_layers_beside_mla():
    # imitates Kimi-K3's keys (sglang srt/configs/kimi_linear.py KimiLinearConfig, srt/models/kimi_k3.py): KDA layers
    # listed from 1 in linear_attn_config.kda_layers, the rest MLA; num_experts_per_token, num_shared_experts of
    # moe_intermediate_size each, experts on routed_expert_hidden_size, SiTU gated (KimiK3MLP's gate_up_proj)
    config = base(
        architectures=["KimiLinearForCausalLM"], model_type="kimi_linear", num_hidden_layers=8,
        num_key_value_heads=8, hidden_act="situ", first_k_dense_replace=1, moe_layer_freq=1,
        linear_attn_config={"kda_layers": [1, 2, 3, 5, 6, 7], "full_attn_layers": [4, 8], "num_heads": 8,
                            "head_dim": 64, "short_conv_kernel_size": 4},
        kv_lora_rank=128, qk_rope_head_dim=32, qk_nope_head_dim=64, v_head_dim=64, q_lora_rank=256,
        num_experts=32, num_experts_per_token=4, num_shared_experts=2, moe_intermediate_size=128,
        routed_expert_hidden_size=512, latent_moe_use_norm=True,
    )  # fmt: skip
    facts = sized_facts(config, None)
    # layers 1-3 and 5-7 (indexes 0-2, 4-6) KDA, 4 and 8 MLA; the first layer dense (first_k_dense_replace 1)
    assert kinds(facts) == {("linear", "dense"): 1, ("linear", "moe"): 5, ("full", "moe"): 2}
    # MLA caches kv_lora_rank 128 + qk_rope_head_dim 32 a layer: 2 x 160 = 320 values, 640 bytes at bf16
    assert facts.attention.kind == "MLA" and facts.kv_bytes_per_token(2) == 640
    assert "6 linear layers" in facts.attention.bounded_layers and facts.sharded_heads == {"KDA heads": 8}
    moe = facts.moe
    assert (moe.hidden, moe.expert_width, moe.experts, moe.top_k) == (512, 128, 32, 4)
    assert (moe.shared_experts, moe.shared_width) == (2, 128) and facts.activation == "situ" and facts.gated
    assert decided(facts) == []


def test_llama4_chunked_layers_hold_a_bounded_state():
    # imitates Llama 4's keys on 8 layers: transformers Llama4TextConfig fills an empty no_rope_layers with a NoPE
    # (full-attention) layer every 4th and chunked attention in the others; sglang's get_hybrid_layer_ids bounds
    # those (every 4th full). KV: 2 full layers x 2 x 4 KV heads x 128 x 2 bytes = 4096 bytes a token at bf16
    config = base(model_type="llama4_text", num_hidden_layers=8, attention_chunk_size=8192, no_rope_layers=[])
    facts = sized_facts(config, None)
    assert kinds(facts) == {("chunked", "dense"): 6, ("full", "dense"): 2} and facts.kv_bytes_per_token(2) == 4096
    assert "6 chunked layers (chunks of 8192)" in facts.attention.bounded_layers and decided(facts) == []
    # a list that chunks other layers than sglang's pool bounds, and chunking outside Llama 4, leave the KV open
    moved = sized_facts({**config, "no_rope_layers": [1, 1, 0, 1, 1, 1, 0, 1]}, None)
    assert "KV per token" in moved.open
    assert "KV per token" in sized_facts(base(attention_chunk_size=8192), None).open


def test_each_engine_counts_the_windowed_layers_it_keeps_whole():
    from porter.engines.known import ENGINES

    # Llama 4 (in sglang's hybrid pool, is_hybrid_swa_model): sglang keeps the chunked layers' window; vLLM turns its
    # hybrid KV cache manager off for chunked local attention, so all 8 layers grow: 8 x 2 x 4 x 128 x 2 bytes
    llama4 = base(model_type="llama4_text", architectures=["Llama4ForConditionalGeneration"], num_hidden_layers=8,
                  attention_chunk_size=8192)  # fmt: skip
    # a Gemma-3-like sliding/full alternation: vLLM keeps the sliding window, sglang keeps every token of an
    # architecture it gives no hybrid pool: 1 full layer or all 6, 2048 bytes each
    gemma3 = base(architectures=["Gemma3ForCausalLM"], sliding_window=512, layer_types=["sliding_attention"] * 3
                  + ["full_attention"] + ["sliding_attention"] * 2)  # fmt: skip
    for config, sglang, vllm in ((llama4, 4096, 16384), (gemma3, 12288, 2048)):
        for engine, expected in (("sglang", sglang), ("vllm", vllm)):
            facts = sized_facts(config, None)
            facts.count_windows(ENGINES[engine])
            assert facts.kv_bytes_per_token(2) == expected, (config["architectures"], engine)
