"""`porter init` on the seven checkpoint folders of ../shared/model_configs/checkpoints (read there, never copied) and
on configs written here for the kinds those folders lack: every fact right, or listed under "Could not decide".

Each expected figure is derived by hand below from the config's keys and the model's modeling code (named in the
comment), not from porter's code; weights within 10% of that derivation (norms, biases and the vision tower are not
counted by either). The synthetic configs imitate a family's keys (named beside each) without copying a file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from porter.commands.cli import main
from porter.engines.known import ENGINES
from porter.init import layout_plan
from porter.init.checkpoint_facts import FactsError
from porter.init.hardware import parse_hardware
from porter.init.layout_plan import tp_refusal
from porter.init.weight_estimate import sized_facts

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINTS = ROOT.parent / "shared" / "model_configs" / "checkpoints"
needs_shared = pytest.mark.skipif(not CHECKPOINTS.is_dir(), reason="../shared/model_configs/checkpoints is not here")
GB = 1e9
# (params of the MLA attention of a DeepSeek-V3 layer: q_a 7168x1536, q_b 1536 x heads x 192, kv_a 7168x576,
#  kv_b 512 x heads x 256, o heads x 128 x 7168; modeling_deepseek.py DeepseekV3Attention)
MLA = {
    heads: 7168 * 1536 + 1536 * heads * 192 + 7168 * 576 + 512 * heads * 256 + heads * 128 * 7168 for heads in (64, 128)
}
NVFP4 = 0.5 + 1 / 16  # 4 bits and one fp8 scale a 16 (ModelOpt NVFP4)

# folder -> (layers by kind, (expert dim, width, experts, top-k, shared, shared width) or None, KV bytes a token at
#            bf16, weight bytes derived, expert bytes a weight or None)
EXPECTED = {
    # deepseek_v3, 61 layers, first_k_dense_replace 3: 3 dense + 58 MoE, all MLA; MTP layer 61. NVFP4 in
    # hf_quant_config.json (exclude_modules: every layer's q/kv projections and model.layers.61*, the MTP layer).
    # KV: kv_lora_rank 512 + qk_rope 64 a layer. Weights: 58 x 256 experts x 3 x 7168 x 2048 at NVFP4; the MTP
    # layer's 256 experts bf16; 2 x 129280 x 7168 embeddings bf16; attention and dense/shared MLPs (~1.4e10) at NVFP4.
    "deepseek__DeepSeek-V3.1-NVFP4": (
        {("full", "dense"): 3, ("full", "moe"): 58}, (7168, 2048, 256, 8, 1, 2048), 61 * 576 * 2,
        58 * 256 * 3 * 7168 * 2048 * NVFP4 + 256 * 3 * 7168 * 2048 * 2 + 2 * 129280 * 7168 * 2
        + (62 * MLA[128] + 3 * 3 * 7168 * 18432 + 58 * 3 * 7168 * 2048) * NVFP4, NVFP4),
    # kimi_k25 wrapper, text_config deepseek_v3: 61 layers, 1 dense + 60 MoE (384 experts, top-8, 1 shared), 64 heads;
    # quantization_config modelopt NVFP4 whose `ignore` names language_model.model.layers.0*, each layer's
    # self_attn* and shared_experts*: those stay bf16, the routed experts NVFP4.
    "kimi__Kimi-K2.7-Code-NVFP4": (
        {("full", "dense"): 1, ("full", "moe"): 60}, (7168, 2048, 384, 8, 1, 2048), 61 * 576 * 2,
        60 * 384 * 3 * 7168 * 2048 * NVFP4 + 2 * 163840 * 7168 * 2
        + (61 * MLA[64] + 3 * 7168 * 18432 + 60 * 3 * 7168 * 2048) * 2, NVFP4),
    # nemotron_h: hybrid_override_pattern, one block a character (sglang srt/configs/nemotron_h.py): 40 M (Mamba-2),
    # 40 E (latent MoE), 8 * (attention). KV: 8 layers x 2 x 2 KV heads x head_dim 128. MoE (modeling_nemotron_h.py
    # NemotronHMoE): 512 experts on moe_latent_size 1024 (fc1_latent_proj / fc2_latent_proj from hidden 4096), up and
    # down only (relu2, not gated), shared expert 5376 wide on the hidden state. Mamba-2 (mamba_mixer2.py): in_proj
    # 4096 -> 2 x 128 x 64 + 2 x 8 x 128 + 128, out_proj 8192 -> 4096. FP8 per tensor (hf_quant_config.json) on
    # every Linear; the MTP layer (*E) one attention + one MoE.
    "nemotron_h__Nemotron-3-Super-120B-A12B-FP8": (
        {("mamba", "none"): 40, ("none", "moe"): 40, ("full", "none"): 8}, (1024, 2688, 512, 22, 1, 5376),
        8 * 2 * 2 * 128 * 2,
        41 * (512 * 2 * 1024 * 2688 + 2 * 4096 * 1024 + 2 * 4096 * 5376 + 4096 * 512)
        + 40 * (4096 * (2 * 8192 + 2 * 8 * 128 + 128) + 8192 * 4096) + 9 * (2 * 4096 * 4096 + 2 * 4096 * 256)
        + 2 * 4096 * 4096 + 131072 * 4096 * (2 + 1), 1.0),
    # nemotron_h dense: 118 characters, 54 M, 54 - (MLP up/down, relu2, intermediate 32768), 10 * (64 heads, 8 KV
    # heads, attention_head_dim 128). Mamba-2: 256 heads x 64, 8 groups x state 256. bf16.
    "nemotron_h__Nemotron-H-56B-Base-8K": (
        {("mamba", "none"): 54, ("none", "dense"): 54, ("full", "none"): 10}, None, 10 * 2 * 8 * 128 * 2,
        2 * (54 * 2 * 8192 * 32768 + 54 * (8192 * (2 * 16384 + 2 * 8 * 256 + 256) + 16384 * 8192)
             + 10 * (2 * 8192 * 8192 + 2 * 8192 * 1024) + 2 * 131072 * 8192), None),
    # qwen3_5_moe wrapper: text_config layer_types 30 linear_attention + 10 full_attention, every layer MoE (256
    # experts, top-8, one shared expert of 512); full attention 16 heads, 2 KV heads, head_dim 256; bf16 ~35B params.
    "qwen3_5__Qwen3.5-35B-A3B": (
        {("linear", "moe"): 30, ("full", "moe"): 10}, (2048, 512, 256, 8, 1, 512), 10 * 2 * 2 * 256 * 2, 35e9 * 2, 2.0),
    # qwen3_5 dense wrapper: 48 linear + 16 full (24 heads, 4 KV heads, head_dim 256, output gate). ModelOpt
    # MIXED_PRECISION: quantized_layers name the MLPs and lm_head W4A16_NVFP4 and the attention FP8; embeddings and
    # the MTP layer (exclude mtp*) bf16. MLP 64 x 3 x 5120 x 17408; linear attention 48 x (5120 x (2 x 2048 + 2 x 6144
    # + 2 x 48) + 6144 x 5120); full attention 16 x (2 x 5120 x 6144 + 2 x 5120 x 1024 + 6144 x 5120).
    "qwen3_5__Qwen3.6-27B-NVFP4": (
        {("linear", "dense"): 48, ("full", "dense"): 16}, None, 16 * 2 * 4 * 256 * 2,
        (64 * 3 * 5120 * 17408 + 248320 * 5120) * NVFP4 + 248320 * 5120 * 2
        + 48 * (5120 * (4096 + 12288 + 96) + 6144 * 5120) + 16 * (2 * 5120 * 6144 + 2 * 5120 * 1024 + 6144 * 5120)
        + 2 * (2 * 5120 * 6144 + 2 * 5120 * 1024 + 6144 * 5120 + 3 * 5120 * 17408 + 2 * 5120 * 5120), None),
    # qwen3_vl_moe wrapper: text_config 94 full-attention MoE layers (128 experts, top-8, no shared expert), 64 heads,
    # 4 KV heads, head_dim 128; bf16, 235B parameters.
    "qwen3_vl__Qwen3-VL-235B-A22B-Instruct": (
        {("full", "moe"): 94}, (4096, 1536, 128, 8, 0, 0), 94 * 2 * 4 * 128 * 2, 235e9 * 2, 2.0),
}  # fmt: skip


def read(folder: Path):
    quant = folder / "hf_quant_config.json"
    config = json.loads((folder / "config.json").read_text())
    return sized_facts(config, None, json.loads(quant.read_text()) if quant.is_file() else None)


@needs_shared
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_facts_of_each_checkpoint(name):
    kinds, moe, kv, weights, expert_bytes = EXPECTED[name]
    facts = read(CHECKPOINTS / name)
    counted: dict[tuple, int] = {}
    for kind in facts.layer_kinds:
        counted[kind] = counted.get(kind, 0) + 1
    assert counted == kinds
    if moe is None:
        assert facts.moe is None
    else:
        shape = facts.moe
        assert (shape.hidden, shape.expert_width, shape.experts, shape.top_k, shape.shared_experts) == moe[:5]
        assert shape.shared_width == moe[5] and f"{expert_bytes:.3f} bytes" in facts.expert_dtype
    assert facts.kv_bytes_per_token(2) == kv
    assert abs(facts.weight_bytes - weights) <= 0.10 * weights, f"{facts.weight_bytes / GB:.1f} vs {weights / GB:.1f}"
    # nothing in these configs is left unread but what the estimate and the vision tower say about themselves
    assert [line for line in facts.undecided if "estimate" not in line and "vision" not in line] == []


@needs_shared
@pytest.mark.parametrize("name", ["deepseek__DeepSeek-V3.1-NVFP4", "kimi__Kimi-K2.7-Code-NVFP4"])
def test_an_mla_head_is_as_wide_as_its_query_and_key(name):
    # deepseek_v3 MLA: qk_nope_head_dim 128 + qk_rope_head_dim 64 (sglang deepseek_v2.py: qk_head_dim), where
    # hidden_size / num_attention_heads (7168 / 128 = 56, 7168 / 64 = 112) names no head of the model
    assert read(CHECKPOINTS / name).attention.head_dim == 192


@needs_shared
@pytest.mark.parametrize("engine", sorted(ENGINES))
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_checkpoint_gives_a_valid_task_with_layouts_the_engine_accepts(tmp_path, name, engine):
    out = tmp_path / "task.yaml"
    runner = CliRunner()
    args = ["init", str(CHECKPOINTS / name), "--engine", engine, "--hardware", "MI355X:8", "--out", str(out)]
    result = runner.invoke(main, args)
    assert result.exit_code == 0, result.output
    assert runner.invoke(main, ["validate", str(out)]).exit_code == 0
    task, facts = yaml.safe_load(out.read_text()), read(CHECKPOINTS / name)
    for tp in task["serve"]["tunables"][ENGINES[engine].tensor_parallel[0]]:
        assert tp_refusal(facts, tp) is None and facts.attention.heads % tp == 0
    if facts.moe and not facts.gated:  # relu2 experts: aiter tunes gated SiLU/SwiGLU only, and init says so
        assert task["tune"] == [] and "relu2 (not gated)" in result.output


def synthetic(**keys) -> dict:
    """A small GQA MoE in Qwen3-MoE's spelling (transformers' Qwen3MoeConfig keys), overridden by `keys`."""
    base = {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
        "num_hidden_layers": 8, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
        "num_experts": 64, "num_experts_per_tok": 8, "moe_intermediate_size": 768, "intermediate_size": 6144,
        "vocab_size": 32000, "max_position_embeddings": 32768, "torch_dtype": "bfloat16", "hidden_act": "silu",
    }  # fmt: skip
    return {**base, **keys}


def undecided_text(config: dict) -> str:
    return "\n".join(sized_facts(config, None).undecided)


def test_a_per_expert_dtype_is_undecided_not_the_checkpoints():
    # an FP8 checkpoint whose experts are FP4 under a key of their own (imitating mixed FP8/FP4 MoE releases)
    quant = {"quant_method": "fp8", "weight_block_size": [128, 128], "experts_quant_algo": "NVFP4"}
    text = undecided_text(synthetic(quantization_config=quant))
    assert "expert dtype and weight bytes" in text and "experts_quant_algo" in text


def test_top_k_spelled_twice_or_not_at_all_is_undecided_never_one():
    both = sized_facts(synthetic(moe_topk=4), None)
    assert "top-k: num_experts_per_tok = 8, moe_topk = 4 disagree" in "\n".join(both.undecided)
    config = synthetic()
    del config["num_experts_per_tok"]
    none = sized_facts(config, None)
    assert none.moe.top_k == 0 and any(line.startswith("top-k: none of") for line in none.undecided)


def test_non_gated_experts_are_priced_with_two_matrices_and_not_tuned_as_silu(tmp_path):
    # imitates nemotron_h's MoE (up -> relu2 -> down; sglang srt/models/nemotron_h.py) on a pattern of 4 E and 2 *
    config = synthetic(model_type="nemotron_h", hybrid_override_pattern="EE*EE*", num_hidden_layers=6,
                       n_routed_experts=16, mlp_hidden_act="relu2", tie_word_embeddings=True)  # fmt: skip
    del config["num_experts"], config["hidden_act"]
    facts = sized_facts(config, None)
    # 4 MoE layers x 16 experts x 2 x 2048 x 768, routers 4 x 2048 x 16, 2 attention layers (32 x 128 q and o,
    # 2 x 4 x 128 k and v from 2048), 32000 x 2048 tied embeddings; bf16
    params = 4 * (16 * 2 * 2048 * 768 + 2048 * 16) + 2 * (2 * 2048 * 4096 + 2 * 2048 * 512) + 32000 * 2048
    assert facts.weight_bytes == params * 2 and facts.activation == "relu2 (not gated)"
    checkpoint = tmp_path / "relu2-moe"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(json.dumps(config))
    result = CliRunner().invoke(main, ["init", str(checkpoint), "--engine", "sglang", "--out", str(tmp_path / "t")])
    assert result.exit_code == 0 and "activation relu2 (not gated)" in result.output
    assert yaml.safe_load((tmp_path / "t").read_text())["tune"] == []


def test_a_tp_that_does_not_divide_the_heads_is_never_proposed(tmp_path):
    # 20 attention heads, 4 KV heads: TP8 shards neither evenly (both engines assert heads % tp == 0)
    checkpoint = tmp_path / "twenty-heads"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(json.dumps(synthetic(num_attention_heads=20)))
    out = tmp_path / "task.yaml"
    result = CliRunner().invoke(main, ["init", str(checkpoint), "--engine", "vllm", "--out", str(out)])
    assert result.exit_code == 0, result.output
    task = yaml.safe_load(out.read_text())
    assert 8 not in task["serve"]["tunables"]["tensor-parallel-size"]
    assert task["serve"]["flags"]["tensor-parallel-size"] == 4
    assert "not TP8 (20 attention heads do not shard evenly over 8 ranks" in result.output


def init(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": path, "HF_HUB_OFFLINE": "1", "HOME": str(cwd)}
    command = [sys.executable, "-m", "porter", "init", *args, "--engine", "sglang"]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=cwd, env=env)


@pytest.mark.parametrize("layers", ["1" + "0" * 300, "1" + "0" * 4000])
def test_absurd_numbers_are_one_line(tmp_path, layers):
    checkpoint = tmp_path / "huge"
    checkpoint.mkdir()
    text = json.dumps(synthetic(num_hidden_layers=1)).replace(
        '"num_hidden_layers": 1', f'"num_hidden_layers": {layers}'
    )
    (checkpoint / "config.json").write_text(text)
    result = init([str(checkpoint)], tmp_path)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert (
        "num_hidden_layers is an integer of" in result.stderr and "no checkpoint has a size that large" in result.stderr
    )


def test_a_mistyped_local_path_and_malformed_hub_ids_are_refused(tmp_path):
    (tmp_path / "ckpts").mkdir()
    typo = init(["ckpts/Qwen3-32B-typo"], tmp_path)
    rooted = init(["/no-such-checkpoint"], tmp_path)
    for result in (typo, rooted):
        assert result.returncode == 2 and "no such checkpoint directory" in result.stderr, result.stderr
    for reference in ("org/..", "org/", "org//name", "org/na--me", "org/-name"):
        result = init([reference], tmp_path)
        assert result.returncode == 2 and result.stderr.count("\n") == 1, (reference, result.stderr)
        assert "neither a checkpoint directory nor a hub repository id" in result.stderr, reference


def test_an_architecture_the_pinned_engine_does_not_register_is_warned_and_the_task_says_so(tmp_path):
    checkpoint = tmp_path / "made-up"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(json.dumps(synthetic(architectures=["Zephyrine9ForCausalLM"])))
    out = tmp_path / "task.yaml"
    result = init([str(checkpoint), "--out", str(out)], tmp_path)
    assert result.returncode == 0, result.stderr
    line = "sglang 0.5.20 registers no architecture named 'Zephyrine9ForCausalLM'"
    assert f"porter: warning: {line}" in result.stderr and f"# WARNING: {line}" in out.read_text()


def test_a_dollar_in_a_checkpoint_path_never_reaches_the_task_loader(tmp_path):
    checkpoint = tmp_path / "ck${HOME}pt"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(json.dumps(synthetic()))
    result = init([str(checkpoint), "--out", str(tmp_path / "task.yaml")], tmp_path)
    assert result.returncode == 2 and "a checkpoint path with `$` in it" in result.stderr
    assert not (tmp_path / "task.yaml").exists()


@pytest.mark.parametrize("keys", [{"num_hidden_layers": 10**12}, {"num_nextn_predict_layers": 10**12}])
def test_a_layer_count_no_checkpoint_has_is_refused_before_layers_are_listed(keys):
    with pytest.raises(FactsError, match="no checkpoint has that many"):
        sized_facts(synthetic(**keys), None)


def test_a_block_list_sets_the_layer_count_as_the_engine_takes_it():
    # imitates newer nemotron_h configs: layers_block_type (sglang's canonical field) and num_hidden_layers null
    blocks = ["mamba", "moe", "mamba", "attention", "mlp", "moe"]
    config = synthetic(model_type="nemotron_h", layers_block_type=blocks, num_hidden_layers=None, n_routed_experts=8,
                       mlp_hidden_act="relu2", mamba_num_heads=16, mamba_head_dim=64, n_groups=2,
                       ssm_state_size=64)  # fmt: skip
    facts = sized_facts(config, None)
    assert facts.layers == 6 and facts.attention.full_layers == 1 and facts.moe.moe_layers == 2
    assert facts.kv_bytes_per_token(2) == 2 * 4 * 128 * 2


def test_a_checkpoints_strings_never_reach_the_task_loader_as_variables(tmp_path):
    # a hostile config: ${VAR} in the strings init copies into the task (dtype, quantization method)
    checkpoint = tmp_path / "hostile"
    checkpoint.mkdir()
    quant = {"quant_method": "${PORTER_TEST_SECRET}"}
    (checkpoint / "config.json").write_text(
        json.dumps(synthetic(torch_dtype="${PORTER_TEST_SECRET}", quantization_config=quant))
    )
    out = tmp_path / "task.yaml"
    assert init([str(checkpoint), "--out", str(out)], tmp_path).returncode == 0
    assert "${PORTER_TEST_SECRET" not in out.read_text()
    path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": path, "PORTER_TEST_SECRET": "hunter2-not-real"}
    valid = subprocess.run([sys.executable, "-m", "porter", "validate", str(out)], capture_output=True, text=True,
                           timeout=120, env=env)  # fmt: skip
    assert "hunter2-not-real" not in valid.stdout + valid.stderr


def test_a_config_linked_out_of_the_checkpoint_folder_is_refused(tmp_path):
    (tmp_path / "outside.json").write_text(json.dumps(synthetic()))
    checkpoint = tmp_path / "linked"
    checkpoint.mkdir()
    (checkpoint / "config.json").symlink_to(tmp_path / "outside.json")
    result = init([str(checkpoint)], tmp_path)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "a link out of the checkpoint's folder" in result.stderr


@pytest.mark.parametrize("key", ["text_config", "language_config", "llm_config"])
def test_the_language_model_is_read_inside_each_wrapper(key):
    # imitates multimodal wrappers: transformers' Qwen3-VL (text_config), DeepSeek-VL2 (language_config), InternVL
    # (llm_config); the wrapper's own top level has no hidden_size
    facts = sized_facts({"architectures": ["Wrapped"], "model_type": "wrapper", key: synthetic()}, None)
    assert facts.layers == 8 and facts.moe.experts == 64 and facts.kv_bytes_per_token(2) == 8 * 2 * 4 * 128 * 2


def test_experts_the_exclude_list_keeps_unquantized_are_tuned_unquantized():
    # an fp8 block checkpoint whose exclude list (modules_to_not_convert, as GLM's) names every expert
    quant = {"quant_method": "fp8", "weight_block_size": [128, 128], "modules_to_not_convert": ["re:.*mlp\\.experts.*"]}
    facts = sized_facts(synthetic(quantization_config=quant), None)
    assert facts.expert_dtype.startswith("2.000 bytes") and "unquantized" in facts.expert_dtype
    assert layout_plan.quant_key(facts, parse_hardware("MI355X:8")[0])[0] == "none"


def test_an_activation_no_gated_family_uses_leaves_the_gating_undecided():
    # relu2 outside nemotron_h: whether its MLP has a gate projection is not known, so the weights are not claimed
    assert "whether the MLP is gated: hidden_act = 'relu2'" in undecided_text(synthetic(hidden_act="relu2"))


def init_report(tmp_path, config: dict) -> tuple[str, dict]:
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(json.dumps(config))
    result = CliRunner().invoke(main, ["init", str(checkpoint), "--engine", "sglang", "--out", str(tmp_path / "t")])
    assert result.exit_code == 0, result.output
    return result.output, yaml.safe_load((tmp_path / "t").read_text())


def test_a_fact_an_unread_key_could_change_is_stated_undecided_not_as_a_figure(tmp_path):
    # a made-up key in the shape of a per-expert storage key (as DeepSeek-V4's expert_dtype was before init read it):
    # its name says it sets a dtype, so the expert dtype and the weight bytes are open; the layers, the attention and
    # the KV bytes are not, and keep their figures
    report, task = init_report(tmp_path, synthetic(expert_storage_dtype="int3"))
    facts = sized_facts(synthetic(expert_storage_dtype="int3"), None)
    assert facts.open == {"expert dtype", "weights"}
    assert "  expert dtype: undecided (2.000 bytes a weight" in report and "  weights: undecided (" in report
    assert "(by the weights as far as init read: undecided)" in (tmp_path / "t").read_text()  # the TP comment
    assert "  layers: 8 full + moe" in report and "  KV per token: 16.0 KiB bf16" in report  # 8 x 2 x 4 x 128 x 2 B
    # the MoE tuning rows would tune a dtype the engine may never run: none, and the report says why
    assert task["tune"] == [] and "no MoE tuning rows: the expert dtype undecided" in report


def test_a_missing_top_k_is_printed_undecided_never_as_top_0(tmp_path):
    config = synthetic()
    del config["num_experts_per_tok"]
    report, task = init_report(tmp_path, config)
    assert "top-k undecided" in report and "top-0" not in report and task["tune"] == []


def test_a_dsa_indexer_shared_by_name_only_leaves_the_kv_undecided():
    # GLM-5.2's keys on 8 layers: indexer_types says which layers build an indexer (sglang reads it); vLLM reads only
    # index_topk_freq from index_skip_topk_offset. Here they agree (layers 0, 1, 2 and 6: max(layer - 2, 0) % 4 == 0),
    # then indexer_types alone drops layer 6's: the two engines would cache different indexer bytes
    dsa = synthetic(kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, index_topk=2048, index_head_dim=128,
                    index_topk_freq=4, index_skip_topk_offset=3)  # fmt: skip
    agreed = ["full", "full", "full", "shared", "shared", "shared", "full", "shared"]
    facts = sized_facts({**dsa, "indexer_types": agreed}, None)
    assert facts.kv_bytes_per_token(2) == 8 * 576 * 2 + 4 * 132 and "KV per token" not in facts.open
    moved = sized_facts({**dsa, "indexer_types": agreed[:6] + ["shared", "shared"]}, None)
    assert "KV per token" in moved.open and moved.kv_bytes_per_token(2) == 8 * 576 * 2 + 4 * 132  # the larger


def test_keys_that_size_nothing_leave_no_fact_open(tmp_path):
    # epsilons, rotary bases, scales and routing knobs (MiMo-V2's, DeepSeek-V4's, Kimi-K3's names) size no layer, head,
    # expert or cache; a per-layer-input vocabulary without its hidden size (Gemma 4's, hidden_size_per_layer_input 0)
    # feeds no layer; a config with no dtype runs at 2 bytes a weight whichever dtype the engine picks
    config = synthetic(layernorm_epsilon=1e-5, swa_rope_theta=10000, attention_value_scale=0.707,
                       moe_router_scaling_factor=3.0, use_grouped_topk=True, vocab_size_per_layer_input=262144,
                       hidden_size_per_layer_input=0)  # fmt: skip
    del config["torch_dtype"]
    facts = sized_facts(config, None)
    assert facts.open == {"dtype"} and facts.weight_bytes == sized_facts(synthetic(), None).weight_bytes
    report, _ = init_report(tmp_path, config)
    assert "dtype undecided (2 bytes a weight)" in report and "a key init does not read" not in report
    assert "hidden_size_per_layer_input" in "\n".join(
        sized_facts({**config, "hidden_size_per_layer_input": 256}, None).undecided
    )
