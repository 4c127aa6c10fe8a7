"""What a log line means: the failure classes, their rules, and how specific each match is.

Covers the table of class rules (one regex per way a class shows up in sglang, vLLM, aiter, HIP/HSA,
RCCL, compiler and Triton output), generic error and exception lines, healthy-start markers and the
kernel hints used to blame a memory fault. Rules describe classes (every KeyError on a quantised
parameter name), never one log's text. Facts extraction lives in facts.py; state in scanner.py.

Scores order the classes when one log shows several: the more a line names a root cause, the higher
its score (a first compiler `error:` beats the build tool's final "subcommand failed"; a negative KV
budget beats the memory fault it later causes; any crash beats a slow-fallback warning).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ahocorasick_rs import AhoCorasick

from porter.triage.status import status_class

CATEGORIES = (
    "shape_mismatch",
    "quant_config_mismatch",
    "missing_rocm_guard",
    "unsupported_arch_or_kernel",
    "out_of_memory",
    "dtype_unsupported",
    "compile_error",
    "comm_error",
    "gpu_memory_fault",
    "startup_timeout",
    "slow_fallback_perf",
    "other",
)

EXCEPTION_BONUS = 3  # a raised exception outranks a log line of the same class: it is what stopped the process
GENERIC_EXCEPTION_SCORE = 55
WEAK_SCORE = 60  # lines scoring below this that were logged before a healthy start are not failures

COMPILER_DIAGNOSTIC = re.compile(
    r"(?:^|[\s(])(?P<file>[^\s:()'\"]+\.(?:c|cc|cpp|cxx|cu|cuh|h|hh|hpp|hip|inc|inl|cl))"
    r"(?::(?P<line>\d+)(?::(?P<column>\d+))?:|\((?P<nvcc_line>\d+)\):)\s*(?:fatal\s+)?error:\s*(?P<message>.*)"
)
CUDA_ONLY = re.compile(
    r"\b(?:cuda_runtime\w*(?:\.h)?|cuda_\w+\.h|cuda\.h|cuda[A-Z]\w*|CUDA_[A-Z_]+|cuda_bf16|__nv_\w+|nv_bfloat16\w*"
    r"|cublas\w*|cusparse\w*|curand\w*|cufft\w*|cusolver\w*|nvrtc\w*|nvToolsExt\w*|cutlass\w*|cub::\w+|thrust::cuda"
    r"|__shfl_\w*sync|__syncwarp|__nanosleep|nvcuda::\w+|wmma::\w+|cuda::\w+|ldmatrix|cp\.async|mma\.sync)"
)
DTYPE = re.compile(
    r"(?i:\b(?:torch\.)?(?:float8_e\w+|float8\w*|fp8e\w+|fp8_e\w+|e4m3\w*|e5m2\w*|e8m0\w*|float4_e\w+|mxfp4|fp4\w*"
    r"|bfloat16|bf16|float16|fp16|half|int4|uint4|int8|uint8|dtype)\b)"
)
# A compiler or linker driver speaking for itself (no file:line): `clang++: error: ...`, `ld.lld: error: ...`,
# `fatal error: error in backend: ...` (LLVM). collect2's summary is a wrapper (build_failed).
COMPILER_DRIVER = re.compile(
    r"^(?:\S*/)?(?:clang|clang\+\+|amdclang\+\+|amdclang|hipcc|hipcc\.pl|gcc|g\+\+|c\+\+|cc1plus|nvcc|ld|ld\.lld"
    r"|ld\.gold|lld)(?:-\d+)?: (?:fatal )?error: (?P<message>.*)|fatal error: error in backend: (?P<backend>.*)"
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
    pattern: re.Pattern[str]
    needs: tuple[str, ...]  # lower-case words one of which a matching line must contain: skips the regex cheaply
    message_must_match: re.Pattern[str] | None = None  # searched in the match's `message` group
    confidence: float = 0.8  # how far a match alone decides the class (the finding reports it)

    def matches(self, text: str, present: set[str]) -> bool:
        """`present`: the gate words the line holds (`gate_words`)."""
        if present.isdisjoint(self.needs):
            return False
        match = self.pattern.search(text)
        if not match or self.message_must_match is None:
            return match is not None
        return self.message_must_match.search(match.groupdict().get("message") or text) is not None


def _rule(name, category, score, needs: tuple[str, ...], pattern: str, message_must_match=None, confidence=0.8) -> Rule:
    return Rule(name, category, score, re.compile(pattern), needs, message_must_match, confidence)


# Ordered by score; the first rule that matches a line decides its class. The score is the precedence when
# findings compete (report.py): the compiler's own diagnostics (first `error:` wins, CUDA-only code makes it a
# missing guard), then the lines that name a root cause (shapes, quantised names, budgets, dtypes, memory,
# faults, code objects, collectives), then status codes by their confidence (status.py), then start-up
# stalls and timeouts, then the wrappers that only say something failed (build tool, generic exceptions,
# error lines, process death), and last the performance warnings.
RULES: tuple[Rule, ...] = (
    _rule("cuda_only_in_rocm_build", "missing_rocm_guard", 100, ("error:",), COMPILER_DIAGNOSTIC.pattern, CUDA_ONLY),
    _rule(
        "cuda_symbol_in_rocm_binary",
        "missing_rocm_guard",
        99,
        ("undefined",),
        r"undefined (?:symbol|reference to)\W+(?P<message>\S*(?:cuda[A-Z]|cublas|curand|cufft|cusparse|nvrtc)\S*)",
        CUDA_ONLY,
    ),
    _rule("compiler_error", "compile_error", 95, ("error:",), COMPILER_DIAGNOSTIC.pattern, confidence=0.9),
    _rule("compiler_driver_error", "compile_error", 95, ("error:", "error in backend"), COMPILER_DRIVER.pattern),
    _rule(
        "torch_shape_mismatch",
        "shape_mismatch",
        92,
        ("mismatch", "shape", "must match the size"),
        r"(?i)size mismatch|shape mismatch|mismatch(?:ed)? (?:in )?shapes?\b|copying a param with shape"
        r"|must match the size of tensor|shapes?\b\S{0,40}\s*(?:vs\.?|!=|does not match|do not match|doesn't match)\s",
        confidence=0.9,
    ),
    _rule(
        "weight_loader_shape",
        "shape_mismatch",
        92,
        ("shape", "attempted to load"),
        r"(?i)param_data\.shape|loaded_weight\.shape|attempted to load weight \(",
        confidence=0.9,
    ),
    # One mechanism: the memory left for the KV cache after weights (and graphs) is negative, zero or short of
    # what was asked, so the engine refuses to start or starts with a pool it cannot use. sglang
    # srt/model_executor/model_runner.py "max_total_tokens=N is larger than the profiled value -M" and "Not
    # enough memory. Please try to increase --mem-fraction-static"; vLLM v1/worker/gpu_worker.py "Available KV
    # cache memory: -0.3 GiB" and "Free memory on device (...) on startup is less than desired GPU memory
    # utilization", v1/core/kv_cache_utils.py "No available memory for the cache blocks", "... KV cache is
    # needed, which is larger than the available KV cache memory", "GPU KV cache size: 0 tokens".
    _rule(
        "memory_budget_exhausted",
        "out_of_memory",
        92,
        ("profiled value", "max_total_num_tokens", "memory", "kv cache"),
        r"(?i)(?:profiled value|kv cache memory|max_total_num_tokens)\W{0,3}-\d|kv cache size: 0 tokens"
        r"|not enough memory|no available memory for the cache blocks|larger than the available kv cache memory"
        r"|insufficient (?:gpu |device )?memory|free memory on device .{0,80} is less than desired"
        r"|larger than the maximum number of tokens that can be stored in kv cache",
    ),
    _rule(
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
            "linker",
            "backend",
        ),
        r"OutOfResources|out of resource: (?:shared memory|registers)|CompilationError|CompileError"
        r"|Error building extension|undefined symbol|undefined reference to|LLVM ERROR|linker command failed"
        r"|compilation (?:failed|terminated)|failed to compile|error in backend|BackendCompilerFailed|InductorError",
    ),
    # A quantised tensor the model's parameters do not hold, or the reverse, read through Python's KeyError and
    # AttributeError and PyTorch's load_state_dict key lists: the names are the quantisation formats' own
    # (compressed-tensors and Quark weight_scale/input_scale, GPTQ/AWQ qweight/qzeros/scales/g_idx, FP8 block
    # scales), and vLLM's and sglang's loaders look them up the same way (vllm/model_executor/models/*.py and
    # python/sglang/srt/models/*.py: `param = params_dict[name]`, "Parameter {name} not found in params_dict").
    _rule(
        "quantized_param_unplaced",
        "quant_config_mismatch",
        91,
        ("keyerror", "has no attribute", "not found in", "key"),
        r"KeyError: '[\w.]*(?:scale|qweight|qzeros|scales|g_idx|zero_point|zeros|packed|blockscale|quant)\w*'"
        r"|has no attribute '\w*(?:weight|scale|qzeros|g_idx|zero_point)\w*'"
        r"|\b[\w.]*(?:_scale|qweight|qzeros|scales|g_idx|zero_point|blockscale)\w*'? (?:is )?not found in "
        r"|(?i:(?:unexpected|missing) keys?\b.{0,120}(?:_scale|qweight|qzeros|g_idx|zero_point|blockscale))",
    ),
    _rule(
        "quant_method_unknown",  # the engine's own wording about its quantisation config
        "quant_config_mismatch",
        91,
        ("quant",),
        r"(?i:(?:unknown|unsupported|invalid) quantization (?:method|scheme|type)"
        r"|quant(?:ization)?[ _]config\S* (?:not found|is missing|mismatch|does not))",
    ),
    _rule(
        "dtype_unsupported",
        "dtype_unsupported",
        90,
        ("support", "implemented", "should be one of", "not available"),
        r"^(?=.*" + DTYPE.pattern + r")(?=.*(?:" + UNSUPPORTED.pattern + "))",
    ),
    _rule(
        "hip_out_of_memory",
        "out_of_memory",
        90,
        ("memory", "oom"),
        r"(?i:out of memory)|OutOfMemoryError|hipErrorOutOfMemory|HIP_ERROR_OUT_OF_MEMORY|Cannot allocate memory"
        r"|oom-kill|oom_kill|\bOOM\b|MemoryError",
        confidence=0.9,
    ),
    _rule(
        "cuda_only_import",
        "missing_rocm_guard",
        89,
        ("import", "no module named"),
        r"(?:ImportError|ModuleNotFoundError|No module named|cannot import name)\b.{0,160}"
        r"\b(?:flash_attn\w*|flashinfer\w*|deep_gemm|cutlass\w*|nvidia\w*|pynvml|cupy\w*|vllm_flash_attn|fa_utils"
        r"|cuda(?:_\w+)?|xformers|triton\.backends\.nvidia\w*)\b",
        confidence=0.6,
    ),
    _rule(
        "memory_access_fault",
        "gpu_memory_fault",
        88,
        ("memory access fault", "page fault", "protection_fault", "utcl2", "gfxhub", "mmhub"),
        r"Memory access fault by GPU|(?i:memory access fault)|(?i:amdgpu\b.{0,100}(?:page fault|retry fault))"
        r"|\[(?:gfx|mm)hub\d*\] (?:\w+ )?page fault|VM_L2_PROTECTION_FAULT|Faulty UTCL2",
        confidence=0.9,
    ),
    _rule(
        "no_code_object",
        "unsupported_arch_or_kernel",
        86,
        ("nobinary", "kernel image", "device function", "devicefunction", "code object", "hipmoduleload", "arch"),
        r"hipErrorNoBinaryForGpu|no kernel image is available|invalid device function|hipErrorInvalidDeviceFunction"
        r"|(?i:no (?:compatible )?code objects?)|hipModuleLoad\S*.{0,120}(?:fail|not found|error)"
        r"|fail(?:ed)? to (?:call )?hipModuleLoad|(?i:for (?:gpu |the )?arch(?:itecture)?\s*:?\s*gfx\d)"
        r"|(?i:(?:not compiled|no (?:kernels?|library|code) (?:built )?)for (?:this |the )?(?:arch|gfx|gpu))",
    ),
    _rule(
        "gpu_hang",
        "other",  # the labelled logs call a hang unexplained: the queue died, no class names why
        86,
        ("hw exception", "gpu hang", "gpu reset", "timedout", "ring "),
        r"HW Exception by GPU|GPU Hang|(?i:amdgpu\b.{0,100}(?:GPU reset|ring \S+ timeout|job timed ?out))"
        r"|amdgpu_job_timedout",
        confidence=0.5,
    ),
    _rule(
        "collective_failure",
        "comm_error",
        85,
        (
            "nccl",
            "rccl",
            "collective",
            "watchdog",
            "processgroup",
            "process group",
            "distbackend",
            "distnetwork",
            "diststore",
            "tcpstore",
            "rendezvous",
            "reduce",
            "transport",
            "ibv",
            "rdma",
        ),
        r"NCCL error|RCCL error|nccl\w*Error|ncclInternalError|ncclSystemError|ncclUnhandledCudaError|ncclRemoteError"
        r"|unhandled (?:cuda|system) error|NCCL WARN"
        r"|(?i:collectives?\b.{0,60}(?:mismatch|differ|timeout|timed out|fail))"
        r"|(?i:mismatch between collectives)|Watchdog caught|(?i:process ?group\S* watchdog)|ProcessGroupNCCL"
        r"|DistBackendError|DistNetworkError|DistStoreError|TCPStore|(?i:rendezvous)|(?i:nccl communicator)"
        r"|(?i:all_?reduce\S* .{0,40}(?:failed|error))"
        r"|(?i:transport retry counter exceeded|IBV_WC_\w+_ERR|ibv_\w+\W.{0,40}fail|rdma\w*\b.{0,60}(?:error|fail))",
    ),
    # A kernel library refusing the problem it was handed, in the libraries' own grammar: composable_kernel's
    # IsSupportedArgument verdict ("wrong! <op> with the specified compilation parameters does not support this
    # GEMM problem", CK examples and profiler; aiter csrc/ck_gemm_*/*_common.cuh wraps the same verdict as
    # TORCH_CHECK(..., "This GEMM is not supported!")), PyTorch's SDPA dispatcher ("No available kernel"),
    # rocBLAS/hipBLASLt solutions, platform refusals ("only supported on CUDA").
    _rule(
        "kernel_rejects_problem",
        "unsupported_arch_or_kernel",
        84,
        ("support", "requires cuda", "not available", "kernel", "instance found"),
        r"(?i)(?:gemm|kernel|instance|problem|arch\w*|gfx\d\w*|device|gpu|platform|backend|solution)"
        r"\b.{0,60}(?:not supported|unsupported|does not support)"
        r"|(?:not supported|unsupported|does not support).{0,60}\b(?:gemm|kernel|arch\w*|gfx\d\w*|device|gpu|platform)"
        r"|does not support this \w+ problem|requires cuda|not available on (?:rocm|hip|amd)"
        r"|only supported on (?:cuda|nvidia)"
        r"|no (?:available|suitable|valid|matching) kernel|no (?:kernel )?instance found|IsSupportedArgument",
        confidence=0.7,
    ),
    _rule(
        "kernel_tuning_unsupported",  # aiter's tuners' wording: "Fmoe tuning not support for", "No support" cells
        "unsupported_arch_or_kernel",
        84,
        ("support",),
        r"(?i)\btun\w+\b.{0,60}(?:not supports?\b|unsupported)|\bno support\b",
        confidence=0.6,
    ),
    _rule(
        "other_memory_fault",
        "gpu_memory_fault",
        84,
        ("memory_fault", "memory fault", "illegal memory", "illegaladdress", "page fault", "error_exception"),
        r"MEMORY_FAULT|Memory Fault|illegal memory access|hipErrorIllegalAddress|(?i:gpu page fault)"
        r"|HSA_STATUS_ERROR_EXCEPTION",
    ),
    # One mechanism: the server never finished starting, whether the engine gave up (a start-up timeout) or a
    # process is still waiting on something that never comes (a lock, a peer, a broadcast). The wording is the
    # engines' and their harnesses', from their sources: vLLM v1/engine/core_client.py "Timed out waiting for
    # engines to send initial message on input socket", vLLM distributed/device_communicators/shm_broadcast.py
    # "No available shared memory broadcast block found in N seconds", vLLM tests/utils.py (RemoteOpenAIServer)
    # "Server failed to start in time", sglang srt/entrypoints/http_server_engine.py and test/test_utils.py
    # "Server failed to start within the timeout period", aiter jit/utils/file_baton.py (PyTorch's FileBaton)
    # "waiting for baton release at <lock>", porter serve.py "startup timeout: ... did not answer 200".
    _rule(
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
    _rule(
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
    _rule(
        "build_failed",
        "compile_error",
        60,  # the build tool's summary or a wrapper around a build: the first compiler error beats it
        ("ninja", "error: command", "build", "collect2", "calledprocesserror", "make", "error compiling"),
        r"ninja: build stopped|(?i:error: command .{0,80}(?:hipcc|clang|g\+\+|gcc|nvcc))|collect2: error:"
        r"|(?i:\bfail(?:ed|ure)? (?:\w+ ){0,2}?build(?:ing)?\b|\bbuild\b.{0,200}\bfailed\b)"
        r"|\bmake(?:\[\d+\])?: \*\*\* .{0,200}Error \d"
        r"|CalledProcessError: Command .{0,300}\b(?:clang\+\+|clang|hipcc|amdclang\+\+|g\+\+|gcc|nvcc|ninja|make"
        r"|cmake)\b"
        r"|Error compiling objects for extension",
        confidence=0.6,
    ),
)

SLOW_FALLBACK = _rule(
    "untuned_shape",
    "slow_fallback_perf",
    15,
    ("tuned", "default", "optimal", "not found", "torch solution", "back", "slow", "overrid"),
    r"not found tuned config|(?i:using default (?:moe )?config)|sub-?optimal|using [12]stage default"
    r"|Config file not found"
    r"|(?i:no tuned|untuned)|will use default config|using torch solution|(?i:fall(?:ing)? ?back to (?:the |a )?"
    r"(?:slow|default|naive|reference|torch|triton))|(?i:slow (?:path|fallback))|fallback kernel"
    r"|(?i:overriding \S+ backend)",
    confidence=0.7,
)
# Probing for other vendors' platforms fails on every ROCm host: that is not the failure.
EXPECTED_ON_ROCM = re.compile(
    r"(?i)\b(?:cuda|tpu|xpu|hpu|neuron) platform\b|\bnvml\b|libtpu|intel_extension_for_pytorch|habana"
)
# A warning that says it falls back is a performance finding, even when it gives "unsupported" as the reason.
WARNING_LINE = re.compile(r"\b\w*Warning\b|\bWARN(?:ING)?\b|\bwarn(?:ing)?:")
DISPATCH_TRACE = _rule("last_dispatched_kernel", "gpu_memory_fault", 20, ("shadername",), r"ShaderName\s*:\s*\S+")

HIP_ERROR = re.compile(r"HIP error|hipError\w+|HSA_STATUS_ERROR_\w+|HSA_STATUS_\w+")
# Literal-first alternatives (no leading \\b\\w*): the regex engine then skips ahead by first character.
ERROR_WORD = re.compile(r"ERROR\b|Error\b|error:|FAILED\b|[Ff]ailed\b|fatal\b|Exception\b")
# What a C++ program, a scheduler or a node manager says when something died without a Python exception.
PLAIN_FAILURE = re.compile(
    r"^what\(\):|terminate called after throwing|(?i:\bnot responding\b|no such file or directory|\bunreachable\b"
    r"|connection refused|permission denied|segmentation fault)"
)
MISSING_MODULE = re.compile(r"No module named '[\w.]+'|cannot import name '\w+'")
DEATH = re.compile(
    r"exit code|exit status|exitcode|\bKilled\b|\bAborted\b|core dumped|SIGABRT|SIGKILL|SIGSEGV|sigquit|died"
)
NOT_AN_ERROR = re.compile(r"ServerArgs\(|non-default args|args=Namespace\(|error_?log|_error\w*=|0 errors?\b")
EXCEPTION_LINE = re.compile(
    r"^(?:[A-Za-z_]\w*\.)*(?P<name>[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure|OutOfResources|Warning))(?::\s?|$)"
)
TRACEBACK_START = re.compile(r"Traceback \(most recent")
FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+)(?:, in (?P<function>\S+))?')
CHAIN = re.compile(r"^(?:The above exception was the direct cause|During handling of the above exception)")
HEALTHY = re.compile(r"ready to roll|Application startup complete|Uvicorn running on")
KERNEL_HINT = re.compile(
    r"ShaderName\s*:\s*(?P<shader>\S+)|kernel(?: name)?\s*[:=]\s*(?P<kernel>[\w:<>.$-]+)"
    r"|finish build \[?(?P<built>[^\s\],]+)|start build \[?(?P<building>[^\s\],]+)"
    r"|\[fused_moe\] using (?P<moe>\w+ \w+)"
)
STATUS_NEEDS = ("status_", "rror_", "hiperror", "nccl", "hip error", "cuda error", "runtime error")
EXPECTED_NEEDS = ("platform", "nvml", "libtpu", "intel_extension", "habana")
NOT_AN_ERROR_NEEDS = ("serverargs(", "non-default args", "namespace(", "error")
# When no class rule matched: lines that still say something went wrong, strongest first (all class `other`).
GENERIC_RULES = (
    _rule("cpp_exception_message", "other", 52, ("what():",), r"^what\(\):", confidence=0.3),
    _rule("missing_module", "other", 50, ("no module named", "cannot import name"), MISSING_MODULE.pattern),
    _rule(
        "plain_failure",
        "other",
        46,
        ("terminate called", "not responding", "such file", "unreachable", "refused", "denied", "segmentation"),
        PLAIN_FAILURE.pattern,
    ),
    _rule("hip_runtime_error", "other", 45, ("hip error", "hiperror", "hsa_status"), HIP_ERROR.pattern),
    _rule("error_line", "other", 40, ("error", "failed", "fatal", "exception"), ERROR_WORD.pattern),
    _rule("process_died", "other", 30, ("exit", "killed", "aborted", "core dumped", "sig", "died"), DEATH.pattern),
)
COMPILER_RULES = frozenset({"cuda_only_in_rocm_build", "compiler_error", "compiler_driver_error"})
# Rule names switched off, for the leave-one-source-out benchmark only (benchmarks/triage_corpus.py).
DISABLED: set[str] = set()
# Rules that read a format's grammar rather than any engine's wording: Python exception lines and tracebacks,
# C++ terminate messages, compiler and linker diagnostics, the documented status codes (status.py). The strict
# leave-one-source-out figure never switches these off; every other rule may have been fitted to a source.
GRAMMAR_RULES = frozenset(
    {
        "exception",
        "unterminated_traceback",
        "missing_module",
        "cpp_exception_message",
        "plain_failure",
        "error_line",
        "process_died",
        "hip_runtime_error",
        "status_code",
        "compiler_error",
        "compiler_driver_error",
    }
)
# Rules that read the fixed messages of the layers beneath every engine (PyTorch, the HIP/HSA runtime and the
# amdgpu driver, RCCL and ibverbs, Triton/LLVM, CUDA API names in compiler and import errors, the kernel
# libraries' refusal of a problem, Python's lookup errors on the quantisation formats' tensor names),
# not the wording of sglang, vLLM or aiter themselves: the layered leave-one-source-out figure keeps these on too.
RUNTIME_LAYER_RULES = GRAMMAR_RULES | {
    "cuda_only_in_rocm_build",
    "cuda_symbol_in_rocm_binary",
    "torch_shape_mismatch",
    "triton_out_of_resources",
    "hip_out_of_memory",
    "cuda_only_import",
    "quantized_param_unplaced",
    "kernel_rejects_problem",
    "memory_access_fault",
    "no_code_object",
    "gpu_hang",
    "collective_failure",
    "other_memory_fault",
    "last_dispatched_kernel",
}


@dataclass(frozen=True)
class Match:
    rule: str
    category: str
    score: int
    confidence: float = 0.3


def _status_match(text: str) -> Match | None:
    found = None if "status_code" in DISABLED else status_class(text)
    if found is None:
        return None
    _, category, confidence = found
    return Match("status_code", category, 60 + round(30 * confidence), confidence)


def _rule_match(text: str, present: set[str]) -> Match | None:
    """The first rule (in score order) whose gate words the line holds and whose pattern matches."""
    for index in sorted({index for word in present for index in _RULES_BY_WORD.get(word, ())}):
        rule = RULES[index]
        if rule.name not in DISABLED and rule.matches(text, present):
            bonus = EXCEPTION_BONUS if EXCEPTION_LINE.match(text) else 0
            return Match(rule.name, rule.category, rule.score + bonus, rule.confidence)
    return None


def _best(*matches: Match | None) -> Match | None:
    found = [match for match in matches if match is not None]
    return max(found, key=lambda match: match.score) if found else None


def gate_words(lowered: str) -> set[str]:
    """The gate words (every rule's `needs`) a lower-cased line holds, in one Aho-Corasick pass."""
    return set(_GATE.find_matches_as_strings(lowered, overlapping=True))


def classify(body: str) -> Match | None:
    """The most specific class a (prefix-stripped) line shows, or None when it shows no problem. Every regex
    is gated by words its matches must contain: most lines that reach this point are prose, not failures."""
    text = body.strip()
    present = gate_words(text.lower())
    if not present:
        return None
    status = None if present.isdisjoint(STATUS_NEEDS) else _status_match(text)
    found = _best(_rule_match(text, present), status)
    fallback = SLOW_FALLBACK.matches(text, present)
    if fallback and found is not None and found.category in UNSUPPORTED_CLASSES and WARNING_LINE.search(text):
        found = None  # "unsupported ..., falling back": a warning about speed, not a failure
    if found is not None:
        return found
    if fallback:
        return Match(SLOW_FALLBACK.name, SLOW_FALLBACK.category, SLOW_FALLBACK.score, SLOW_FALLBACK.confidence)
    if not present.isdisjoint(EXPECTED_NEEDS) and EXPECTED_ON_ROCM.search(text):
        return None
    not_an_error = not present.isdisjoint(NOT_AN_ERROR_NEEDS) and NOT_AN_ERROR.search(text) is not None
    exception = EXCEPTION_LINE.match(text)
    if exception and not exception["name"].endswith("Warning") and not not_an_error:
        return Match("exception", "other", GENERIC_EXCEPTION_SCORE)
    if DISPATCH_TRACE.matches(text, present):
        return Match(DISPATCH_TRACE.name, DISPATCH_TRACE.category, DISPATCH_TRACE.score)
    if not_an_error:
        return None
    for rule in GENERIC_RULES:
        if rule.name not in DISABLED and rule.matches(text, present):
            return Match(rule.name, rule.category, rule.score, rule.confidence)
    return None


_GATE = AhoCorasick(
    sorted(
        {word for rule in (*RULES, SLOW_FALLBACK, DISPATCH_TRACE, *GENERIC_RULES) for word in rule.needs}
        | {*STATUS_NEEDS, *EXPECTED_NEEDS, *NOT_AN_ERROR_NEEDS}
    )
)
_RULES_BY_WORD: dict[str, list[int]] = {}
for _index, _class_rule in enumerate(RULES):
    for _word in _class_rule.needs:
        _RULES_BY_WORD.setdefault(_word, []).append(_index)
UNSUPPORTED_CLASSES = ("unsupported_arch_or_kernel", "dtype_unsupported")


def classify_exception(exception_line: str, last_source_line: str | None) -> Match:
    """Class of a traceback's final line; a bare `AssertionError` is read through the failing source line."""
    found = classify(exception_line)
    if found and (found.category != "other" or found.score > GENERIC_EXCEPTION_SCORE):
        return found
    if last_source_line:
        from_source = classify(last_source_line)
        if from_source and from_source.category != "other":
            score = from_source.score + EXCEPTION_BONUS
            return Match(from_source.rule, from_source.category, score, from_source.confidence)
    return Match("exception", "other", GENERIC_EXCEPTION_SCORE)


def kernel_hint(body: str) -> str | None:
    """The kernel or JIT module a line says is being built, selected or dispatched."""
    if not any(word in body for word in ("ShaderName", "kernel", "build", "[fused_moe]")):
        return None
    match = KERNEL_HINT.search(body)
    if not match:
        return None
    name = next(value for value in match.groups() if value)
    if match.group("built") or match.group("building"):
        name = re.sub(r"_[0-9a-f]{16,}$", "", name.rstrip("/").rsplit("/", 1)[-1])
    if match.group("moe"):
        name = f"fused_moe {match.group('moe')}"
    return name.strip("[],")
