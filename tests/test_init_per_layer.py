"""`porter init` on configs that say a layer's shape one layer at a time (a moe_layer_freq list, Nemotron-NAS
block_configs) and on configs with a field of the wrong type: the facts right, or the facts that field feeds
undecided, never the whole init refused unless the hidden size, layers or heads cannot be read.

Every config here is written for the test, imitating a family's keys (named beside it), with its figures derived by
hand in the comment from the modeling code named there.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from test_init_checkpoints import synthetic

from porter.commands.cli import main
from porter.init.checkpoint_facts import FactsError
from porter.init.weight_estimate import sized_facts


def kinds_of(facts) -> dict[tuple[str, str], int]:
    counted: dict[tuple[str, str], int] = {}
    for kind in facts.layer_kinds:
        counted[kind] = counted.get(kind, 0) + 1
    return counted


def minimax_m3(**keys) -> dict:
    """Imitates MiniMax-M3's config.json keys (sglang srt/models/minimax_m3.py), at a small size."""
    base = {
        "architectures": ["MiniMaxM3ForCausalLM"], "model_type": "minimax_m3", "hidden_size": 1024,
        "num_hidden_layers": 6, "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 64,
        "moe_layer_freq": [0, 0, 1, 1, 1, 1], "first_k_dense_replace": 2, "dense_intermediate_size": 2048,
        "intermediate_size": 256, "moe_intermediate_size": 256, "num_local_experts": 8, "num_experts_per_tok": 2,
        "n_shared_experts": 1, "shared_intermediate_size": 256, "num_mtp_modules": 2, "num_nextn_predict_layers": 1,
        "hidden_act": "swigluoai", "swiglu_alpha": 1.702, "swiglu_limit": 7.0, "vocab_size": 1000,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "max_position_embeddings": 65536,
        "sparse_attention_config": {"sparse_attention_freq": [0, 0, 1, 1, 1, 1], "sparse_index_dim": 64,
                                    "sparse_disable_index_value": [0, 0, 1, 1, 1, 1]},
    }  # fmt: skip
    return {**base, **keys}


def test_a_moe_layer_freq_list_marks_each_layer_and_the_dense_layers_take_their_own_width():
    # sglang minimax_m3.py MiniMaxM3DecoderLayer: a layer is MoE where moe_layer_freq[layer] != 0, else a dense
    # MiniMaxM3MLP of dense_intermediate_size; experts and the shared expert are intermediate_size wide. MTP: vLLM
    # config/speculative.py and models/minimax_m3 mtp.py build num_mtp_modules layers (each attention + MoE, with
    # eh_proj 2 x hidden -> hidden); num_nextn_predict_layers is read by neither engine's MiniMax code.
    # Parameters, bf16:
    #   embed + lm_head            2 x 1000 x 1024                                      =  2,048,000
    #   attention, 6 + 2 MTP       8 x (q 1024x16x64 + k,v 2x1024x2x64 + o 16x64x1024)   = 18,874,368
    #   dense MLPs, layers 0-1     2 x 3 x 1024 x 2048                                  = 12,582,912
    #   MoE, 4 + 2 MTP             6 x (8 x 3x1024x256 + shared 3x1024x256 + router 1024x8) = 42,516,480
    #   MTP eh_proj                2 x 2 x 1024 x 1024                                  =  4,194,304
    # KV: 6 layers x K and V x 2 KV heads x 64 = 1536 values a token, 2 bytes each.
    facts = sized_facts(minimax_m3(), None)
    assert kinds_of(facts) == {("full", "dense"): 2, ("full", "moe"): 4}
    moe = facts.moe
    assert (moe.expert_width, moe.experts, moe.top_k, moe.shared_experts, moe.dense_width) == (256, 8, 2, 1, 2048)
    assert facts.mtp_layers == 2 and "num_mtp_modules = 2" in facts.why.mtp
    assert facts.activation == "swiglu-clamped" and "swiglu_alpha = 1.702" in facts.why.activation
    assert facts.kv_bytes_per_token(2) == 1536 * 2
    params = 2_048_000 + 18_874_368 + 12_582_912 + 42_516_480 + 4_194_304
    assert facts.weight_bytes == params * 2
    undecided = "\n".join(facts.undecided)
    # the index keys the sparse layers cache are not counted in the KV, and said so with the key
    assert "sparse_attention_config's sparse layers also cache an index key" in undecided
    assert "disagree" not in undecided and "moe_layer_freq" not in undecided


def test_a_moe_layer_freq_list_without_a_dense_width_key_sizes_dense_layers_by_intermediate_size():
    # imitates MiMo-V2-Flash (sglang mimo_v2.py is_moe_layer: moe_layer_freq[layer] truthy is MoE; its dense
    # MLP is intermediate_size wide): 4 layers, [0, 1, 1, 1] -> 1 dense of 4096, 3 MoE of 8 experts x 512
    config = {
        "architectures": ["MiMoV2FlashForCausalLM"], "model_type": "mimo_v2_flash", "hidden_size": 1024,
        "num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 64,
        "moe_layer_freq": [0, 1, 1, 1], "n_routed_experts": 8, "num_experts_per_tok": 2,
        "moe_intermediate_size": 512, "intermediate_size": 4096, "vocab_size": 1000, "hidden_act": "silu",
        "torch_dtype": "bfloat16",
    }  # fmt: skip
    facts = sized_facts(config, None)
    assert kinds_of(facts) == {("full", "dense"): 1, ("full", "moe"): 3}
    assert facts.moe.dense_width == 4096 and facts.moe.expert_width == 512


@pytest.mark.parametrize("listed", [[0, 1, 2], [0, 1, 1, 1, 1, 1, 1], ["x", 1, 1, 1, 1, 1]])
def test_a_moe_layer_freq_list_init_cannot_read_leaves_the_moe_layers_undecided(listed):
    facts = sized_facts(minimax_m3(moe_layer_freq=listed), None)
    assert "MoE layers: moe_layer_freq lists kinds or a length init does not read" in facts.undecided


def nemotron_nas(blocks: list[tuple], **keys) -> dict:
    """Imitates a Nemotron-NAS (DeciLM) config: one block a layer, top-level KV heads and width null."""
    base = {
        "architectures": ["DeciLMForCausalLM"], "model_type": "nemotron-nas", "hidden_size": 1024,
        "num_hidden_layers": len(blocks), "num_attention_heads": 16, "num_key_value_heads": None,
        "intermediate_size": None, "vocab_size": 1000, "hidden_act": "silu", "torch_dtype": "bfloat16",
        "max_position_embeddings": 8192,
        "block_configs": [
            {"attention": {"n_heads_in_group": group, "no_op": group is None, "replace_with_linear": False},
             "ffn": {"ffn_mult": mult, "no_op": mult is None, "replace_with_linear": False}}
            for group, mult in blocks
        ],
    }  # fmt: skip
    return {**base, **keys}


# (n_heads_in_group or None for a no-op attention, ffn_mult or None for a no-op FFN), one a layer
NAS_BLOCKS = [(4, 2.625), (None, 1.0), (8, None), (None, None), (4, 5.25), (None, 0.5)]


def test_block_configs_give_each_layer_its_attention_kv_heads_and_ffn_width():
    # vLLM model_executor/models/nemotron_nas.py DeciLMDecoderLayer (sglang srt/models/nemotron_nas.py the same):
    # attention only where not no_op, num_attention_heads // n_heads_in_group KV heads, head dim 1024 / 16 = 64
    # (llama.py LlamaAttention); FFN only where not no_op, a gated LlamaMLP of _ffn_mult_to_intermediate_size:
    # int(2 x ffn_mult x 1024 / 3) rounded up to a multiple of 256:
    #   2.625 -> 1792, 1.0 -> 682 -> 768, 5.25 -> 3584, 0.5 -> 341 -> 512
    # KV heads 16 / 4 = 4 (layers 0, 4) and 16 / 8 = 2 (layer 2): 2 x 64 x (4 + 2 + 4) = 1280 values a token.
    # Parameters, bf16:
    #   embed + lm_head            2 x 1000 x 1024                                       =  2,048,000
    #   attention q and o          3 x 2 x 1024 x 1024                                   =  6,291,456
    #   attention k and v          2 x 1024 x 64 x (4 + 2 + 4)                           =  1,310,720
    #   MLPs                       3 x 1024 x (1792 + 768 + 3584 + 512)                  = 20,447,232
    facts = sized_facts(nemotron_nas(NAS_BLOCKS), None)
    assert kinds_of(facts) == {("full", "dense"): 2, ("none", "dense"): 2, ("full", "none"): 1, ("none", "none"): 1}
    assert facts.mlp_widths == [1792, 768, 0, 0, 3584, 512] and facts.layer_kv_heads == [4, 0, 2, 0, 4, 0]
    attention = facts.attention
    assert (attention.heads, attention.kv_heads, attention.head_dim, attention.full_layers) == (16, 2, 64, 3)
    assert "2 to 4 KV heads by layer" in attention.kind
    assert facts.kv_bytes_per_token(2) == 1280 * 2
    assert facts.weight_bytes == (2_048_000 + 6_291_456 + 1_310_720 + 20_447_232) * 2
    undecided = "\n".join(facts.undecided)
    # sglang refuses variable GQA for nemotron-nas and sizes its pool for every layer, attention or not
    assert "refuses" in undecided and "all 6 layers" in undecided and "3 counted" in undecided


def test_one_kv_head_count_across_the_blocks_is_plain_gqa():
    # Llama-3.3-Nemotron-Super's pattern: every attending layer n_heads_in_group 8 -> 16 / 8 = 2 KV heads
    facts = sized_facts(nemotron_nas([(8, 2.625), (None, 1.0), (8, 5.25)]), None)
    assert facts.attention.kind == "GQA" and facts.attention.kv_heads == 2
    assert facts.kv_bytes_per_token(2) == 2 * 2 * 2 * 64 * 2
    assert not any(line.startswith("KV heads") for line in facts.undecided)


@pytest.mark.parametrize(
    "part, field, value",
    [("attention", "replace_with_linear", True), ("ffn", "sparsify", ["x"]), ("attention", "num_sink_tokens", 4)],
)
def test_a_block_field_the_engines_do_not_read_leaves_the_layers_undecided(part, field, value):
    config = nemotron_nas(NAS_BLOCKS)
    config["block_configs"][0][part][field] = value
    undecided = "\n".join(sized_facts(config, None).undecided)
    assert f"'block_configs' sets {part}.{field}" in undecided


def test_a_block_without_its_no_op_or_width_is_counted_as_a_no_op_and_named():
    config = nemotron_nas(NAS_BLOCKS)
    del config["block_configs"][4]["attention"]["no_op"]
    config["block_configs"][0]["ffn"]["ffn_mult"] = "wide"
    facts = sized_facts(config, None)
    assert facts.layer_kinds[0] == ("full", "none") and facts.layer_kinds[4] == ("none", "dense")
    assert "'block_configs' blocks [0, 4] lack a no_op or have an n_heads_in_group or ffn_mult" in "\n".join(
        facts.undecided
    )


@pytest.mark.parametrize(
    "keys, said",
    [
        ({"num_experts": "many"}, "routed experts: num_experts = 'many'"),
        ({"moe_intermediate_size": [768]}, "expert width: moe_intermediate_size = [768]"),
        ({"num_experts_per_tok": 8.5}, "top-k: num_experts_per_tok = 8.5"),
        ({"first_k_dense_replace": 1, "moe_layer_freq": "every"}, "MoE layers: moe_layer_freq = 'every'"),
        ({"decoder_sparse_step": "2"}, "MoE layers: decoder_sparse_step = '2'"),
        ({"mlp_only_layers": 3}, "MoE layers: mlp_only_layers = '3'"),
        ({"num_nextn_predict_layers": "one"}, "MTP layers: num_nextn_predict_layers = 'one'"),
        ({"max_position_embeddings": [32768]}, "context: max_position_embeddings = [32768]"),
        ({"vocab_size": None}, "weight bytes: vocab_size not a whole number"),
        ({"num_experts": 0, "intermediate_size": None}, "weight bytes: intermediate_size not a whole number"),
    ],
)
def test_a_field_of_the_wrong_type_leaves_the_facts_it_feeds_undecided(keys, said):
    facts = sized_facts(synthetic(**keys), None)
    assert any(line.startswith(said) for line in facts.undecided), facts.undecided


def test_init_goes_on_past_a_mistyped_field_and_lists_it(tmp_path):
    checkpoint = tmp_path / "mistyped"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(json.dumps(synthetic(moe_layer_freq="every", first_k_dense_replace=1)))
    result = CliRunner().invoke(main, ["init", str(checkpoint), "--engine", "vllm", "--out", str(tmp_path / "t")])
    assert result.exit_code == 0, result.output
    assert "moe_layer_freq = 'every' is not a whole number init reads" in result.output.split("Could not decide:")[1]


@pytest.mark.parametrize("key", ["hidden_size", "num_hidden_layers", "num_attention_heads"])
def test_a_config_without_the_sizes_every_fact_needs_is_still_refused(key):
    with pytest.raises(FactsError, match=f"no positive integer '{key}'"):
        sized_facts(synthetic(**{key: [1]}), None)
