"""Logs written here from the mechanisms (the toolchains' and libraries' own message formats: gcc, GNU ld, lld,
CMake, clang/hipcc, nvcc's driver, MLIR/Triton, aiter's JIT builder, PyTorch c10d, gloo, RCCL/NCCL, ROCr), in
spellings the shared corpus does not contain (the logs: tests/data/triage_written/). Each is checked for its
class, its key line, the file it implicates and its facts, plain and buried in healthy engine noise. None is
copied from ../shared/crashlogs: the last test checks that no line longer than 30 characters occurs in a corpus
log."""

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from triage_cases import crashlogs_dir, load_cases
from triage_noise import bury

from porter.triage import triage_text
from porter.triage.rules import CHAIN, TRACEBACK_START

WRITTEN_LOGS = Path(__file__).parent / "data" / "triage_written"


@dataclass(frozen=True)
class Written:
    slug: str  # the log is tests/data/triage_written/<slug>.log
    name: str
    category: str
    key: str  # the key line holds this text
    implicated: str | None  # the implicated file/function holds this text (None: nothing to implicate)
    facts: dict = field(default_factory=dict)  # facts the finding must carry (a subset)

    @property
    def log(self) -> str:
        return (WRITTEN_LOGS / f"{self.slug}.log").read_text()


GCC_TEMPLATE = Written(
    "gcc_template",
    "gcc template error in a system header, instantiated from the project's file",
    "compile_error",
    "stl_pair.h:535:11: error: no matching function for call to 'ExpertSlot::ExpertSlot(const char*)'",
    "/work/ext/csrc/topk.cpp:88",
    {"file": "/usr/include/c++/12/bits/stl_pair.h", "line": 535, "compiler": "c++"},
)

GNU_LD_UNDEFINED = Written(
    "gnu_ld_undefined",
    "GNU ld: an undefined reference while linking a shared library, then collect2 and make",
    "compile_error",
    "undefined reference to `paged_attention_v2_launcher<hip_bfloat16>(at::Tensor&, int)'",
    "paged_attention.hip",
    {"symbol": "paged_attention_v2_launcher<hip_bfloat16>(at::Tensor&, int)"},
)

LLD_UNDEFINED = Written(
    "lld_undefined",
    "lld: an undefined symbol with its referencing source, then clang's linker summary",
    "compile_error",
    "ld.lld: error: undefined symbol: rope_cos_sin_cache_launch(void*, int)",
    "/src/ops/rope.hip:212",
)

CMAKE_CUDA_TOOLKIT = Written(
    "cmake_cuda_toolkit",
    "CMake configure of a ROCm build asks for the CUDA toolkit",
    "missing_rocm_guard",
    "CMake Error at CMakeLists.txt:58 (find_package):",
    "CMakeLists.txt:58",
    {"api": "CUDAToolkit"},
)

TRITON_MLIR = Written(
    "triton_mlir",
    "Triton: an MLIR diagnostic at the kernel's Python line, then the pass manager gives up",
    "compile_error",
    "rmsnorm.py:61:16: error: operation scheduled before its operands",
    "/opt/engine/ops/triton/rmsnorm.py:61",
)

AITER_JIT_HISTORY = Written(
    "aiter_jit_history",
    "aiter's JIT builder: its history block (-->, colour around error:) holds the compiler's first error",
    "compile_error",
    "quant_kernels.cu:211:9: error: no matching function for call to 'scaled_cast'",
    "quant_kernels.cu:211",
)

CUB_HEADER = Written(
    "cub_header",
    "a hipified source still includes CUB (a CUDA-only header) under ninja",
    "missing_rocm_guard",
    "align_kernel.hip:23:10: fatal error: 'cub/cub.cuh' file not found",
    "/build/csrc/moe/align_kernel.hip:23",
    {"header": "cub/cub.cuh"},
)

DRIVER_API_LEFTOVER = Written(
    "driver_api_leftover",
    "hipify left CUDA driver API types and calls in a .hip file",
    "missing_rocm_guard",
    "custom_allreduce.hip:142:5: error: unknown type name 'CUdeviceptr'",
    "/build/csrc/custom_allreduce.hip:142",
    {"api": "CUdeviceptr"},
)

PTX_INLINE_ASM = Written(
    "ptx_inline_asm",
    "PTX inline assembly reaches the AMDGPU assembler (the CUDA-only text is in the quoted source, not the message)",
    "missing_rocm_guard",
    "cast.hip:40:18: error: invalid instruction",
    "/src/kernels/cast.hip:40",
    {"api": "cvt.rn.f16x2.f32"},
)

GCC_HASH_ERROR = Written(
    "gcc_hash_error",
    "gcc's #error spelling for a header that only has a CUDA branch",
    "missing_rocm_guard",
    'fp8_quant.cuh:11:2: error: #error "fp8_quant.cuh: no __HIP_PLATFORM_AMD__ branch; needs __CUDA_ARCH__ >= 890"',
    "/src/kernels/fp8_quant.cuh:11",
    {"macro": "__HIP_PLATFORM_AMD__"},
)

UNDEFINED_GUARD_MACRO = Written(
    "undefined_guard_macro",
    "a guard macro the ROCm build never defines, under -Werror",
    "missing_rocm_guard",
    "attention_dtypes.h:6:5: error: 'USE_ROCM' is not defined, evaluates to 0 [-Werror,-Wundef]",
    "csrc/attention/attention_dtypes.h:6",
    {"macro": "USE_ROCM"},
)

NVCC_NOT_FOUND = Written(
    "nvcc_not_found",
    "a Makefile calls nvcc on a ROCm node",
    "missing_rocm_guard",
    "/bin/sh: 1: nvcc: not found",
    "kernels/fused_rope.cu",
    {"api": "nvcc"},
)

CUDA_HOME_UNSET = Written(
    "cuda_home_unset",
    "PyTorch's extension builder asked for CUDA_HOME on a ROCm node",
    "missing_rocm_guard",
    "OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install root.",
    "/workspace/kernels/setup.py:40",
    {"api": "CUDA_HOME"},
)

CUDART_DLOPEN = Written(
    "cudart_dlopen",
    "a module loads the CUDA runtime by name at import",
    "missing_rocm_guard",
    "OSError: libcudart.so.12: cannot open shared object file: No such file or directory",
    "/opt/engine/kernels/__init__.py:7",
    {"api": "libcudart.so.12"},
)

TORCH_VERSION_CUDA = Written(
    "torch_version_cuda",
    "Python code reads torch.version.cuda, which is None on ROCm",
    "missing_rocm_guard",
    "AttributeError: 'NoneType' object has no attribute 'split'",
    "/opt/engine/layers/quant/fp8.py:33",
    {"api": "torch.version.cuda"},
)

RCCL_CUDA_FAILURE = Written(
    "rccl_cuda_failure",
    "RCCL reports a failed HIP call (out of memory) while connecting peers: a comm error, not a memory one",
    "comm_error",
    "NCCL WARN Cuda failure 'out of memory'",
    None,
    {"backend": "RCCL/NCCL"},
)

WATCHDOG_ILLEGAL_ACCESS = Written(
    "watchdog_illegal_access",
    "the process group's watchdog reports the HIP error its collective's completion check raised",
    "comm_error",
    "Process group watchdog thread terminated with exception: HIP error: an illegal memory access was encountered",
    None,
)

WATCHDOG_REPORTS_NEXT_LINE = Written(
    "watchdog_reports_next_line",
    "the watchdog's report ends in ':' and the HIP error it saw follows on the next line (the key line)",
    "comm_error",
    "HIP error: an illegal memory access was encountered",
    None,
)

GLOO_RESET = Written(
    "gloo_reset",
    "gloo's TCP pair loses its peer in the CPU process group's barrier",
    "comm_error",
    "Read error [10.4.0.7]:48211: Connection reset by peer",
    "/opt/engine/distributed/parallel_state.py:1210",
)

HEARTBEAT_TIMEOUT = Written(
    "heartbeat_timeout",
    "PyTorch's NCCL heartbeat monitor gives up on a stuck collective",
    "comm_error",
    "Timeout at NCCL work: 4411, last enqueued NCCL work: 4411, last completed NCCL work: 4410.",
    None,
)

SCHEDULER_WATCHDOG = Written(
    "scheduler_watchdog",
    "an engine's scheduler watchdog fires while every rank waits in a collective",
    "comm_error",
    "Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)",
    None,
)

IB_COMPLETION = Written(
    "ib_completion",
    "an RDMA completion error under RCCL's network transport",
    "comm_error",
    "NCCL WARN NET/IB : Got completion from peer 10.4.0.12<50123> with status=5",
    None,
)

FAULT_THEN_TIMEOUTS = Written(
    "fault_then_timeouts",
    "a kernel faults on one rank and the other ranks' collectives time out after it: the fault is the cause",
    "gpu_memory_fault",
    "Memory access fault by GPU node-5 (Agent handle: 0x61c0) on address 0x7ee1c0000000. Reason: Write access to a "
    "read-only page.",
    None,
)

OOM_IN_ALLREDUCE_BUFFER = Written(
    "oom_in_allreduce_buffer",
    "PyTorch's allocator runs out while a communicator's buffer is being made: out of memory, not comm",
    "out_of_memory",
    "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 4.00 GiB.",
    "/opt/engine/distributed/custom_all_reduce.py:77",
)

PROCESS_GROUP_CONNECTION_REFUSED = Written(
    "process_group_connection_refused",
    "a worker's connection to its peers is refused inside the engine's distributed package",
    "comm_error",
    "ConnectionRefusedError: [Errno 111] Connection refused",
    "/opt/engine/distributed/device_communicators/shm_broadcast.py:233",
)

HTTP_RESET_IS_NOT_COMM = Written(
    "http_reset_is_not_comm",
    "a client hangs up on the HTTP server: a reset with no process group around it is not a comm error",
    "other",
    "ConnectionResetError: [Errno 104] Connection reset by peer",
    None,
)

WRITTEN = [
    GCC_TEMPLATE,
    GNU_LD_UNDEFINED,
    LLD_UNDEFINED,
    CMAKE_CUDA_TOOLKIT,
    TRITON_MLIR,
    AITER_JIT_HISTORY,
    CUB_HEADER,
    DRIVER_API_LEFTOVER,
    PTX_INLINE_ASM,
    GCC_HASH_ERROR,
    UNDEFINED_GUARD_MACRO,
    NVCC_NOT_FOUND,
    CUDA_HOME_UNSET,
    CUDART_DLOPEN,
    TORCH_VERSION_CUDA,
    RCCL_CUDA_FAILURE,
    WATCHDOG_ILLEGAL_ACCESS,
    WATCHDOG_REPORTS_NEXT_LINE,
    GLOO_RESET,
    HEARTBEAT_TIMEOUT,
    SCHEDULER_WATCHDOG,
    IB_COMPLETION,
    FAULT_THEN_TIMEOUTS,
    OOM_IN_ALLREDUCE_BUFFER,
    PROCESS_GROUP_CONNECTION_REFUSED,
    HTTP_RESET_IS_NOT_COMM,
]


@pytest.mark.parametrize("written", WRITTEN, ids=[written.name for written in WRITTEN])
def test_a_log_written_from_the_mechanism_gets_its_class_key_line_and_file(written):
    result = triage_text(written.log)
    assert result.category == written.category, result.excerpt
    assert written.key in result.key_line, result.key_line
    if written.implicated is not None:
        assert result.implicated is not None and written.implicated in result.implicated, result.implicated
    assert written.facts.items() <= result.facts.items(), result.facts
    assert result.key_line in result.excerpt


@pytest.mark.parametrize("written", WRITTEN, ids=[written.name for written in WRITTEN])
def test_a_written_log_buried_in_noise_keeps_its_class_and_key_line(written):
    plain = triage_text(written.log)
    buried = triage_text(bury(written.log, count=5_000, seed=len(written.log))[0])
    assert (buried.category, buried.key_line) == (plain.category, plain.key_line)
    assert written.key in buried.excerpt


def test_a_cause_in_words_no_rule_reads_still_survives_noise_when_it_states_a_failed_comparison():
    # An engine's own check (no class rule knows its wording) fails, the engine goes on a while, then dies with
    # nothing more to say. The comparison line is kept in the excerpt, plain and buried, far from the death line's
    # context, and decides no class by itself.
    cause = "[2026-07-14 10:00:00 TP1] moe tile plan for gfx950: lds_bytes=163840 is larger than lds_limit=65536"
    healthy = [f"[2026-07-14 10:00:{second:02d} TP1] Capturing batches (bs={second})" for second in range(1, 11)]
    death = "[2026-07-14 10:00:12] Received sigquit from a child process. It usually means the child failed."
    log = "\n".join([cause, *healthy, death]) + "\n"
    plain = triage_text(log)
    buried = triage_text(bury(log, count=5_000, seed=7)[0])
    said = cause.split("] ", 1)[1]
    assert said in plain.excerpt and said in buried.excerpt
    assert plain.category == "other" and "sigquit" in plain.key_line  # the death leads; the comparison is shown
    assert triage_text(cause + "\n").category == "ok"  # a comparison alone is no failure


# One line per spelling of a mechanism (or of a line that must stay harmless), in the tools' own formats.
SPELLINGS = [
    ("missing_rocm_guard", "/tmp/tmpk2x/main.c:5:10: fatal error: cuda.h: No such file or directory"),
    (
        "compile_error",
        "subprocess.CalledProcessError: Command '['/usr/bin/gcc', '/tmp/tmpxyz/main.c', '-O3', "
        "'-shared']' returned non-zero exit status 1.",
    ),
    ("compile_error", "clang-19: error: unable to execute command: Killed"),
    ("compile_error", "LLVM ERROR: Cannot select: 0x55d: f16 = fp_round"),
    ("compile_error", "ninja: error: loading 'build.ninja': No such file or directory"),
    (
        "compile_error",
        "ERROR: Could not build wheels for vllm, which is required to install pyproject.toml-based projects",
    ),
    ("compile_error", "/usr/include/c++/13/tuple:1234:7: error: no matching function for call to 'get'"),
    ("compile_error", "<stdin>:3:5: error: unknown type name 'foo'"),
    (
        "compile_error",
        "RuntimeError: Error building extension 'x': b'[1/2] c++ -c a.cpp\\n/src/a.cpp:3:5: error: "
        "expected \\';\\'\\n'",
    ),
    ("compile_error", "/usr/bin/ld: final link failed: No space left on device"),
    (
        "compile_error",
        "/usr/bin/ld: x.o: relocation R_X86_64_32 against `.rodata' can not be used when making a "
        "shared object; recompile with -fPIC",
    ),
    ("compile_error", "/usr/bin/ld: b.o: multiple definition of `foo'; a.o:a.cpp:(.text+0x0): first defined here"),
    ("compile_error", "CMake Error at cmake/deps.cmake:12 (message):"),
    ("missing_rocm_guard", "ImportError: libcuda.so.1: cannot open shared object file: No such file or directory"),
    ("missing_rocm_guard", "nvcc fatal   : Unsupported gpu architecture 'compute_gfx942'"),
    ("missing_rocm_guard", "ptxas fatal   : Value 'sm_90a' is not defined for option 'gpu-name'"),
    ("missing_rocm_guard", "RuntimeError: CUDA_HOME is not set"),
    ("missing_rocm_guard", "FileNotFoundError: [Errno 2] No such file or directory: 'nvidia-smi'"),
    ("missing_rocm_guard", "bash: nvcc: command not found"),
    ("missing_rocm_guard", "/usr/bin/ld: cannot find -lcudart: No such file or directory"),
    ("missing_rocm_guard", "ImportError: cannot import name 'libdevice' from 'triton.language.extra.cuda'"),
    ("missing_rocm_guard", "ModuleNotFoundError: No module named 'vllm_flash_attn'"),
    ("missing_rocm_guard", "CMake Error: No CMAKE_CUDA_COMPILER could be found."),
    ("missing_rocm_guard", "k.hip:12:3: error: use of undeclared identifier '__ballot_sync'"),
    ("missing_rocm_guard", 'k.cu(88): error: identifier "cudaLaunchKernelEx" is undefined'),
    (
        "compile_error",
        "k.hip:12:3: error: cannot initialize a parameter of type 'cudaStream_t' (aka "
        "'ihipStream_t *') with an lvalue of type 'int'",
    ),
    (
        "comm_error",
        "torch.distributed.DistBackendError: NCCL error in: "
        "../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, invalid usage (run with NCCL_DEBUG=WARN "
        "for details), NCCL version 2.20.5",
    ),
    (
        "comm_error",
        "[E socket.cpp:957] [c10d] The client socket has timed out after 1800s while trying to "
        "connect to (10.0.0.1, 29500).",
    ),
    ("comm_error", "RuntimeError: Socket Timeout"),
    ("comm_error", "RuntimeError: custom allreduce failed"),
    (
        "comm_error",
        "[PG 0 Rank 0] Exception (either an error or timeout) detected by watchdog at work: 5, "
        "last enqueued NCCL work: 5, last completed NCCL work: 4.",
    ),
    (
        "comm_error",
        "  what():  [PG 0 Rank 3] Process group watchdog thread terminated with exception: CUDA "
        "error: an illegal memory access was encountered",
    ),
    ("comm_error", "node:1:2 [0] NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory"),
    ("comm_error", "RuntimeError: NCCL Error 3: internal error - please report this issue to the NCCL developers"),
    ("comm_error", "hipErrorPeerAccessUnsupported: peer access is not supported between these two devices"),
    ("comm_error", "RuntimeError: Timed out after 600 s waiting for all ranks to join the barrier"),
    (
        "gpu_memory_fault",
        "Memory access fault by GPU node-2 (Agent handle: 0x5) on address 0x7f. Reason: Page not "
        "present or supervisor privilege.",
    ),
    ("out_of_memory", "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 20.00 MiB."),
    ("other", "ConnectionResetError: [Errno 104] Connection reset by peer"),
    ("ok", "INFO 07-14 [x.py:1] Init torch distributed begin. timeout for collectives: 600 s"),
    (
        "ok",
        "DEBUG 07-14 [__init__.py:1] CUDA platform is not available because: libcudart.so.12: "
        "cannot open shared object file",
    ),
    ("ok", "node-0:1:1 [0] NCCL INFO NET/Plugin: Could not find: librccl-net.so. Using internal network plugin."),
    ("ok", "[2026] server_args=ServerArgs(watchdog_timeout=300, dist_timeout=None)"),
    (
        "ok",
        "[aiter] import [module_custom_all_reduce] under /sgl-workspace/aiter/aiter/jit/module_custom_all_reduce.so",
    ),
]


@pytest.mark.parametrize(("category", "line"), SPELLINGS, ids=[line[:60] for _, line in SPELLINGS])
def test_each_spelling_of_a_mechanism_gets_its_class(category, line):
    assert triage_text(line + "\n").category == category


def test_no_written_log_copies_a_line_of_the_shared_corpus():
    folder = crashlogs_dir()
    if not folder.is_dir():
        pytest.skip(f"no labelled crash logs at {folder}")
    corpus = "\n".join(case["log"] for case in load_cases(folder))
    written_lines = [(written.name, line) for written in WRITTEN for line in written.log.splitlines()]
    for name, line in written_lines + [("spellings", line) for _, line in SPELLINGS]:
        line = line.strip()
        boilerplate = len(line) <= 30 or TRACEBACK_START.search(line) or CHAIN.match(line)  # Python's own
        assert boilerplate or line not in corpus, (name, line)
