"""`porter init` on the real checkpoint configs in ../shared/model_configs (read there, never copied into the repo):
each writes a task `porter validate` accepts, in the engine's own flag names, with the MoE shape, MTP, attention and
KV figures of the config and layouts that fit the node. EXPECTED says, per file, what the config must yield (read off
the config by hand, weights bounded by the public checkpoint sizes). The hub path is tested in test_init_hub.py.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from porter.commands.cli import main
from porter.engines import flag_rules
from porter.engines.known import ENGINES
from porter.init import layout_plan
from porter.init.hardware import GIB, parse_hardware
from porter.init.weight_estimate import sized_facts
from porter.task import load_task

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT.parent / "shared" / "model_configs"
GPU, COUNT = parse_hardware("MI355X:8")


# MLA's latent (kv_lora_rank 512 + qk_rope 64) at the KV dtype in every layer, and the DSA indexer's cached keys in
# the layers that build one: index_head_dim 128 fp8 values and an fp32 scale, 132 bytes at any KV dtype (sglang
# DSATokenToKVPool, vLLM Indexer.k_cache). GLM-5.2's indexer_types name 21 "full" layers of 78 (the rest reuse an
# earlier top-k: sglang dsa_layer_skips_topk), as index_topk_freq 4 from index_skip_topk_offset 3 does for vLLM.
def DSA(layers: int, indexers: int) -> tuple[int, int]:
    return 576 * layers * 2 + 132 * indexers, 576 * layers + 132 * indexers


# file -> (architecture, quant_method, (hidden, expert width, experts, top-k, shared experts), MTP layers, attention,
#          KV bytes a token at bf16 (or at bf16 and fp8), weight GB bounds, aiter columns, sglang baseline,
#          vLLM baseline, sglang TPs)
EXPECTED = {
    "deepseek__DeepSeek-V3.json": ("DeepseekV3ForCausalLM", "fp8", (7168, 2048, 256, 8, 1), 1, "MLA",
                                   576 * 61 * 2, (660, 700), "fp8-block", "TP8", "TP8", [8, 4]),
    "deepseek__DeepSeek-V3.2.json": ("DeepseekV32ForCausalLM", "fp8", (7168, 2048, 256, 8, 1), 1, "MLA + DSA sparse",
                                     DSA(61, 61), (660, 700), "fp8-block", "TP8", "TP8", [8, 4]),
    "glm__GLM-5-FP8.json": ("GlmMoeDsaForCausalLM", "fp8", (6144, 2048, 256, 8, 1), 1, "MLA + DSA sparse",
                            DSA(78, 78), (730, 780), "fp8-block", "TP8", "TP8", [8, 4]),
    "glm__GLM-5.2-FP8.json": ("GlmMoeDsaForCausalLM", "fp8", (6144, 2048, 256, 8, 1), 1, "MLA + DSA sparse",
                              DSA(78, 21), (730, 780), "fp8-block", "TP8", "TP8", [8, 4]),
    "gpt_oss__gpt-oss-120b.json": ("GptOssForCausalLM", "mxfp4", (2880, 2880, 128, 4, 0), 0, "GQA",
                                   2 * 8 * 64 * 18 * 2, (60, 70), "fp4-weight-only", "TP8", "TP8", [8, 4, 2, 1]),
    "kimi__Kimi-K2.5.json": ("KimiK25ForConditionalGeneration", "compressed-tensors", (7168, 2048, 384, 8, 1), 0,
                             "MLA", 576 * 61 * 2, (570, 620), "int4-weight-only", "TP8", "TP8", [8, 4]),
    "kimi__Kimi-K2.6-NVFP4.json": ("KimiK25ForConditionalGeneration", "modelopt", (7168, 2048, 384, 8, 1), 0, "MLA",
                                   576 * 61 * 2, (570, 620), None, "TP8", "TP8", [8, 4]),
    "llama4__Llama-4-Scout-17B-16E-Instruct-FP8-dynamic.json": (
        "Llama4ForConditionalGeneration", "compressed-tensors", (5120, 8192, 16, 1, 1), 0, "GQA",
        # every 4th of the 48 layers is a NoPE full-attention layer, the others attend within chunks of 8192
        # (no_rope_layers empty: Llama4TextConfig's default; sglang get_hybrid_layer_ids bounds the chunked layers)
        2 * 8 * 128 * 12 * 2, (100, 120), "fp8-channel", "TP8", "TP8", [8, 4, 2, 1]),
    "minimax__MiniMax-M2.7.json": ("MiniMaxM2ForCausalLM", "fp8", (3072, 1536, 256, 8, 0), 3, "GQA",
                                   2 * 8 * 128 * 62 * 2, (220, 250), "fp8-block", "TP4 x DP2", "TP8 + EP", [4, 2]),
    "qwen3_5__Qwen3.5-397B-A17B.json": ("Qwen3_5MoeForConditionalGeneration", "none", (4096, 1024, 512, 10, 1), 1,
                                        "GQA", 2 * 2 * 256 * 15 * 2, (780, 820), "none", "TP8", "TP8", [8, 4]),
    "qwen3_moe__Qwen3-235B-A22B-FP8.json": ("Qwen3MoeForCausalLM", "fp8", (4096, 1536, 128, 8, 0), 0, "GQA",
                                            2 * 4 * 128 * 94 * 2, (225, 245), "fp8-block", "TP4 x DP2", "TP8 + EP",
                                            [4, 2]),
    "qwen3_next__Qwen3-Next-80B-A3B.json": ("Qwen3NextForCausalLM", "none", (2048, 512, 512, 10, 1), 0, "GQA",
                                            2 * 2 * 256 * 12 * 2, (150, 170), "none", "TP8", "TP8", [8, 4, 2, 1]),
}  # fmt: skip

needs_shared = pytest.mark.skipif(not CONFIGS.is_dir(), reason="../shared/model_configs is not here")


def test_every_shared_config_has_a_row():
    if not CONFIGS.is_dir():
        pytest.skip("../shared/model_configs is not here")
    assert sorted(path.name for path in CONFIGS.glob("*.json")) == sorted(EXPECTED)


@needs_shared
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_facts_of_each_config(name):
    architecture, method, shape, mtp, attention, kv, (low, high), tune_key, *_ = EXPECTED[name]
    facts = sized_facts(json.loads((CONFIGS / name).read_text()), None)
    assert (facts.architecture, facts.quantization.method, facts.mtp_layers) == (architecture, method, mtp)
    moe = facts.moe
    assert (moe.hidden, moe.expert_width, moe.experts, moe.top_k, moe.shared_experts) == shape
    assert facts.attention.kind == attention
    bf16, fp8 = kv if isinstance(kv, tuple) else (kv, kv / 2)
    assert facts.kv_bytes_per_token(2) == bf16 and facts.kv_bytes_per_token(1) == fp8
    assert low * 1e9 <= facts.weight_bytes <= high * 1e9
    assert "ESTIMATE" in facts.why.weights
    assert layout_plan.quant_key(facts, GPU)[0] == tune_key


def run_init(tmp_path: Path, name: str, engine: str) -> tuple[dict, str]:
    """porter init, then porter validate, through the CLI (in this process: 24 pairs of interpreters cost minutes)."""
    checkpoint = tmp_path / Path(name).stem
    checkpoint.mkdir()
    (checkpoint / "config.json").write_bytes((CONFIGS / name).read_bytes())
    out = tmp_path / f"{engine}.yaml"
    runner = CliRunner()
    result = runner.invoke(
        main, ["init", str(checkpoint), "--engine", engine, "--hardware", "MI355X:8", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    valid = runner.invoke(main, ["validate", str(out)])
    assert valid.exit_code == 0, valid.output
    return yaml.safe_load(out.read_text()), result.output


@needs_shared
@pytest.mark.parametrize("engine", sorted(ENGINES))
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_init_writes_a_valid_task_in_the_engines_names(tmp_path, name, engine):
    *_, tune_key, sglang_baseline, vllm_baseline, sglang_tps = EXPECTED[name]
    declared = ENGINES[engine]
    task, report = run_init(tmp_path, name, engine)
    flags, tunables = task["serve"]["flags"], task["serve"]["tunables"]
    assert task["serve"]["engine"] == engine and task["serve"]["command"] == declared.launch
    assert declared.tensor_parallel[0] in flags and declared.data_parallel[0] in flags
    assert declared.kv_cache_dtype in flags and declared.memory_fraction in flags
    others = {flag for other in ENGINES.values() if other is not declared for flag in other.topology_flags()}
    assert not (set(flags) & (others - declared.topology_flags())), "another engine's flag names"
    baseline = sglang_baseline if engine == "sglang" else vllm_baseline
    assert f"baseline {baseline}:" in report
    if engine == "sglang":
        assert tunables[declared.tensor_parallel[0]] == sglang_tps
    # speculative decoding exactly when the checkpoint has MTP layers, in the engine's own draft spelling
    assert bool(set(flags) & set(declared.speculative_flags)) == bool(EXPECTED[name][3])
    # relative targets by default
    assert task["checks"]["throughput"]["target_tok_s_per_node"] == "max"
    assert all(check["reference"] == "first_healthy" for check in task["checks"]["quality"])
    if engine == "sglang" and tune_key:
        assert "gemm_moe_tune.py" in task["tune"][0]["command"] and task["tune"][0]["workdir"] == "/sgl-workspace/aiter"
    else:
        assert task["tune"] == []


@needs_shared
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_layout_in_the_tunables_fits_the_node(tmp_path, name):
    """Recomputed here from the written task: each TP x DP it lets the agent try holds its weights and the headroom."""
    task, _ = run_init(tmp_path, name, "sglang")
    facts = sized_facts(json.loads((CONFIGS / name).read_text()), None)
    flags, tunables = task["serve"]["flags"], task["serve"]["tunables"]
    usable = GPU.memory_gib * GIB * flags["mem-fraction-static"]
    load = task["checks"]["throughput"]["workload"]
    need = layout_plan.HEADROOM_REQUESTS * (load["input_tokens"] + load["output_tokens"])
    heads = facts.attention.kv_heads
    for tp in tunables["tp-size"]:
        share = 1 if facts.attention.kv_lora_rank else math.ceil(heads / tp) / heads  # MLA's latent on every rank
        assert facts.weight_bytes / tp + need * facts.kv_bytes_per_token(1) * share <= usable, f"TP{tp}"


@needs_shared
def test_the_tuning_rows_cover_every_padded_m_at_each_share(tmp_path):
    from porter.upstream_facts import AITER_FMOE_UNTUNED_COLUMNS, aiter_padded_m

    task, _ = run_init(tmp_path, "glm__GLM-5.2-FP8.json", "sglang")
    command = task["tune"][0]["command"]
    words = command.split(" > ")[0].split()[2:]
    header, rows = (
        words[0].split(","),
        [dict(zip(words[0].split(","), row.split(","), strict=True)) for row in words[1:]],
    )
    assert header == AITER_FMOE_UNTUNED_COLUMNS
    largest = task["serve"]["flags"]["chunked-prefill-size"]
    wanted = {aiter_padded_m(m) for m in range(1, largest + 1)}
    shapes = {(row["inter_dim"], row["expert"], row["topk"]) for row in rows}
    # TP8 and TP4 shares of the 2048 width, the shared expert fused (257/9) or not, and whole experts under EP8
    assert {("256", "256", "8"), ("256", "257", "9"), ("512", "256", "8"), ("2048", "32", "8")} <= shapes
    for shape in shapes:
        assert wanted == {int(row["token"]) for row in rows if (row["inter_dim"], row["expert"], row["topk"]) == shape}
    assert {row["q_type"] for row in rows} == {"QuantType.per_1x128"}
    assert {row["q_dtype_w"] for row in rows} == {"torch.float8_e4m3fn"}  # gfx950's fp8 in aiter


def test_a_task_written_by_init_loads_with_its_comments(tmp_path):
    """The writer alone (no shared configs): a tiny MoE config gives a task the loader reads, with comments."""
    checkpoint = tmp_path / "tiny"
    checkpoint.mkdir()
    config = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 1024,
              "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 8, "kv_lora_rank": 128,
              "qk_rope_head_dim": 32, "qk_nope_head_dim": 64, "v_head_dim": 64, "q_lora_rank": 256,
              "moe_intermediate_size": 512, "n_routed_experts": 16, "num_experts_per_tok": 2, "n_shared_experts": 1,
              "first_k_dense_replace": 1, "intermediate_size": 2048, "vocab_size": 1000,
              "num_nextn_predict_layers": 1, "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}  # fmt: skip
    (checkpoint / "config.json").write_text(json.dumps(config))
    (checkpoint / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 123456789}}))
    out = tmp_path / "task.yaml"
    result = subprocess.run(
        [sys.executable, "-m", "porter", "init", str(checkpoint), "--engine", "vllm", "--hardware", "MI300X:4",
         "--out", str(out)], capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "weights: 0.1 GB  [model.safetensors.index.json metadata.total_size]" in result.stdout
    text = out.read_text()
    assert text.startswith("# Written by `porter init") and "   # " in text
    task = load_task(out, environ={})
    assert task.serve.flags["tensor-parallel-size"] == 4 and task.hardware.gpu == "MI300X"
    assert task.serve.tunables["speculative-config"][1] == '{"method": "mtp", "num_speculative_tokens": 1}'


TWIN = ROOT / "sandboxes" / "twin"
PROFILE = TWIN / "init_profile.yaml"


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_the_twin_tasks_are_what_init_writes_on_the_twins_checkpoint(tmp_path, engine):
    """tasks/twin_corvid3_<engine>.yaml is porter init's output on the twin's own checkpoint with the twin profile
    (its header says so): regenerated here, it must match, host command paths read from each file's folder."""
    committed = ROOT / "tasks" / f"twin_corvid3_{engine}.yaml"
    if not (TWIN / "families" / "corvid3.py").is_file() or not committed.is_file():
        pytest.skip("the twin's corvid3 family (branch second-family) is not here")
    checkpoint = tmp_path / "corvid-v3-fp8"
    made = subprocess.run([sys.executable, str(TWIN / "make_checkpoint.py"), str(checkpoint), "--family", "corvid3"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert made.returncode == 0, made.stderr
    out = tmp_path / "tasks" / committed.name
    out.parent.mkdir()
    words = ["init", str(checkpoint), "--engine", engine, "--hardware", "MI355X:8", "--profile", str(PROFILE)]
    result = CliRunner().invoke(main, [*words, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert committed.read_text().startswith("# Written by `porter init")

    def resolved(path: Path) -> dict:
        data = yaml.safe_load(path.read_text())
        sandbox = data["sandbox"]
        for argv in [sandbox["local_setup"], sandbox["image_build"], *(s["command"] for s in sandbox["services"])]:
            argv[0] = str((path.parent / argv[0]).resolve())
        return data

    assert resolved(out) == resolved(committed)


# file -> what init does with sglang's DP attention: offered (an architecture sglang 0.5.20's --enable-dp-attention
# help names: "DeepSeek-V2 and Qwen 2/3 MoE models"), off with the recipe's reason (DSA hangs on ROCm: InferenceX
# glm5.2_fp4_mi355x_sglang_mtp.sh at a3b8982c), off for want of a one-replica layout, or undecided (not named).
DP_ATTENTION = {
    "deepseek__DeepSeek-V3.json": "offered",
    "deepseek__DeepSeek-V3.2.json": "hangs on ROCm",
    "glm__GLM-5.2-FP8.json": "hangs on ROCm",
    "qwen3_moe__Qwen3-235B-A22B-FP8.json": "no one-replica layout fits",
    "kimi__Kimi-K2.5.json": "DP attention: sglang 0.5.20's help names",
}


@needs_shared
@pytest.mark.parametrize("name", sorted(DP_ATTENTION))
def test_dp_attention_is_offered_only_where_upstream_runs_it(tmp_path, name):
    task, report = run_init(tmp_path, name, "sglang")
    flags, tunables = task["serve"]["flags"], task["serve"]["tunables"]
    switch = ENGINES["sglang"].dp_attention
    if DP_ATTENTION[name] != "offered":
        assert switch not in tunables and DP_ATTENTION[name] in report
        undecided = report.split("Could not decide:")[1]
        assert (DP_ATTENTION[name] in undecided) == DP_ATTENTION[name].startswith("DP attention")
        return
    assert tunables[switch] == [None, True] and flags[switch] is None and 8 in tunables["dp-size"]
    with_it = {"tp-size": 8, "dp-size": 8, switch: True}
    assert flag_rules.problem(load_task(tmp_path / "sglang.yaml", environ={}), with_it) is None
    assert "0.5.23 on: --attn-dp-size 8" in (tmp_path / "sglang.yaml").read_text()
    (tmp_path / "vllm").mkdir()
    assert switch not in run_init(tmp_path / "vllm", name, "vllm")[0]["serve"]["tunables"]
