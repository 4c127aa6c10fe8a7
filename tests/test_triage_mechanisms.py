"""One rule per failure mechanism, whoever prints it: each rule is shown the wording of every engine or library
whose source emits it (lines written here from those sources, never copied from ../shared/crashlogs), and
the rule sets the leave-one-source-out benchmark keeps on name real rules."""

import re

import pytest

from porter.triage import triage_text
from porter.triage.lines import split_prefix, trigger_positions
from porter.triage.rules import (
    GENERIC_RULES,
    GRAMMAR_RULES,
    OTHER_CLASS_RULES,
    RULES,
    RUNTIME_LAYER_RULES,
    STATED_COMPARISON,
    classify,
)

# (rule, category, line): the rule that must read the line, and the class it gives
MECHANISM_LINES = [
    # start-up never completes: timeouts and stalls are one mechanism
    (
        "startup_stalled",
        "startup_timeout",
        "(APIServer pid=12) TimeoutError: Timed out waiting for engines to send initial message on input socket.",
    ),  # vLLM v1/engine/core_client.py
    (
        "startup_stalled",
        "startup_timeout",
        "(EngineCore_DP0 pid=88) INFO 03-01 10:00:00 [shm_broadcast.py:495] No available shared memory broadcast "
        "block found in 60 seconds. This typically happens when some processes are hanging.",
    ),  # vLLM distributed/device_communicators/shm_broadcast.py
    ("startup_stalled", "startup_timeout", "RuntimeError: Server failed to start in time."),  # vLLM tests/utils.py
    (
        "startup_stalled",
        "startup_timeout",
        "TimeoutError: Server failed to start within the timeout period.",
    ),  # sglang srt/entrypoints/http_server_engine.py, test/test_utils.py
    (
        "startup_stalled",
        "startup_timeout",
        "[aiter] [pid=4242 pname=Worker_TP3] waiting for baton release at /root/.aiter/build/module_moe/lock",
    ),  # aiter jit/utils/file_baton.py
    # a quantised tensor the model does not hold: Python's and PyTorch's grammar on the formats' tensor names
    (
        "quant_loader_wording",
        "quant_config_mismatch",
        "[2026-07-14 10:00:00 TP0] Parameter model.layers.7.mlp.experts.w2_weight_scale not found in params_dict",
    ),  # sglang python/sglang/srt/models/*.py, vLLM model_executor/models/*.py
    (
        "quantized_param_unplaced",
        "quant_config_mismatch",
        "KeyError: 'model.layers.7.mlp.experts.w13_input_scale'",
    ),  # any loader's params_dict[name] on a checkpoint the model was not built for
    (
        "quantized_param_unplaced",
        "quant_config_mismatch",
        'RuntimeError: Error(s) in loading state_dict for Linear: Unexpected key(s) in state_dict: "qzeros", "g_idx".',
    ),  # PyTorch nn/modules/module.py load_state_dict
    ("quant_loader_wording", "quant_config_mismatch", "ValueError: Unknown quantization method: fp4_e2m1_v9"),
    # the memory left for the KV cache is negative, zero or short
    (
        "memory_budget_exhausted",
        "out_of_memory",
        "[2026-07-14 10:00:00 DP3 TP3] max_total_tokens=65536 is larger than the profiled value -20481. Use the "
        "profiled value instead.",
    ),  # sglang srt/model_executor/model_runner.py
    (
        "memory_budget_exhausted",
        "out_of_memory",
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
    ),  # sglang model_runner.py
    (
        "memory_budget_exhausted",
        "out_of_memory",
        "(EngineCore_DP0 pid=7) INFO 07-14 10:00:00 [gpu_worker.py:298] Available KV cache memory: -1.52 GiB",
    ),  # vLLM v1/worker/gpu_worker.py
    ("memory_budget_exhausted", "out_of_memory", "INFO [kv_cache_utils.py:1087] GPU KV cache size: 0 tokens"),
    (
        "memory_budget_exhausted",
        "out_of_memory",
        "ValueError: Free memory on device (40.1/191.5 GiB) on startup is less than desired GPU memory utilization "
        "(0.9, 172.4 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
    ),  # vLLM v1/worker/gpu_worker.py
    (
        "memory_budget_exhausted",
        "out_of_memory",
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
        "initializing the engine.",
    ),  # vLLM v1/core/kv_cache_utils.py
    # a build tool or a JIT builder says a build failed
    ("build_failed", "compile_error", "[aiter] failed jit build [module_gemm_a8w8_bpreshuffle]"),  # aiter jit/core.py
    (
        "build_failed",
        "compile_error",
        "RuntimeError: [aiter] build [module_mha_fwd] under /root/.aiter/build/module_mha_fwd failed !!!!!!",
    ),  # aiter jit/core.py
    ("build_failed", "compile_error", "  ERROR: Failed building wheel for flash_attn"),  # pip
    ("build_failed", "compile_error", "  x Failed to build `flash-attn==2.7.4.post1`"),  # uv
    # a kernel library refuses the problem it was handed
    (
        "ck_rejects_problem",
        "unsupported_arch_or_kernel",
        "wrong! DeviceGroupedConvFwd with the specified compilation parameters does not support this Conv problem",
    ),  # composable_kernel IsSupportedArgument verdict (examples, ckProfiler)
    (
        "ck_rejects_problem",
        "unsupported_arch_or_kernel",
        "RuntimeError: This GEMM is not supported!",
    ),  # aiter csrc/ck_gemm_a8w8/include/gemm_a8w8_common.cuh TORCH_CHECK on IsSupportedArgument
    (
        "ck_rejects_problem",
        "unsupported_arch_or_kernel",
        "gemm_a8w8_blockscale_bpreshuffle failed for shape M=8192, N=1536, K=4096, dtype=torch.bfloat16, config=None: "
        "This GEMM is not supported!",
    ),  # aiter, as ROCm/aiter#4634 quotes it: the dtype beside the verdict is context, not the cause
    (
        "kernel_rejects_problem",
        "unsupported_arch_or_kernel",
        "RuntimeError: No available kernel. Aborting execution.",
    ),  # PyTorch aten/src/ATen/native/transformers sdp_utils
    (
        "kernel_tuning_unsupported",
        "unsupported_arch_or_kernel",
        "[aiter] Fmoe tuning not support for (256, 7168, 2048, 256, 8, 'Silu')",
    ),  # aiter fused_moe.py
]


@pytest.mark.parametrize(("rule", "category", "line"), MECHANISM_LINES)
def test_each_mechanism_is_read_by_its_rule_whoever_prints_it(rule, category, line):
    assert trigger_positions(line.encode()), "the prefilter must show the line to the rules"
    found = classify(split_prefix(line)[1])
    assert (found.rule, found.category) == (rule, category)
    result = triage_text(f"INFO 07-14 10:00:00 [api_server.py:1] starting\n{line}\n")
    assert result.category == category and result.key_line in result.excerpt


def test_the_first_compiler_error_still_beats_a_jit_builders_summary():
    log = (
        "[aiter] start build [module_moe_asm] under /root/.aiter/build/module_moe_asm\n"
        "/root/.aiter/build/module_moe_asm/asm_moe.cpp:12:5: error: use of undeclared identifier 'hip_bf16'\n"
        "[aiter] failed jit build [module_moe_asm]\n"
        "RuntimeError: [aiter] build [module_moe_asm] under /root/.aiter/build/module_moe_asm failed !!!!!!\n"
    )
    result = triage_text(log)
    assert (result.category, result.key_line_no) == ("compile_error", 2)


@pytest.mark.parametrize(
    "line",
    [
        "[aiter] start build [module_moe_asm] under /root/.aiter/build/module_moe_asm",
        "[aiter] finish build [module_moe_asm], cost 41.2s",
        "Successfully built flash_attn",
        "INFO 07-14 10:00:00 [backends.py:1] Compiling a graph for dynamic shape takes 12.3 s",
        "(EngineCore_DP0 pid=7) INFO 07-14 10:00:00 [gpu_worker.py:298] Available KV cache memory: 41.52 GiB",
        "INFO 07-14 10:00:00 [kv_cache_utils.py:1087] GPU KV cache size: 1,052,800 tokens",
        "[2026-07-14 10:00:00 TP0] max_total_tokens=65536 is larger than the profiled value 700123. Use the profiled",
    ],
)
def test_healthy_builds_and_memory_budgets_are_not_failures(line):
    assert triage_text(line + "\n").category == "ok"


def test_the_rule_sets_the_ablation_keeps_name_real_rules():
    names = {rule.name for rule in (*RULES, *OTHER_CLASS_RULES, *GENERIC_RULES, STATED_COMPARISON)}
    names |= {"exception", "unterminated_traceback", "status_code", "last_dispatched_kernel", "connection_lost"}
    assert GRAMMAR_RULES <= RUNTIME_LAYER_RULES
    assert RUNTIME_LAYER_RULES <= names, RUNTIME_LAYER_RULES - names


def test_every_rule_the_layered_ablation_keeps_names_the_upstream_file_that_emits_its_wording():
    declared = [rule for rule in (*RULES, *OTHER_CLASS_RULES) if rule.layer]
    assert {rule.name for rule in declared} == RUNTIME_LAYER_RULES - GRAMMAR_RULES
    for rule in declared:
        assert re.search(r"[\w/]+\.(?:cpp|c|h|cuh|hpp|py)\b", rule.layer), rule.name


# A lower layer's message as two engines surface it (each engine's log prefix, the layer's own words): the rule
# reads both, which is what keeping it on for a held-out source rests on.
SURFACED_BY_TWO_ENGINES = [
    (
        "ck_rejects_problem",
        "(Worker_TP0 pid=29) ERROR 03-01 04:24:25 [multiproc_executor.py:863] RuntimeError: wrong! device_gemm with "
        "the specified compilation parameters does not support this GEMM problem",  # vllm-project/vllm#35637
        "[2025-08-28 10:00:00 TP3] RuntimeError: This GEMM is not supported!",
    ),
    (
        "quantized_param_unplaced",
        "ERROR 12-05 20:24:46 engine.py:366] KeyError: 'layers.0.mlp.down_proj.weight_scale'",  # llm-compressor#959
        "[2025-02-15 08:00:00 TP0] KeyError: 'model.layers.18.mlp.down_proj.weight_scale'",  # sgl-project/sglang#3604
    ),
    (
        "cuda_only_import",
        "(EngineCore_DP0 pid=7) ERROR [core.py:1] ModuleNotFoundError: No module named 'flash_attn'",
        "[2025-07-01 10:00:00 TP0] ModuleNotFoundError: No module named 'deep_gemm'",
    ),
    (
        "torch_shape_mismatch",
        "(EngineCore_DP0 pid=7) ERROR [core.py:1] RuntimeError: The size of tensor a (512) must match the size of "
        "tensor b (4096) at non-singleton dimension 1",
        "[2025-07-01 10:00:00 TP0] RuntimeError: The size of tensor a (512) must match the size of tensor b (4096) "
        "at non-singleton dimension 1",
    ),
]


@pytest.mark.parametrize(("rule", "vllm_line", "sglang_line"), SURFACED_BY_TWO_ENGINES)
def test_a_declared_lower_layer_rule_reads_its_message_whichever_engine_surfaces_it(rule, vllm_line, sglang_line):
    for line in (vllm_line, sglang_line):
        result = triage_text(f"INFO 07-14 10:00:00 [api_server.py:1] starting\n{line}\n")
        assert result.findings[0].rule == rule and result.key_line == split_prefix(line)[1].strip()


def test_the_generic_refusal_rule_is_not_declared_a_lower_layer():
    # It reads engines' own sentences ("... not supported on this device") as well as libraries': a held-out
    # source must earn it with evidence from another source.
    assert "kernel_rejects_problem" not in RUNTIME_LAYER_RULES
    assert classify("RuntimeError: No available kernel. Aborting execution.").rule == "kernel_rejects_problem"


def test_memory_budget_facts_read_the_budget_and_survive_units_they_do_not_know():
    sglang = triage_text("[TP3] max_total_tokens=65536 is larger than the profiled value -20481. Use the profiled\n")
    assert (sglang.category, sglang.facts["kv_budget_tokens"]) == ("out_of_memory", -20481)
    vllm = triage_text(
        "ValueError: Free memory on device (40.1/191.5 GiB) on startup is less than desired GPU memory utilization\n"
        "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB. 1.50 GiB is free.\n"
    )
    assert vllm.category == "out_of_memory"
    assert (vllm.facts["requested_bytes"], vllm.facts["free_bytes"]) == (2 * 2**30, int(1.5 * 2**30))


def test_a_stall_the_server_got_past_is_not_a_startup_timeout():
    waited = (
        "(Worker_TP1 pid=9) [aiter] waiting for baton release at /root/.aiter/build/module_moe/lock\n"
        "(EngineCore_DP0 pid=7) INFO [shm_broadcast.py:495] No available shared memory broadcast block found in 60 "
        "seconds. This typically happens when some processes are hanging.\n"
    )
    assert triage_text(waited).category == "startup_timeout"
    assert triage_text(waited + "(APIServer pid=5) INFO:     Application startup complete.\n").category == "ok"
