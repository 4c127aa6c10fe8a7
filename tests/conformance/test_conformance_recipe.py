"""The real sglang task against the published recipe it starts from, both resolved by sglang itself, field by field.

The recipe: SemiAnalysisAI/InferenceX benchmarks/single_node/agentic/glm5.2_fp4_mi355x_sglang_mtp.sh at commit
a3b8982c (GLM-5.2 MXFP4 on MI355X), over its two arms TP8/EP1 and TP4/EP4 (the concurrency sweeps [1, 2, 4, 10] and
[1, 2, 4, 8, 10, 12], as sglang's MI35x nightly port of it, suite nightly-perf-8-gpu-mi35x-glm52-fp4-agentic-mtp,
lists them). recipe_argv below is written here from that script's SGLANG_CMD (its flags and how it sizes them from
TP, EP_SIZE and CONC), not copied; the cache offload, metrics and parser flags are left out (no compared field reads
them). Porter's side: the task's baseline (the TP8/EP1 arm) and its TP4/EP4 move, rendered as porter launches them.
Both go through `prepare_server_args` and `ServerArgs.resolve_once` of the wheel under test (upstream_runtime.py),
with a GLM-5.2-shaped config.json written below (the public shape: GlmMoeDsaForCausalLM, 78 layers, hidden 6144,
256 experts top-8, the DSA indexer; no weights), and the resolved fields are compared. A difference is either in
DELIBERATE with its reason, or the test fails; a reason whose difference vanished fails too.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import upstream_runtime
import upstream_wheels

from porter.engines.serve import render_command
from porter.task import load_task

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "tasks" / "glm52_mi355x.yaml"
RECIPE = "SemiAnalysisAI/InferenceX glm5.2_fp4_mi355x_sglang_mtp.sh @ a3b8982c"
RECIPE_MODEL = "amd/GLM-5.2-MXFP4"
ARMS = {"TP8/EP1": (8, 1, 10), "TP4/EP4": (4, 4, 12)}  # tp, ep, the arm's largest concurrency
PORTER_ARMS = {"TP8/EP1": {}, "TP4/EP4": {"tp-size": 4, "ep-size": 4, "dp-size": 2}}  # moves from the baseline
FIELDS = [
    "attention_backend",
    "kv_cache_dtype",
    "chunked_prefill_size",
    "tp_size",
    "ep_size",
    "dp_size",
    "enable_dp_attention",
    "attn_dp_size",
    "mem_fraction_static",
    "cuda_graph_max_bs_decode",
    "max_running_requests",
]
DELIBERATE = {
    ("TP4/EP4", "dp_size"): "porter's figure is per node: the TP4/EP4 arm fills the 8 GPUs as two replicas, where "
    "the recipe runs one on 4 GPUs",
    "cuda_graph_max_bs_decode": "the recipe sizes it from its fixed client concurrency (min(2 x CONC, 256), at most "
    "64); porter's sweep has no fixed concurrency, so sglang's own default stands",
    "max_running_requests": "the recipe caps it at 2 x CONC for its client; porter's rate sweep leaves it to sglang",
}
GLM52_SHAPE = {
    "architectures": ["GlmMoeDsaForCausalLM"],
    "model_type": "glm_moe_dsa",
    "num_hidden_layers": 78,
    "hidden_size": 6144,
    "intermediate_size": 12288,
    "moe_intermediate_size": 2048,
    "n_routed_experts": 256,
    "num_experts_per_tok": 8,
    "n_shared_experts": 1,
    "first_k_dense_replace": 3,
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "head_dim": 192,
    "q_lora_rank": 2048,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 192,
    "qk_rope_head_dim": 64,
    "v_head_dim": 256,
    "index_n_heads": 32,
    "index_head_dim": 128,
    "index_topk": 2048,
    "num_nextn_predict_layers": 1,
    "max_position_embeddings": 1048576,
    "vocab_size": 154880,
    "dtype": "bfloat16",
}


def recipe_argv(tp: int, ep: int, concurrency: int, model: str, graph_flag: str) -> list[str]:
    """The recipe's launch_server arguments for one arm at one concurrency (DP attention off, as it ships)."""
    running = min(2 * concurrency, 256)
    return [
        *("--model-path", model, "--served-model-name", RECIPE_MODEL, "--trust-remote-code"),
        *("--tp", str(tp), "--ep-size", str(ep), "--kv-cache-dtype", "fp8_e4m3"),
        *("--dsa-prefill-backend", "tilelang", "--dsa-decode-backend", "tilelang"),
        *("--chunked-prefill-size", "32768", "--mem-fraction-static", "0.85"),
        *("--max-running-requests", str(running), graph_flag, str(min(running, 64))),
        *("--speculative-algorithm", "EAGLE", "--speculative-num-steps", "5"),
        *("--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "6"),
    ]


def porter_argv(moves: dict, model: str) -> list[str]:
    """The task's serve command with these moves, as porter renders it, after the launcher and with the model
    directory of this test in place of the container path."""
    task = load_task(TASK, environ={})
    release = upstream_wheels.pinned()["sglang"][0]  # spelled as porter spells it for the release under test
    words = shlex.split(render_command(task, {**task.serve.flags, **moves}, release))
    words = words[words.index("sglang.launch_server") + 1 :]
    return [model if word == task.model.container_path else word for word in words]


@pytest.fixture(scope="module")
def resolved(wheels, tmp_path_factory) -> dict:
    """(side, arm) -> the fields sglang resolves; ("recipe", "as written") -> its answer to the recipe's own flag."""
    model = tmp_path_factory.mktemp("glm52-shape")
    (model / "config.json").write_text(json.dumps(GLM52_SHAPE))
    argvs = {("recipe", "as written"): recipe_argv(8, 1, 10, str(model), "--cuda-graph-max-bs")}
    for arm, (tp, ep, concurrency) in ARMS.items():
        argvs["recipe", arm] = recipe_argv(tp, ep, concurrency, str(model), "--cuda-graph-max-bs-decode")
        argvs["porter", arm] = porter_argv(PORTER_ARMS[arm], str(model))
    scratch = tmp_path_factory.mktemp("sglang-resolve")
    answers = upstream_runtime.resolve_sglang(wheels, list(argvs.values()), FIELDS, scratch)
    return dict(zip(argvs, answers, strict=True))


def test_the_recipes_cuda_graph_flag_is_ambiguous_to_the_engine(resolved):
    """The recipe's image is older: its `--cuda-graph-max-bs` is refused from sglang 0.5.20 on (only the -decode and
    -prefill variants exist), so the recipe is resolved with the -decode spelling, as sglang's own port of it does."""
    answer = resolved["recipe", "as written"]
    assert "ambiguous option: --cuda-graph-max-bs" in answer.get("error", ""), answer


@pytest.mark.parametrize("arm", ARMS)
def test_the_task_resolves_as_the_recipe_or_says_why_not(arm, resolved):
    recipe, porter = resolved["recipe", arm], resolved["porter", arm]
    assert "error" not in recipe and "error" not in porter, (recipe, porter)
    rows = [(field, recipe[field], porter[field]) for field in FIELDS]
    rows.append(("model id", RECIPE_MODEL, load_task(TASK, environ={}).model.id))
    print(f"\n{arm}: {RECIPE} | porter's {TASK.name}")
    unexplained, stale = [], []
    for field, theirs, ours in rows:
        reason = DELIBERATE.get((arm, field)) or DELIBERATE.get(field)
        verdict = "match" if theirs == ours else f"deliberate: {reason}" if reason else "UNEXPLAINED"
        print(f"  {field:26} {theirs!s:>12} {ours!s:>12}  {verdict}")
        if theirs != ours and not reason:
            unexplained.append((field, theirs, ours))
        if theirs == ours and (arm, field) in DELIBERATE:
            stale.append(field)
    assert unexplained == [] and stale == []
    assert porter["attention_backend"] == recipe["attention_backend"] != "aiter"  # sglang's own choice on both


# vLLM: the real vLLM task against vLLM's recipe for the GLM-5 family, vllm-project/recipes GLM/GLM5.md @ 134386f2
# (`vllm serve zai-org/GLM-5-FP8 --tensor-parallel-size 8 --speculative-config.method mtp
# --speculative-config.num_speculative_tokens 3 --tool-call-parser glm47 --reasoning-parser glm45
# --enable-auto-tool-choice --served-model-name glm-5-fp8`, written here from the page; the tool and reasoning
# parsers are the OpenAI front end's, not EngineArgs', and are left out). Compared through vLLM's own parser and
# EngineArgs (upstream_runtime.vllm_engine_args), not its engine-config resolution.
VLLM_TASK = ROOT / "tasks" / "glm52_mi355x_vllm.yaml"
VLLM_RECIPE = "vllm-project/recipes GLM/GLM5.md @ 134386f2"
VLLM_RECIPE_MODEL = "zai-org/GLM-5-FP8"
VLLM_FIELDS = [
    "attention_backend",
    "kv_cache_dtype",
    "max_num_batched_tokens",
    "tensor_parallel_size",
    "data_parallel_size",
    "enable_expert_parallel",
    "gpu_memory_utilization",
    "max_num_seqs",
    "speculative_config",
]
VLLM_DELIBERATE = {
    "speculative_config": "the draft starts off and is the loop's first move, the recipe's MTP depth 3 a tunable",
    "model id": "the recipe serves the family's FP8 release on H200; on MI355X the task serves AMD's MXFP4 "
    "publication, the id vLLM's own Quark code names",
}


def vllm_recipe_argv(model: str) -> list[str]:
    return [
        *("--model", model, "--tensor-parallel-size", "8", "--served-model-name", "glm-5-fp8"),
        *("--speculative-config.method", "mtp", "--speculative-config.num_speculative_tokens", "3"),
    ]


def vllm_porter_argv(model: str) -> list[str]:
    """The vLLM task's serve command as porter renders it, as EngineArgs sees it: `vllm serve MODEL` puts the
    positional model in --model; --host and --port are the front end's."""
    task = load_task(VLLM_TASK, environ={})
    words = shlex.split(render_command(task, task.serve.flags))
    words = words[words.index("serve") + 2 :]
    for flag in ("--host", "--port"):
        index = words.index(flag)
        del words[index : index + 2]
    return ["--model", model, *words]


def test_the_vllm_task_parses_as_vllms_recipe_or_says_why_not(wheels, tmp_path_factory):
    model = tmp_path_factory.mktemp("glm52-shape-vllm")
    (model / "config.json").write_text(json.dumps(GLM52_SHAPE))
    scratch = tmp_path_factory.mktemp("vllm-engine-args")
    argvs = [vllm_recipe_argv(str(model)), vllm_porter_argv(str(model))]
    recipe, porter = upstream_runtime.vllm_engine_args(wheels, argvs, VLLM_FIELDS, scratch)
    assert "error" not in recipe and "error" not in porter, (recipe, porter)
    rows = [(field, recipe[field], porter[field]) for field in VLLM_FIELDS]
    rows.append(("model id", VLLM_RECIPE_MODEL, load_task(VLLM_TASK, environ={}).model.id))
    print(f"\n{VLLM_RECIPE} | porter's {VLLM_TASK.name}")
    unexplained = []
    for field, theirs, ours in rows:
        reason = VLLM_DELIBERATE.get(field)
        verdict = "match" if theirs == ours else f"deliberate: {reason}" if reason else "UNEXPLAINED"
        print(f"  {field:24} {theirs!s:>44} {ours!s:>20}  {verdict}")
        if theirs != ours and not reason:
            unexplained.append((field, theirs, ours))
    assert unexplained == []
