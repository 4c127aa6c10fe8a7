"""Class rules and facts on lines written in the real tools' formats (sglang, vLLM, aiter, HIP, RCCL, gcc/clang)."""

import pytest

from porter.triage import triage_text
from porter.triage.lines import split_prefix, trigger_positions
from porter.triage.rules import classify

CLASS_LINES = [
    ("missing_rocm_guard", "ImportError: /sgl/sgl_kernel/common_ops.so: undefined symbol: cudaStreamSynchronize"),
    ("missing_rocm_guard", "/sgl/csrc/allreduce.cu:57:9: error: use of undeclared identifier '__shfl_xor_sync'"),
    ("comm_error", "torch.distributed.DistStoreError: Timed out after 601 seconds waiting for clients. 1/8 joined."),
    ("other", "HW Exception by GPU node-2 (Agent handle: 0x5633) reason :GPU Hang"),  # a hang names no cause
    ("unsupported_arch_or_kernel", "RuntimeError: No available kernel. Aborting execution."),
    (
        "out_of_memory",
        "ValueError: To serve at least one request with the models's max seq len (131072), (16.0 GiB KV cache is "
        "needed, which is larger than the available KV cache memory (8.5 GiB). Try increasing `gpu_memory_utilization`",
    ),
    ("startup_timeout", "RuntimeError: Timeout while waiting for the server to start (600 s)"),
    (
        "missing_rocm_guard",
        "/src/spec/metadata_kernel.cpp:3:10: fatal error: cuda_runtime.h: No such file or directory",
    ),
    ("missing_rocm_guard", "csrc/attn.hip:88:5: error: unknown type name 'cudaStream_t'; did you mean 'hipStream_t'?"),
    ("missing_rocm_guard", 'kernels/topk.cu(42): error: identifier "cudaMemcpyAsync" is undefined'),
    ("compile_error", "csrc/moe.cpp:120:5: error: no matching function for call to 'dispatch'"),
    ("compile_error", "ImportError: /root/.aiter/jit/module_moe.so: undefined symbol: _ZN5aiter3runEv"),
    ("compile_error", "triton.compiler.errors.CompilationError: at 10:4: def kernel(x_ptr):"),
    ("compile_error", "RuntimeError: Error building extension 'module_moe_ck2stages'"),
    (
        "shape_mismatch",
        "AssertionError: Attempted to load weight (torch.Size([2048, 6144])) into parameter (torch.Size([1024, 6144]))",
    ),
    (
        "shape_mismatch",
        "RuntimeError: size mismatch for model.layers.0.mlp.gate.weight: copying a param with shape "
        "torch.Size([256, 6144]) from checkpoint, the shape in current model is torch.Size([128, 6144]).",
    ),
    (
        "shape_mismatch",
        "RuntimeError: The size of tensor a (6144) must match the size of tensor b (3072) at non-singleton dimension 1",
    ),
    ("quant_config_mismatch", "KeyError: 'model.layers.61.mlp.experts.w13_weight_scale_inv'"),
    ("quant_config_mismatch", "AttributeError: 'MergedColumnParallelLinear' object has no attribute 'weight_scale'"),
    ("quant_config_mismatch", "ValueError: Unknown quantization method: quark_w4a4"),
    (
        "out_of_memory",
        "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of "
        "287.98 GiB of which 1.02 GiB is free.",
    ),
    ("out_of_memory", "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."),
    ("out_of_memory", "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`."),
    ("out_of_memory", "RuntimeError: HIP error: out of memory"),
    ("dtype_unsupported", "RuntimeError: \"fill_cuda\" not implemented for 'Float8_e4m3fn'"),
    ("dtype_unsupported", "TypeError: Unsupported dtype torch.float8_e4m3fn on this platform, use float8_e4m3fnuz"),
    ("dtype_unsupported", "ValueError: type fp8e4nv not supported in this architecture."),
    ("unsupported_arch_or_kernel", "RuntimeError: HIP error: invalid device function"),
    ("unsupported_arch_or_kernel", "hipErrorNoBinaryForGpu: Unable to find code object for all current devices!"),
    (
        "unsupported_arch_or_kernel",
        "RuntimeError: wrong! device_gemm with the specified compilation parameters does not support this GEMM problem",
    ),
    ("unsupported_arch_or_kernel", "ValueError: Unsupported architecture gfx1100 for the aiter asm kernels"),
    (
        "comm_error",
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error, "
        "NCCL version 2.21.5",
    ),
    (
        "comm_error",
        "[rank3]:[E1202 10:00:00.000000 123 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600012 milliseconds",
    ),
    ("comm_error", "node-0:123:456 [3] NCCL WARN Cuda failure 'invalid argument'"),
    (
        "gpu_memory_fault",
        "Memory access fault by GPU node-4 (Agent handle: 0x55d0) on address 0x7f00. Reason: Page not present.",
    ),
    ("gpu_memory_fault", "RuntimeError: HIP error: an illegal memory access was encountered"),
    (
        "startup_timeout",
        "[porter] startup timeout: http://127.0.0.1:30000/health did not answer 200 within 2400 s; stopped",
    ),
    ("startup_timeout", "TimeoutError: Server failed to start within 600 seconds"),
    (
        "slow_fallback_perf",
        "[aiter] shape is M:64, N:7168, K:2048, not found tuned config in /tmp/bf16.csv, will use default config!",
    ),
    (
        "slow_fallback_perf",
        "[aiter] [fused_moe] using 2stage default for (256, 64, 6144, 2048, 256, 8, 'ActivationType.Silu')",
    ),
    (
        "slow_fallback_perf",
        "WARNING no tuned MoE config for model_dim=6144 inter_dim=2048 expert=256 topk=8; slow fallback kernel",
    ),
    # status codes (status.py): the code decides the class, whatever the wording around it
    (
        "out_of_memory",
        ":0:rocdevice.cpp :2982: 1 us: Device::acquireExclusiveGpuAccess: HSA_STATUS_ERROR_OUT_OF_RESOURCES",
    ),
    ("gpu_memory_fault", "Callback: Queue 0x7f aborting with error : HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: x"),
    (
        "gpu_memory_fault",
        "RROR_MEMORY_APERTURE_VIOLATION: The agent attempted to access memory beyond the largest legal",
    ),
    ("dtype_unsupported", "RuntimeError: CUDA error: HIPBLAS_STATUS_NOT_SUPPORTED when calling `hipblasLtMatmul(...)`"),
    ("dtype_unsupported", "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling `cublasGemmEx(handle)`"),
    ("out_of_memory", "rocblas error: rocblas_status_memory_error in rocblas_gemm_ex"),
    ("unsupported_arch_or_kernel", "hipModuleLaunchKernel failed ---> [HIP error](invalid resource handle)"),
    ("unsupported_arch_or_kernel", "HSA_STATUS_ERROR_INVALID_ISA: The instruction set architecture is invalid."),
    ("comm_error", "RuntimeError: NCCL Error 1: ncclUnhandledCudaError: Call to CUDA function failed."),
    ("unsupported_arch_or_kernel", "No compatible code objects found for: gfx942, gfx950"),
    (
        "unsupported_arch_or_kernel",
        "rocBLAS error: Cannot read /opt/rocm/lib/rocblas/library/Tensile.dat for GPU arch : gfx1200",
    ),
    # compiler and linker drivers speaking for themselves
    ("compile_error", "clang++: error: invalid offload arch combinations: 'gfx90a' and 'gfx90a:xnack+'"),
    ("compile_error", "ld.lld: error: unable to find library -lamdhip64"),
    ("compile_error", "fatal error: error in backend: Cannot select: intrinsic %llvm.amdgcn.mfma.f32.32x32x16.fp8"),
    ("compile_error", "[aiter] failed build jit [module_gemm_a8w8]"),
    (
        "compile_error",
        "subprocess.CalledProcessError: Command '['/opt/rocm/llvm/bin/clang++', '--offload-arch=gfx942', '-c', "
        "'k.hip']' returned non-zero exit status 1.",
    ),
    ("compile_error", "make[2]: *** [CMakeFiles/ggml-hip.dir/build.make:76: ggml-hip/mmq.cu.o] Error 1"),
    # quantised parameter names the loader cannot place
    ("quant_config_mismatch", "ValueError: model.layers.0.mlp.down_proj.weight_scale not found in params_dict"),
    ("missing_rocm_guard", "ImportError: cannot import name 'flash_attn_func' from 'flash_attn' (unknown location)"),
    # kernel driver (dmesg) lines
    ("gpu_memory_fault", "amdgpu 0000:83:00.0: amdgpu: [gfxhub] page fault (src_id:0 ring:40 vmid:3 pasid:32772)"),
    ("gpu_memory_fault", "amdgpu 0000:83:00.0: amdgpu: VM_L2_PROTECTION_FAULT_STATUS:0x00301031"),
    ("other", "[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring comp_1.0.0 timeout, signaled seq=1, emitted seq=3"),
    # start-up stall reports
    ("startup_timeout", "the server is still starting after 1h45, last line: Capturing batches (bs=64)"),
    ("startup_timeout", "(Worker_TP1) [aiter] waiting for baton release at /tmp/aiter_configs/x.csv.lock"),
    ("startup_timeout", "INFO [shm_broadcast.py:466] No available shared memory broadcast block found in 60 seconds."),
    ("comm_error", "worker_pool.cpp:294] Worker: Process failed for slice: transport retry counter exceeded"),
    # a warning that falls back is about speed, not a crash
    (
        "slow_fallback_perf",
        "UserWarning: Attempting to use hipBLASLt on an unsupported architecture! Overriding blas backend to hipblas",
    ),
    ("other", "what():  std::filesystem::remove: Permission denied: /root/.cache/x"),
    (
        "out_of_memory",
        "ValueError: The model's max seq len (131072) is larger than the maximum number of tokens that can be "
        "stored in KV cache (51200). Try increasing `gpu_memory_utilization` or decreasing `max_model_len`",
    ),
    ("quant_config_mismatch", "ValueError: Unsupported quantization method: mxfp4_moe_v2"),
    ("compile_error", "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised: LoweringException"),
]


@pytest.mark.parametrize(("category", "line"), CLASS_LINES)
def test_each_class_is_recognised_and_passes_the_prefilter(category, line):
    body = split_prefix(line)[1]
    assert trigger_positions(line.encode()), "a rule that the prefilter never shows a line to cannot fire"
    assert classify(body).category == category
    result = triage_text(f"[2026-07-14 10:00:00 TP0] Load weight begin.\n{line}\n")
    assert result.category == category
    assert result.key_line in result.excerpt


@pytest.mark.parametrize(
    "line",
    [
        "[2026-07-14 10:00:00] server_args=ServerArgs(mem_fraction_static=0.85, watchdog_timeout=300, "
        "enable_error_logging=False)",
        "[2026-07-14 10:00:01 TP0] Memory pool end. avail mem=31.20 GB",
        "[2026-07-14 10:00:02 TP0] Init torch distributed begin. timeout for collectives: 600 s",
        "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
        "[aiter] import [module_custom_all_reduce] under /sgl-workspace/aiter/aiter/jit/module.so",
    ],
)
def test_harmless_lines_do_not_make_a_failure(line):
    assert triage_text(line + "\n").category == "ok"


def test_missing_guard_facts_name_file_line_header_and_compiler():
    log = (
        "g++ -DUSE_ROCM -I/opt/rocm/include -c /src/spec/metadata_kernel.cpp -o metadata_kernel.o\n"
        "/src/spec/metadata_kernel.cpp:3:10: fatal error: cuda_runtime.h: No such file or directory\n"
        "    3 | #include <cuda_runtime.h>\n"
        "      |          ^~~~~~~~~~~~~~~~\n"
        "compilation terminated.\n"
        "ninja: build stopped: subcommand failed.\n"
    )
    result = triage_text(log)
    assert (result.category, result.key_line_no) == ("missing_rocm_guard", 2)
    assert result.facts["file"] == "/src/spec/metadata_kernel.cpp"
    assert (result.facts["line"], result.facts["header"], result.facts["compiler"]) == (3, "cuda_runtime.h", "g++")
    assert "#include <cuda_runtime.h>" in result.excerpt


def test_first_compiler_error_wins_over_the_build_tool_summary():
    log = (
        "a.cpp:10:2: error: expected ';'\nb.cpp:20:2: error: unknown thing\nninja: build stopped: subcommand failed.\n"
    )
    result = triage_text(log)
    assert (result.category, result.key_line_no, result.facts["file"]) == ("compile_error", 1, "a.cpp")


def test_a_cuda_only_diagnostic_anywhere_makes_the_first_error_a_missing_guard():
    log = (
        "common.cuh:44:61: error: use of undeclared identifier '__hmax2'\n"
        "kern.cu:1405:5: error: unknown type name 'cublasComputeType_t'\n"
        "make: *** [Makefile:10: kern.o] Error 1\n"
    )
    result = triage_text(log)
    assert (result.category, result.key_line_no) == ("missing_rocm_guard", 1)


def test_a_wrapped_build_failure_is_read_through_to_the_first_compiler_error():
    log = (
        "[1/3] /opt/rocm/llvm/bin/clang++ --offload-arch=gfx942 -c moe.hip -o moe.o\n"
        "moe.hip:12:3: error: no member named 'dispatch' in namespace 'ck'\n"
        "ninja: build stopped: subcommand failed.\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3/subprocess.py", line 571, in run\n'
        "subprocess.CalledProcessError: Command '['ninja', '-v']' returned non-zero exit status 1.\n"
        "\n"
        "The above exception was the direct cause of the following exception:\n"
        "\n"
        "RuntimeError: Error building extension 'moe_ext'\n"
    )
    result = triage_text(log)
    assert (result.category, result.key_line_no, result.facts["file"]) == ("compile_error", 2, "moe.hip")


def test_the_cause_of_a_chained_exception_is_the_key_line():
    log = (
        "Traceback (most recent call last):\n"
        '  File "/srv/engine/loader.py", line 10, in load\n'
        "    load_jit()\n"
        "ModuleNotFoundError: No module named 'kernels.jit.module_moe_asm'\n"
        "\n"
        "During handling of the above exception, another exception occurred:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "/srv/engine/server.py", line 3, in main\n'
        "    start()\n"
        "RuntimeError: engine start failed\n"
    )
    result = triage_text(log)
    assert (result.category, result.key_line_no) == ("unsupported_arch_or_kernel", 4)


def test_each_finding_has_a_confidence_and_unknown_failures_say_they_are_unclassified():
    known = triage_text("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB.\n")
    unknown = triage_text("RuntimeError: the frobnicator refused to frob\n")
    assert known.category == "out_of_memory" and known.findings[0].confidence >= 0.8
    assert unknown.category == "other" and unknown.confidence < known.confidence
    assert "unclassified" in unknown.excerpt and unknown.key_line == "RuntimeError: the frobnicator refused to frob"


def test_shape_facts_carry_shapes_dtypes_and_module_prefixes():
    log = (
        "[2026-07-14 10:00:00] quant config: mxfp4 (quark), "
        "exclude=['model.layers.78.mlp.shared_experts.*', 'lm_head']\n"
        "Traceback (most recent call last):\n"
        '  File "/twin/loader.py", line 40, in load_weights\n'
        "    param.copy_(tensor)\n"
        "RuntimeError: shape mismatch for 'model.decoder.shared_experts.down_proj.weight': param [6144, 1024] (mxfp4) "
        "vs checkpoint [6144, 2048] (bfloat16)\n"
    )
    result = triage_text(log)
    assert result.category == "shape_mismatch"
    assert result.facts["shapes"] == ["[6144, 1024]", "[6144, 2048]"]
    assert result.facts["parameter"] == "model.decoder.shared_experts.down_proj.weight"
    assert "model.layers.78.mlp.shared_experts.*" in result.facts["module_prefixes"]
    assert {"mxfp4", "bfloat16"} <= {*result.facts["dtypes"], *result.facts["quantization"]}
    assert result.implicated == "/twin/loader.py:40 (load_weights)"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "[aiter] shape is M:64, N:7168, K:2048, not found tuned config in /tmp/aiter_configs/bf16_tuned_gemm.csv",
            {"M": "64", "N": "7168", "K": "2048"},
        ),
        (
            "[aiter] [fused_moe] using 2stage default for ('gfx950', 256, 64, 6144, 2048, 256, 8, "
            "'ActivationType.Silu', 'torch.bfloat16', 'torch.float4_e2m1fn_x2', 'torch.float4_e2m1fn_x2', "
            "'QuantType.per_1x32', True, False)",
            {"arch": "gfx950", "model_dim": "6144", "inter_dim": "2048", "expert": "256", "topk": "8"},
        ),
        (
            "WARNING no tuned MoE config for model_dim=6144 inter_dim=2048 expert=256 topk=8 in "
            "/opt/twin/configs/tuned_fmoe.csv; using slow fallback kernel",
            {"model_dim": "6144", "inter_dim": "2048", "expert": "256", "topk": "8"},
        ),
        (
            "Config file not found at "
            "['/vllm/fused_moe/configs/E=128,N=1024,device_name=AMD_Instinct_MI325X,dtype=fp8_w8a8.json']",
            {"E": "128", "N": "1024", "device_name": "AMD_Instinct_MI325X"},
        ),
    ],
)
def test_slow_fallback_reports_the_shape_and_the_config_path(line, expected):
    result = triage_text(line + "\n")
    assert result.category == "slow_fallback_perf"
    assert expected.items() <= result.facts["shape"].items()
    if ".csv" in line or ".json" in line:
        assert result.facts["config_path"].endswith((".csv", ".json"))


def test_oom_facts_give_requested_and_free_bytes():
    line = (
        "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of "
        "287.98 GiB of which 1.00 GiB is free. Consider --mem-fraction-static 0.8"
    )
    facts = triage_text(line + "\n").facts
    assert (facts["requested_bytes"], facts["free_bytes"]) == (2 * 2**30, 2**30)
    assert "mem-fraction-static" in facts["flags"]


def test_startup_timeout_says_what_it_waited_for_and_the_last_activity():
    log = (
        "[aiter] start build [module_moe_ck2stages] under /sgl-workspace/aiter/aiter/jit/build\n"
        "[porter] startup timeout: http://127.0.0.1:30000/health did not answer 200 within 2400 s; stopped\n"
    )
    facts = triage_text(log).facts
    assert facts["waiting_for"] == "http://127.0.0.1:30000/health"
    assert facts["timeout_s"] == 2400.0
    assert "start build" in facts["last_activity"]


def test_memory_fault_blames_the_kernel_logged_before_it_even_with_noise_between():
    log = (
        "[aiter] finish build /root/.aiter/build/top_k_renorm_probs_d41d8cd98f00b204e9800998ecf8427e, cost 14.5s\n"
        + "".join(
            f"[2026-07-14 10:00:0{index % 10} TP{index % 8}] Decode batch. #running-req: {index}\n"
            for index in range(300)
        )
        + "Memory access fault by GPU node-6 (Agent handle: 0x501def90) on address 0x7f5e50c00000. Reason: Unknown.\n"
    )
    result = triage_text(log)
    assert (result.category, result.implicated) == ("gpu_memory_fault", "top_k_renorm_probs")
    assert "finish build" in result.excerpt
