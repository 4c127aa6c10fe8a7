"""The class rules: one per failure mechanism, whoever prints it, with the wording's sources named.

Covers the Rule type and the table of class rules (a regex per mechanism as sglang, vLLM, aiter,
composable_kernel, HIP/HSA, RCCL, PyTorch c10d, gloo, the build tools and Triton word it). A rule describes a
mechanism (every KeyError on a quantised parameter name), never one log's text. The rules that read the
toolchain's own diagnostics (compilers, linkers, CMake, the CUDA toolkit asked for on ROCm) and their grammar
live in toolchain.py and come first (rules.RULES); how a line is classified, the generic error rules and the
precedence rules live in rules.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

DTYPE = re.compile(
    r"(?i:\b(?:torch\.)?(?:float8_e\w+|float8\w*|fp8e\w+|fp8_e\w+|e4m3\w*|e5m2\w*|e8m0\w*|float4_e\w+|mxfp4|fp4\w*"
    r"|bfloat16|bf16|float16|fp16|half|int4|uint4|int8|uint8|dtype)\b)"
)
UNSUPPORTED = re.compile(
    r"(?i:not supported|unsupported|not supports?\b|does not support|no support|not implemented|should be one of"
    r"|not available (?:on|for|in))"
)


@dataclass(frozen=True)
class Rule:
    name: str
    category: str
    score: int
    needs: tuple[str, ...]  # lower-case words one of which a matching line must contain: skips the regex cheaply
    pattern: re.Pattern[str]  # written as a string; compiled when the rule is made
    # searched in the match's `message` group (a pattern, or a function returning what it found or None)
    message_must_match: re.Pattern[str] | Callable[[str], object] | None = None
    confidence: float = 0.8  # how far a match alone decides the class (the finding reports it)
    # The layer beneath the engines whose fixed wording this rule reads, with the upstream file that emits it,
    # when several engines surface that wording; empty for an engine's own sentences. A rule that names a layer
    # is kept on for a held-out source by the layered leave-one-source-out figure (rules.RUNTIME_LAYER_RULES),
    # so everything its pattern reads must be that layer's wording.
    layer: str = ""
    # The line is this layer's own report, whatever failed call it quotes: no other rule (nor a status code) reads
    # it, and a Python exception re-raising it outranks nothing (the earliest report names the failing call).
    claims_line: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "pattern", re.compile(self.pattern))

    def matches(self, text: str, present: set[str]) -> bool:
        """`present`: the gate words the line holds (`gate_words`)."""
        if present.isdisjoint(self.needs):
            return False
        match = self.pattern.search(text)
        if not match or self.message_must_match is None:
            return match is not None
        message = match.groupdict().get("message") or text
        check = self.message_must_match
        return (check.search(message) if isinstance(check, re.Pattern) else check(message)) is not None


# Ordered by score, except that a rule which claims its line (Rule.claims_line) sits before the rules whose words
# that line may also hold; the first rule that matches a line decides its class (toolchain.TOOLCHAIN_RULES come
# before these). The score is the precedence when findings compete (report.py; rules.py's docstring tabulates
# it): the toolchain's diagnostics, then the lines that name a root cause (shapes, quantised names, budgets,
# dtypes, memory, faults, code objects, collectives, a library's refusal), then status codes by their confidence
# (status.py), then start-up that never completes, then the wrappers that only say something failed (build tool,
# generic exceptions, error lines, process death), and last the performance warnings.
RULES: tuple[Rule, ...] = (
    # The collective library's own report (RCCL keeps NCCL's words: src/include/checks.h WARN("Cuda failure '%s'")
    # after a failed HIP call, debug.h "NCCL WARN", ncclGetErrorString's texts, PyTorch ProcessGroupNCCL.cpp's
    # "NCCL error in: ..." and its watchdog's "Process group watchdog thread terminated with exception: <error>"):
    # the failing call it quotes (out of memory, an illegal access) is what the library saw, the failure is the
    # communicator's. It claims its line so that a memory word on it does not make it a memory failure.
    Rule(
        "collective_library_report",
        "comm_error",
        85,
        ("nccl", "rccl", "cuda failure", "hip failure", "unhandled", "remote process exited", "watchdog thread"),
        r"\b[NR]CCL WARN\b|\b[NR]CCL (?:error|Error|ERROR|failure)\b|\bnccl\w*Error\b|NCCL communicator was aborted"
        r"|\b(?:Cuda|CUDA|HIP|Hip) failure (?:\d+ )?'|unhandled (?:cuda|system) error"
        r"|remote process exited or there was a network error|please report this issue to the NCCL developers"
        r"|\bTest [NR]CCL failure|(?i:watchdog thread terminated with exception)",
        layer="RCCL/NCCL (src/include/checks.h 'Cuda failure', debug.h 'NCCL WARN', ncclGetErrorString), PyTorch "
        "torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp ('NCCL error in:', the watchdog's termination)",
        claims_line=True,
    ),
    Rule(
        "torch_shape_mismatch",
        "shape_mismatch",
        92,
        ("mismatch", "shape", "must match the size"),
        r"(?i)size mismatch|shape mismatch|mismatch(?:ed)? (?:in )?shapes?\b|copying a param with shape"
        r"|must match the size of tensor",
        confidence=0.9,
        layer="PyTorch: torch/nn/modules/module.py load_state_dict ('size mismatch for ...: copying a param with "
        "shape'), aten/src/ATen/ExpandUtils.cpp ('The size of tensor a (..) must match the size of tensor b')",
    ),
    Rule(
        "weight_loader_shape",
        "shape_mismatch",
        92,
        ("shape", "attempted to load"),
        # The engines' loader asserts (`param_data.shape`, `loaded_weight.shape`, vLLM's "Attempted to load weight")
        # and any two shapes compared in an assert message ("a.shape=[..] vs b.shape=[..]"): engines' own wording.
        r"(?i)param_data\.shape|loaded_weight\.shape|attempted to load weight \("
        r"|shapes?\b\S{0,40}\s*(?:vs\.?|!=|does not match|do not match|doesn't match)\s",
        confidence=0.9,
    ),
    # One mechanism: the memory left for the KV cache after weights (and graphs) is negative, zero or short of
    # what was asked, so the engine refuses to start or starts with a pool it cannot use. sglang
    # srt/model_executor/model_runner.py "max_total_tokens=N is larger than the profiled value -M" and "Not
    # enough memory. Please try to increase --mem-fraction-static"; vLLM v1/worker/gpu_worker.py "Available KV
    # cache memory: -0.3 GiB" and "Free memory on device (...) on startup is less than desired GPU memory
    # utilization", v1/core/kv_cache_utils.py "No available memory for the cache blocks", "... KV cache is
    # needed, which is larger than the available KV cache memory", "GPU KV cache size: 0 tokens".
    Rule(
        "memory_budget_exhausted",
        "out_of_memory",
        92,
        ("profiled value", "max_total_num_tokens", "memory", "kv cache"),
        r"(?i)(?:profiled value|kv cache memory|max_total_num_tokens)\W{0,3}-\d|kv cache size: 0 tokens"
        r"|not enough memory|no available memory for the cache blocks|larger than the available kv cache memory"
        r"|insufficient (?:gpu |device )?memory|free memory on device .{0,80} is less than desired"
        r"|larger than the maximum number of tokens that can be stored in kv cache",
    ),
    Rule(
        "triton_out_of_resources",
        "compile_error",
        91,
        (
            "outofresources",
            "out of resource",
            "compil",
            "error building",
            "undefined",
            "llvm error",
            "backend",
            "passmanager",
            "mlir pass",
        ),
        r"OutOfResources|out of resource: (?:shared memory|registers)|CompilationError|CompileError"
        r"|Error building extension|undefined symbol|LLVM ERROR|PassManager::run failed"
        r"|failures have been detected while processing an MLIR pass pipeline"
        r"|compilation (?:failed|terminated)|failed to compile|error in backend|BackendCompilerFailed|InductorError",
        layer="Triton (runtime/errors.py OutOfResources, compiler/errors.py CompilationError, the backends' "
        "'PassManager::run failed'), MLIR (lib/Pass/PassManager 'failures have been detected while processing an "
        "MLIR pass pipeline'), LLVM ('LLVM ERROR', 'error in backend'), PyTorch (utils/cpp_extension.py 'Error "
        "building extension', Inductor's BackendCompilerFailed), glibc's loader ('undefined symbol' at import)",
    ),
    # A quantised tensor the model's parameters do not hold, or the reverse, read through Python's KeyError and
    # AttributeError and PyTorch's load_state_dict key lists: the names are the quantisation formats' own
    # (compressed-tensors and Quark weight_scale/input_scale, GPTQ/AWQ qweight/qzeros/scales/g_idx, FP8 block
    # scales); vLLM's and sglang's loaders both fail this way (vllm/model_executor/models/*.py and
    # python/sglang/srt/models/*.py: `param = params_dict[name]`).
    Rule(
        "quantized_param_unplaced",
        "quant_config_mismatch",
        91,
        ("keyerror", "has no attribute", "key"),
        r"KeyError: '[\w.]*(?:scale|qweight|qzeros|scales|g_idx|zero_point|zeros|packed|blockscale|quant)\w*'"
        r"|has no attribute '\w*(?:weight|scale|qzeros|g_idx|zero_point)\w*'"
        r"|(?i:(?:unexpected|missing) keys?\b.{0,120}(?:_scale|qweight|qzeros|g_idx|zero_point|blockscale))",
        # Seen in vLLM (vllm-project/llm-compressor#959, ROCm/vllm#555) and sglang (sgl-project/sglang#3604,
        # #25792: "KeyError: 'model.layers.18.mlp.down_proj.weight_scale'", "...qkv_proj.k_scale").
        layer="CPython's KeyError/AttributeError on a checkpoint format's tensor name (the loaders' "
        "`params_dict[name]`), PyTorch torch/nn/modules/module.py load_state_dict ('Missing/Unexpected key(s)')",
    ),
    Rule(
        "quant_loader_wording",  # the engines' words: vLLM and sglang "Parameter X not found in params_dict"
        "quant_config_mismatch",
        91,
        ("quant", "not found in"),
        r"\b[\w.]*(?:_scale|qweight|qzeros|scales|g_idx|zero_point|blockscale)\w*'? (?:is )?not found in "
        r"|(?i:(?:unknown|unsupported|invalid) quantization (?:method|scheme|type)"
        r"|quant(?:ization)?[ _]config\S* (?:not found|is missing|mismatch|does not))",
    ),
    # composable_kernel's IsSupportedArgument verdict: the instance compiled for this op cannot run this problem.
    # CK words it "wrong! <op> with the specified compilation parameters does not support this GEMM problem"
    # (profiler/include/profiler/profile_*_impl.hpp, examples) or "... does not support this problem"; aiter's CK
    # wrappers throw the same sentence (csrc/ck_gemm_moe_2stages_codegen/gemm_moe_ck2stages_common.cuh) or
    # TORCH_CHECK(device_gemm.IsSupportedArgument(argument), "This GEMM is not supported!")
    # (csrc/ck_gemm_a8w8*/include/*_common.cuh). vLLM surfaces both through aiter (vllm-project/vllm#22245,
    # #35637, #39485; ROCm/aiter#915, #4634 show vLLM call paths).
    Rule(
        "ck_rejects_problem",
        "unsupported_arch_or_kernel",
        91,  # the library's verdict on this exact problem: a dtype named beside it is context, not the cause
        ("problem", "compilation parameters", "gemm is not supported", "issupportedargument"),
        r"(?i)does not support this (?:\w+ )?problem|with the specified compilation parameters"
        r"|\bthis gemm is not supported|IsSupportedArgument",
        confidence=0.7,
        layer="composable_kernel's IsSupportedArgument verdict as CK (profiler/include/profiler/profile_*_impl.hpp) "
        "and aiter's CK wrappers (csrc/ck_gemm_moe_2stages_codegen/gemm_moe_ck2stages_common.cuh, "
        "csrc/ck_gemm_a8w8*/include/*_common.cuh) word it",
    ),
    Rule(
        "dtype_unsupported",
        "dtype_unsupported",
        90,
        ("support", "implemented", "should be one of", "not available"),
        r"^(?=.*" + DTYPE.pattern + r")(?=.*(?:" + UNSUPPORTED.pattern + "))",
    ),
    Rule(
        "hip_out_of_memory",
        "out_of_memory",
        90,
        ("memory", "oom"),
        r"(?i:out of memory)|OutOfMemoryError|hipErrorOutOfMemory|HIP_ERROR_OUT_OF_MEMORY|Cannot allocate memory"
        r"|oom-kill|oom_kill|\bOOM\b|MemoryError",
        confidence=0.9,
        layer="PyTorch c10/cuda/CUDACachingAllocator.cpp ('HIP out of memory. Tried to allocate'), HIP status "
        "names, libc's ENOMEM text, the Linux OOM killer, CPython's MemoryError",
    ),
    Rule(
        "cuda_only_import",
        "missing_rocm_guard",
        89,
        ("import", "no module named"),
        r"(?:ImportError|ModuleNotFoundError|No module named|cannot import name)\b.{0,160}"
        r"\b(?:(?:vllm_)?flash_attn\w*|flashinfer\w*|_?flash_?mla\w*|deep_gemm|deep_ep|cutlass\w*|nvidia\w*|pynvml"
        r"|cupy\w*|pycuda|nvshmem\w*|tensorrt\w*|transformer_engine|cuda(?:_\w+)?|xformers"
        r"|triton\.backends\.nvidia\w*)\b",
        confidence=0.6,
        layer="CPython's import errors (Python/ceval.c 'cannot import name', importlib 'No module named') naming "
        "CUDA-only packages (flash-attn, FlashInfer, DeepGEMM, CUTLASS, xFormers, CuPy, NVIDIA's wheels)",
    ),
    Rule(
        "memory_access_fault",
        "gpu_memory_fault",
        88,
        ("memory access fault", "page fault", "protection_fault", "utcl2", "gfxhub", "mmhub"),
        r"Memory access fault by GPU|(?i:memory access fault)|(?i:amdgpu\b.{0,100}(?:page fault|retry fault))"
        r"|\[(?:gfx|mm)hub\d*\] (?:\w+ )?page fault|VM_L2_PROTECTION_FAULT|Faulty UTCL2",
        confidence=0.9,
        layer="ROCR-Runtime core/runtime/runtime.cpp ('Memory access fault by GPU node-%u ... Reason'), the amdgpu "
        "kernel driver's VM fault lines (gmc_v9_0.c '[gfxhub] page fault', 'VM_L2_PROTECTION_FAULT_STATUS')",
    ),
    Rule(
        "no_code_object",
        "unsupported_arch_or_kernel",
        86,
        ("nobinary", "kernel image", "device function", "devicefunction", "code object", "hipmoduleload", "arch"),
        r"hipErrorNoBinaryForGpu|no kernel image is available|invalid device function|hipErrorInvalidDeviceFunction"
        r"|(?i:no (?:compatible )?code objects?)|hipModuleLoad\S*.{0,120}(?:fail|not found|error)"
        r"|fail(?:ed)? to (?:call )?hipModuleLoad|(?i:for (?:gpu |the )?arch(?:itecture)?\s*:?\s*gfx\d)"
        r"|(?i:(?:not compiled|no (?:kernels?|library|code) (?:built )?)for (?:this |the )?(?:arch|gfx|gpu))",
        layer="HIP (clr hipamd/src/hip_fatbin.cpp 'No compatible code objects found for: gfx..', "
        "hipErrorNoBinaryForGpu and hipErrorInvalidDeviceFunction names and texts, hipModuleLoad)",
    ),
    Rule(
        "gpu_hang",
        "other",  # the labelled logs call a hang unexplained: the queue died, no class names why
        86,
        ("hw exception", "gpu hang", "gpu reset", "timedout", "ring "),
        r"HW Exception by GPU|GPU Hang|(?i:amdgpu\b.{0,100}(?:GPU reset|ring \S+ timeout|job timed ?out))"
        r"|amdgpu_job_timedout",
        confidence=0.5,
        layer="ROCR-Runtime core/runtime/runtime.cpp ('HW Exception by GPU node-%u ... reason :GPU Hang'), the amdgpu "
        "kernel driver (amdgpu_job.c 'ring .. timeout', GPU reset)",
    ),
    # A collective, its process group or its transport failing or stuck, in the words of the layers that run them:
    # PyTorch c10d (ProcessGroupNCCL.cpp's watchdog "Watchdog caught collective operation timeout", "Timeout at
    # NCCL work", "Heartbeat monitor timed out!", DistBackendError/DistNetworkError/DistStoreError, TCPStore,
    # socket.cpp's "[c10d] The client socket has failed to connect"), gloo (gloo/transport/tcp/pair.cc "Read
    # error ...: Connection reset by peer"), a collective named beside a timeout or a failure, an engine's
    # scheduler watchdog, and libibverbs' work-completion statuses. A reset with no process group around it (an
    # HTTP client hanging up) is not one.
    Rule(
        "collective_failure",
        "comm_error",
        85,
        (
            *("collective", "watchdog", "processgroup", "process group", "distbackend", "distnetwork", "diststore"),
            *("tcpstore", "rendezvous", "reduce", "gather", "barrier", "broadcast", "all_to_all", "alltoall"),
            *("transport", "ibv", "rdma", "retry counter", "nccl", "gloo", "c10d", "socket has", "heartbeat"),
            *("socket timeout", "ranks", "peeraccess", "peer access"),
        ),
        r"(?i:collectives?\b.{0,60}(?:mismatch|differ|timeout|timed out|fail))"
        r"|(?i:mismatch between collectives)|Watchdog caught|(?i:process ?group\S* watchdog)|ProcessGroup(?:NCCL|Gloo)"
        r"|\bWorkNCCL\b|Timeout at NCCL work|(?i:heartbeat monitor timed out|\bwatchdog (?:timeout|timed out)\b)"
        r"|(?i:detected by watchdog|NCCL operations have failed or timed out|\bsocket timeout\b)"
        r"|hipErrorPeerAccess\w+|(?i:peer access is not (?:supported|enabled))"
        r"|(?i:\b(?:timed out|timeout)\b.{0,40}\b(?:all|other|remote|peer) ranks?\b)"
        r"|DistBackendError|DistNetworkError|DistStoreError|TCPStore|(?i:rendezvous)|(?i:nccl communicator)"
        r"|(?i:\b(?:all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|broadcast|barrier)\w* .{0,40}"
        r"(?:failed|error|timed out))|gloo/transport|(?i:\bgloo\b.{0,160}(?:error|timed out|closed|reset|refused))"
        r"|\[c10d\].{0,200}(?:failed|timed out|reset by peer|refused|closed)"
        r"|(?i:(?:client|server) socket has (?:failed|timed out))"
        r"|(?i:transport retry counter exceeded|RNR retry counter exceeded|IBV_WC_\w+_ERR|ibv_\w+\W.{0,40}fail"
        r"|rdma\w*\b.{0,60}(?:error|fail))",
        layer="PyTorch c10d (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp watchdog and heartbeat monitor, "
        "DistBackendError, TCPStore, socket.cpp), gloo (gloo/transport/tcp/pair.cc), libibverbs work-completion "
        "statuses",
    ),
    # Any other refusal of the problem a kernel, a library or a platform was handed: PyTorch's SDPA dispatcher
    # ("No available kernel"), rocBLAS/hipBLASLt solutions, platform refusals ("only supported on CUDA").
    Rule(
        "kernel_rejects_problem",
        "unsupported_arch_or_kernel",
        84,
        ("support", "requires cuda", "not available", "kernel", "instance found"),
        r"(?i)(?:gemm|kernel|instance|problem|arch\w*|gfx\d\w*|device|gpu|platform|backend|solution)"
        r"\b.{0,60}(?:not supported|unsupported|does not support)"
        r"|(?:not supported|unsupported|does not support).{0,60}\b(?:gemm|kernel|arch\w*|gfx\d\w*|device|gpu|platform)"
        r"|requires cuda|not available on (?:rocm|hip|amd)|only supported on (?:cuda|nvidia)"
        r"|no (?:available|suitable|valid|matching) kernel|no (?:kernel )?instance found",
        confidence=0.7,
    ),
    Rule(
        "kernel_tuning_unsupported",  # aiter's tuners' wording: "Fmoe tuning not support for", "No support" cells
        "unsupported_arch_or_kernel",
        84,
        ("support",),
        r"(?i)\btun\w+\b.{0,60}(?:not supports?\b|unsupported)|\bno support\b",
        confidence=0.6,
    ),
    Rule(
        "other_memory_fault",
        "gpu_memory_fault",
        84,
        ("memory_fault", "memory fault", "illegal memory", "illegaladdress", "page fault", "error_exception"),
        r"MEMORY_FAULT|Memory Fault|illegal memory access|hipErrorIllegalAddress|(?i:gpu page fault)"
        r"|HSA_STATUS_ERROR_EXCEPTION",
        layer="HSA status names (hsa.h, hsa_ext_amd.h), HIP hipErrorIllegalAddress ('an illegal memory access was "
        "encountered')",
    ),
    # One mechanism: the server never finished starting, whether the engine gave up (a start-up timeout) or a
    # process is still waiting on something that never comes (a lock, a peer, a broadcast). The wording is the
    # engines' and their harnesses', from their sources: vLLM v1/engine/core_client.py "Timed out waiting for
    # engines to send initial message on input socket", vLLM distributed/device_communicators/shm_broadcast.py
    # "No available shared memory broadcast block found in N seconds", vLLM tests/utils.py (RemoteOpenAIServer)
    # "Server failed to start in time", sglang srt/entrypoints/http_server_engine.py and test/test_utils.py
    # "Server failed to start within the timeout period", aiter jit/utils/file_baton.py (PyTorch's FileBaton)
    # "waiting for baton release at <lock>", porter serve.py "startup timeout: ... did not answer 200".
    Rule(
        "startup_stalled",
        "startup_timeout",
        72,
        (
            *("still", "stuck", "hang", "hung", "deadlock", "waiting for", "no available", "no progress", "not ready"),
            *("timeout", "timed out", "did not", "didn't", "failed to start", "times out"),
        ),
        r"(?i)\bstill (?:starting|loading|initiali[sz]ing|waiting|compiling|not (?:up|ready|healthy))\b"
        r"|\b(?:stuck|hangs?|hung|hanging)\b.{0,40}\b(?:at|on|in|during|while|after|when)\b"
        r"|\bdeadlock|waiting for (?:the )?(?:baton|lock|file lock)\b|no progress (?:for|in|after)\b"
        r"|not ready after\b|no available shared memory broadcast block found in"
        r"|(?:startup|start-up|server init|init|launch|boot)\w* timeout"
        r"|(?:timed out|timeout) (?:while )?waiting for (?:the )?(?:server|engine|health|model)"
        r"|initiali[sz]ation timed out"
        r"|server (?:did not|didn't) (?:become|start|answer)|did not answer 200|did not become (?:healthy|ready)"
        r"|failed to start (?:within|in time)|times out after .{0,60}(?:server|init|startup|start-up)"
        r"|server failed to start",
        confidence=0.7,
    ),
    Rule(
        "prebuilt_kernel_module_missing",
        "unsupported_arch_or_kernel",
        71,  # a kernel library that ships per-arch modules has none for this GPU: it JIT-builds or fails
        ("no module named",),
        r"(?i:No module named '[\w.]*\bjit\.module_\w*')",
        confidence=0.4,
    ),
    # A build tool's own summary that a build failed: ninja, make, collect2, setuptools ("error: command 'hipcc'
    # failed"), subprocess.CalledProcessError on a compiler, PyTorch cpp_extension ("Error compiling objects for
    # extension"), pip and uv ("Failed to build <pkg>", "Failed building wheel for <pkg>") and the JIT builders
    # that wrap them (aiter jit/core.py "failed jit build [<module>]", "build [<module>] under <dir> failed").
    Rule(
        "build_failed",
        "compile_error",
        60,  # the build tool's summary or a wrapper around a build: the first compiler error beats it
        (
            *("ninja", "error: command", "build", "collect2", "calledprocesserror", "make", "error compiling"),
            *("linker command failed", "did not run successfully", "could not build"),
        ),
        r"ninja: build stopped|^ninja: error:|(?i:error: command .{0,80}(?:hipcc|clang|g\+\+|gcc|nvcc))"
        r"|collect2: error:|linker command failed"
        r"|(?i:\bfail(?:ed|ure)? (?:\w+ ){0,2}?build(?:ing)?\b|\bbuild\b.{0,200}\bfailed\b)"
        r"|\bmake(?:\[\d+\])?: \*\*\* .{0,200}(?:Error \d|Stop\.)|(?i:building \w+ .{0,80}did not run successfully)"
        r"|(?i:could not build wheels for)"
        r"|CalledProcessError: Command .{0,300}\b(?:clang\+\+|clang|hipcc|amdclang\+\+|g\+\+|gcc|nvcc|ninja|make"
        r"|cmake)\b"
        r"|Error compiling objects for extension",
        confidence=0.6,
    ),
)
