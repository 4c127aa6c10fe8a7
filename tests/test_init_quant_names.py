"""`porter init` prices each part at the format its checkpoint names it in: per-module lists under any wrapper's
prefix and any family's module names, exclude lists in the family's own names, and routed experts stored in a format
of their own (DeepSeek-V4's expert_dtype, a hybrid's moe_quant_algo).

Every config here is synthetic, imitating the keys of the family named beside it; every figure is derived by hand in
the comment above it from the config's keys and the upstream code named there, not from porter's code.
"""

from __future__ import annotations

import pytest

from porter.init import layout_plan
from porter.init.hardware import parse_hardware
from porter.init.weight_estimate import sized_facts

MI355X = parse_hardware("MI355X:8")[0]
NVFP4 = 0.5 + 1 / 16  # e2m1 and one fp8 scale a 16 (ModelOpt NVFP4, W4A16_NVFP4)
MXFP8 = 1 + 1 / 32  # e4m3 and one e8m0 scale a 32 (vLLM modelopt.py LINEAR_ALGOS "MXFP8")
MXFP4 = 0.5 + 1 / 32  # e2m1 and one e8m0 scale a 32 (vLLM mxfp4.py Mxfp4MoEMethod.create_weights)
FP8_BLOCK = 1 + 4 / (128 * 128)  # e4m3 and one float32 scale a 128x128 block

# The small MoE every test below shares: 4 layers, hidden 1024, 8 heads of 128 and 2 KV heads, 16 experts of width
# 256 (top-4), one shared expert of 256, vocabulary 1000, untied. One layer's parts (transformers' Qwen3-MoE /
# MiniMax modeling: q, k, v, o; gate, up, down per expert; a router of hidden x experts):
ATTENTION = 1024 * 8 * 128 + 2 * 1024 * 2 * 128 + 8 * 128 * 1024  # q, k and v, o: 2,621,440
EXPERTS = 16 * 3 * 1024 * 256  # 12,582,912
SHARED = 3 * 1024 * 256  # 786,432
ROUTER = 1024 * 16  # 16,384
VOCAB = 1000 * 1024  # the embeddings, and lm_head as many


def small_moe(**keys) -> dict:
    base = {
        "hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
        "head_dim": 128, "moe_intermediate_size": 256, "vocab_size": 1000, "max_position_embeddings": 4096,
        "torch_dtype": "bfloat16", "hidden_act": "silu", "num_experts_per_tok": 4,
    }  # fmt: skip
    return {**base, **keys}


# Qwen3.6-35B-A3B-NVFP4's hf_quant_config.json, scaled down: MIXED_PRECISION whose quantized_layers name the attention
# FP8, each layer's fused experts (`mlp.experts`, one entry) and the shared expert's projections (`shared_expert`, as
# Qwen spells it) W4A16_NVFP4 group 16, and lm_head W4A16_NVFP4; the router and embeddings are listed nowhere, so
# bf16 (sglang srt/layers/quantization/modelopt_quant.py ModelOptMixedPrecisionConfig.get_quant_method: an unlisted
# Linear gets UnquantizedLinearMethod). Both engines look each module up under every wrapper's prefix
# (_quantized_layer_prefix_candidates: language_model.model. <-> model.language_model. <-> model.) and a fused MoE by
# any listed name under it (_resolve_quant_algo). Per layer: attention 2,621,440 x 1 + (experts 12,582,912 + shared
# 786,432) x 0.5625 + router 16,384 x 2 = 10,174,464 bytes; x 4 layers = 40,697,856; embeddings 1,024,000 x 2 and
# lm_head 1,024,000 x 0.5625: 43,321,856 bytes, of which the routed experts 4 x 7,077,888 = 28,311,552.
def qwen_mixed(prefix: str) -> dict:
    algo = {"quant_algo": "W4A16_NVFP4", "group_size": 16}
    layers = {"lm_head": algo}
    for index in range(4):
        layer = f"{prefix}layers.{index}."
        layers.update({f"{layer}self_attn.{name}_proj": {"quant_algo": "FP8"} for name in "qkvo"})
        layers[f"{layer}mlp.experts"] = algo
        layers.update({f"{layer}mlp.shared_expert.{name}_proj": algo for name in ("gate", "up", "down")})
    return {"quantization": {"quant_algo": "MIXED_PRECISION", "quantized_layers": layers, "exclude_modules": ["mtp*"]}}


@pytest.mark.parametrize(
    ("wrapper", "prefix"),
    [
        (None, "model."),  # a text-only checkpoint
        ("text_config", "model.language_model."),  # transformers' Qwen3-VL / Qwen3.5 naming (Qwen3.6's)
        ("text_config", "language_model.model."),  # Llava / Kimi naming (MiniMax-M3's)
        ("llm_config", "language_model.model."),  # InternVL
        ("language_config", "language.model."),  # DeepSeek-VL2 (sglang deepseek_vl2.py strips `language.`)
    ],
)
def test_per_module_formats_are_found_under_every_wrapper_prefix(wrapper, prefix):
    text = small_moe(model_type="qwen3_5_moe_text", num_experts=16, shared_expert_intermediate_size=256)
    config = {"architectures": ["Qwen3_5MoeForConditionalGeneration"], wrapper: text} if wrapper else text
    facts = sized_facts(config, None, qwen_mixed(prefix))
    assert facts.weight_bytes == pytest.approx(43_321_856, rel=1e-6)
    assert facts.routed_fraction * facts.weight_bytes == pytest.approx(28_311_552, rel=1e-6)
    assert facts.expert_dtype.startswith("0.562 bytes") and "unquantized" not in facts.expert_dtype
    assert facts.expert_format.weight_bits == 4 and facts.expert_format.group_size == 16


# MiniMax-M3-NVFP4's quantization, scaled down: MIXED_PRECISION under `language_model.model.`, the routed experts
# listed one by one as `block_sparse_moe.experts.K.w1/w2/w3` NVFP4 (the engine's fused `experts` module takes the
# first listed under it), the attention and the shared expert (`block_sparse_moe.shared_experts`) MXFP8, the router
# `block_sparse_moe.gate` and lm_head in exclude_modules (bf16). MiniMax spells its expert count num_local_experts and
# sizes the experts with intermediate_size (sglang srt/models/minimax_m2.py). Per layer: attention 2,621,440 x 1.03125
# = 2,703,360, experts 7,077,888, shared 786,432 x 1.03125 = 811,008, router 32,768: 10,625,024; x 4 = 42,500,096;
# embeddings and lm_head bf16 2 x 2,048,000: 46,596,096 bytes.
def test_experts_listed_one_by_one_under_another_module_name_take_their_format():
    text = small_moe(model_type="minimax_m2", num_local_experts=16, intermediate_size=256, n_shared_experts=1,
                     shared_intermediate_size=256)  # fmt: skip
    del text["moe_intermediate_size"]
    layers, exclude = {}, ["lm_head", "model.embed_tokens"]
    for index in range(4):
        layer = f"language_model.model.layers.{index}."
        layers.update({f"{layer}self_attn.{name}_proj": {"quant_algo": "MXFP8"} for name in "qkvo"})
        for expert in range(16):
            layers.update({f"{layer}block_sparse_moe.experts.{expert}.w{w}": {"quant_algo": "NVFP4"} for w in "123"})
        shared = f"{layer}block_sparse_moe.shared_experts."
        layers.update({f"{shared}{name}_proj": {"quant_algo": "MXFP8"} for name in ("gate", "up", "down")})
        exclude.append(f"{layer}block_sparse_moe.gate")
    quant = {"quant_algo": "MIXED_PRECISION", "quantized_layers": layers, "exclude_modules": exclude}
    facts = sized_facts({"architectures": ["MiniMaxM3"], "text_config": text}, None, {"quantization": quant})
    assert facts.weight_bytes == pytest.approx(46_596_096, rel=1e-6)
    assert facts.expert_dtype.startswith("0.562 bytes")


# Gemma-4-26B-A4B-NVFP4's exclude list, scaled down: NVFP4 but each layer's `mlp*`, `router*` and `self_attn*`. In
# Gemma 4 the routed experts are the layer's own `experts`, beside its dense `mlp` (transformers
# models/gemma4/modeling_gemma4.py Gemma4TextDecoderLayer: self.mlp, self.router, self.experts; vLLM models/gemma4.py
# builds them at f"{prefix}.experts"), so `layers.N.mlp*` does not reach them: routed 4 x 12,582,912 x 0.5625 =
# 28,311,552 bytes. The same list on a family whose experts live under `mlp` (Qwen3-MoE's mlp.experts) keeps them
# bf16: 4 x 12,582,912 x 2 = 100,663,296.
@pytest.mark.parametrize(("model_type", "routed"), [("gemma4_text", 28_311_552), ("qwen3_moe", 100_663_296)])
def test_an_exclude_list_is_read_in_the_familys_own_module_names(model_type, routed):
    text = small_moe(model_type=model_type, num_experts=16, enable_moe_block=True)
    ignore = ["lm_head"] + [f"model.language_model.layers.{i}.{part}*" for i in range(4) for part in
                            ("mlp", "router", "self_attn")]  # fmt: skip
    quant = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "ignore": ignore}
    facts = sized_facts({"architectures": ["Wrapped"], "text_config": text, "quantization_config": quant}, None)
    assert facts.routed_fraction * facts.weight_bytes == pytest.approx(routed, rel=1e-6)


# DeepSeek-V4-Flash's keys: fp8 128x128 blocks with ue8m0 scales for the Linears, and the top-level expert_dtype. vLLM
# models/deepseek_v4/quant_config.py DeepseekV4FP8Config.get_quant_method runs "fp4" experts with Mxfp4MoEMethod (two
# e2m1 a byte, a uint8 e8m0 scale a 32: 0.53125 bytes a weight), "fp8" ones with Fp8MoEMethod (the checkpoint's
# blocks); with quant_algo MIXED_PRECISION and moe_quant_algo NVFP4 the experts are NVFP4 group 16 (sglang
# srt/configs/model_config.py nvfp4_moe_meta). Routed experts: (43 layers + 1 MTP layer, sglang
# deepseek_v4_nextn.py) x 256 experts x 3 x 4096 x 2048 = 283.5B weights, x 0.53125 = 150.6 GB in fp4. The whole
# checkpoint is then plausible against the published ~284B parameters: 43 x 6.44B = 277.0B are routed experts (147.2
# GB in MXFP4), and the ~7B others (attention, shared experts, the 2 x 129280 x 4096 embeddings and head) add under 10
# GB: ~160 GB, where pricing the experts as the checkpoint's fp8 would say ~290 GB.
ROUTED_V4 = 44 * 256 * 3 * 4096 * 2048


def deepseek_v4(**keys) -> dict:
    base = {
        "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "hidden_size": 4096,
        "num_hidden_layers": 43, "num_attention_heads": 64, "num_key_value_heads": 1, "head_dim": 512,
        "q_lora_rank": 1024, "qk_rope_head_dim": 64, "moe_intermediate_size": 2048, "n_routed_experts": 256,
        "n_shared_experts": 1, "num_experts_per_tok": 6, "num_nextn_predict_layers": 1, "vocab_size": 129280,
        "max_position_embeddings": 1048576, "hidden_act": "silu", "torch_dtype": "bfloat16",
        "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0",
                                "activation_scheme": "dynamic", "weight_block_size": [128, 128]},
    }  # fmt: skip
    return {**base, **keys}


@pytest.mark.parametrize(
    ("keys", "each", "tuning"),
    [
        ({"expert_dtype": "fp4"}, MXFP4, "fp4-weight-only"),
        ({"expert_dtype": "fp8"}, FP8_BLOCK, "fp8-block"),
    ],
)
def test_deepseek_v4_experts_are_priced_as_expert_dtype_says(keys, each, tuning):
    facts = sized_facts(deepseek_v4(**keys), None)
    assert facts.routed_fraction * facts.weight_bytes == pytest.approx(ROUTED_V4 * each, rel=1e-6)
    assert facts.expert_dtype.startswith(f"{each:.3f} bytes")
    assert layout_plan.quant_key(facts, MI355X)[0] == tuning
    assert not any("expert_dtype" in line for line in facts.undecided)


def test_hybrid_nvfp4_experts_of_an_fp8_checkpoint_are_nvfp4():
    config = deepseek_v4(expert_dtype="fp4")
    config["quantization_config"] |= {"quant_algo": "MIXED_PRECISION", "moe_quant_algo": "NVFP4", "group_size": 16}
    facts = sized_facts(config, None)
    assert facts.routed_fraction * facts.weight_bytes == pytest.approx(ROUTED_V4 * NVFP4, rel=1e-6)
    assert not any("moe_quant_algo" in line for line in facts.undecided)


@pytest.mark.parametrize("keys", [{}, {"expert_dtype": "int2"}])
def test_deepseek_v4_experts_without_a_dtype_init_reads_are_undecided_never_fp8(keys):
    # no key: vLLM assumes fp4, sglang reads the experts' safetensors dtype (srt/configs/deepseek_v4.py
    # try_detect_fp4_experts): config.json alone cannot say, so the experts are priced at bf16 as an upper bound
    facts = sized_facts(deepseek_v4(**keys), None)
    assert any(line.startswith("expert dtype, weight bytes and MoE tuning rows") and "expert_dtype" in line
               for line in facts.undecided)  # fmt: skip
    assert facts.routed_fraction * facts.weight_bytes == pytest.approx(ROUTED_V4 * 2, rel=1e-6)
    assert facts.expert_dtype.startswith("undecided") and layout_plan.quant_key(facts, MI355X)[0] is None


# vLLM's and sglang's fp8.py Fp8Config.from_config read the unquantized modules from ignored_layers, else
# modules_to_not_convert; an fp8 config's `ignore` is read by neither, so it leaves the experts fp8.
@pytest.mark.parametrize(("key", "each"), [("ignored_layers", 2.0), ("modules_to_not_convert", 2.0), ("ignore", None)])
def test_an_fp8_config_excludes_what_its_loader_reads(key, each):
    quant = {"quant_method": "fp8", "weight_block_size": [128, 128], key: ["re:.*mlp\\.experts.*"]}
    text = small_moe(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", num_experts=16,
                     quantization_config=quant)  # fmt: skip
    facts = sized_facts(text, None)
    assert facts.routed_fraction * facts.weight_bytes == pytest.approx(4 * EXPERTS * (each or FP8_BLOCK), rel=1e-6)
