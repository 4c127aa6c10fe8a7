"""The grammar of toolchain messages and the names that exist only on CUDA, shared by the rules and the facts.

Covers compiler diagnostics (`file:line:col: error:` as gcc, clang/hipcc and MLIR print them, nvcc's
`file(line): error:`, the pseudo-files clang names such as `<inline asm>`, output quoted inside a Python string
with literal `\\n`), compiler drivers speaking for themselves, the linkers (GNU ld, gold, lld), CMake's
`CMake Error at file:line`, and what marks code as CUDA-only when it reaches a ROCm build: CUDA runtime, driver
and library names, CUDA-only headers, PTX mnemonics, the platform macros a guard tests, a `#error` that asks
for CUDA, and the CUDA toolkit's programs, libraries and settings. Also where a diagnostic came from when it
is reported in a system header (the project file that included or instantiated it). Does not classify
lines (mechanisms.py, rules.py) or pick findings.
"""

from __future__ import annotations

import re

from porter.triage.mechanisms import Rule

SOURCE_EXTENSIONS = (
    r"c|cc|cpp|cxx|c\+\+|cu|cuh|h|hh|hpp|hxx|h\+\+|hip|inc|inl|ipp|tpp|tcc|txx|cl|cppm|ixx|def|py|mlir|ll|s|S"
)
# A diagnostic's file: a path ending in a source extension, an extension-less C++ standard header, or one of the
# pseudo-files clang and MLIR name. It starts at a line start, after a space, quote, bracket or `=`, or after a
# literal `\n` (compiler output quoted inside a Python string); a backslash is part of a Windows path.
DIAGNOSTIC_FILE = (
    r"(?:^|(?<=[\s('\"\[=,;])|(?<=\\[nrt]))"
    r"(?P<file><(?:inline asm|stdin|source|unknown|built-in|command line|scratch space)>"
    r"|(?:[^\s:()'\"\\<>]|\\(?![nrt]))+?(?:\.(?:" + SOURCE_EXTENSIONS + r")|/include/c\+\+/[\w.]+/[\w/]+))"
)
COMPILER_DIAGNOSTIC = re.compile(
    DIAGNOSTIC_FILE + r"(?::(?P<line>\d+)(?::(?P<column>\d+))?:|\((?P<nvcc_line>\d+)\):)\s*(?:fatal\s+)?error:"
    r"\s*(?P<message>.*)"
)
# A compiler driver speaking for itself (no file:line): `clang++: error: ...`, `cc1plus: fatal error: ...`,
# LLVM's `fatal error: error in backend: ...`. The driver's "linker command failed" only reports that the
# linker (below) failed, so it is a build summary, not a diagnostic.
COMPILER_DRIVER = re.compile(
    r"^(?:\S*/)?(?:clang|clang\+\+|amdclang\+\+|amdclang|hipcc|hipcc\.pl|gcc|g\+\+|c\+\+|cc1|cc1plus|nvcc)(?:-\d+)?:"
    r" (?:fatal )?error: (?!linker command failed)(?P<message>.*)|fatal error: error in backend: (?P<backend>.*)"
)
# The linkers: GNU ld and gold print `ld: <message>` with no "error:" (but "warning:" for warnings), lld prints
# `ld.lld: error: <message>`; an unresolved reference names the object or source and the symbol.
LINKER = re.compile(
    r"(?:^|[\s/])(?:ld|ld\.bfd|ld\.gold|ld\.lld|ld64\.lld|lld)(?:-\d+)?: (?:error: )?"
    r"(?!warning|.*: in function |skipping incompatible)(?P<message>.+)"
    r"|undefined reference to\b|multiple definition of\b|relocation \S+ against .{0,200}recompile with -fPIC"
)
CMAKE_ERROR = re.compile(r"^CMake Error(?: at (?P<file>[^\s:]+):(?P<line>\d+)(?: \((?P<command>\w+)\))?)?")
UNDEFINED = re.compile(r"undefined (?:symbol|reference to):?\s*(?:[`'‘]([^'’]+)['’]|(.+))")

CUDA_ONLY = re.compile(
    r"\b(?:cuda_runtime\w*(?:\.h)?|cuda_\w+\.h|cuda\.h|cuda[A-Z]\w*|CUDA_[A-Z_]+|cuda_bf16|__nv_\w+|nv_bfloat16\w*"
    r"|cublas\w*|cusparse\w*|curand\w*|cufft\w*|cusolver\w*|cudnn\w*|nvrtc\w*|nvToolsExt\w*|nvml\w*|cutlass\w*"
    r"|cute/\w+|cute::\w+|cub/\w+|cub::\w+|thrust::cuda|thrust/system/cuda\w*|cuda/(?:std|atomic|barrier|pipeline"
    r"|ptx)\b|cuda::\w+|nccl\.h|nvcuda::\w+|wmma::\w+|cooperative_groups\.h"
    r"|CU(?:deviceptr|stream|result|context|device|function|module|event|graph\w*|tensorMap\w*|memorytype\w*"
    r"|pointer_attribute\w*)|cu(?:Launch|Mem|Pointer|Ctx|Device|Module|Stream|Event|Graph|TensorMap|Func|Init"
    r"|GetErrorString|DriverGetVersion)\w*"
    r"|__\w+_sync|__syncwarp|__nanosleep|ldmatrix|cp\.async|mma\.sync|__CUDA_ARCH__|__CUDACC\w*|__NVCC__)"
)
# PTX instructions (inline assembly written for NVIDIA GPUs; the AMDGPU assembler rejects them): a mnemonic with at
# least one of PTX's qualifiers, so that `cp.cpp` or `bar.hip` is not one.
PTX = re.compile(
    r"\b(?:cvt|ex2|rcp|lg2|rsqrt|ldmatrix|stmatrix|prmt|lop3|shfl|mma|wgmma|cp|bar|fence|ld|st|red|atom|mov|fma)"
    r"(?:\.\w+)*?\.(?:rn|rz|rm|rp|rni|approx|ftz|sat|sync|aligned|async|global|shared|param|const|local|f16x2|bf16x2"
    r"|f16|bf16|f32|f64|b16|b32|b64|u16|u32|u64|s16|s32|s64|e4m3|e5m2|m16n8k\d+|x4|trans|cta|gpu|sys|acquire"
    r"|release|relaxed)(?:\.\w+)*\b"
)
# The macros a ROCm guard tests, and the CUDA-side ones whose branch has no ROCm twin.
ROCM_MACRO = re.compile(r"\b(?:USE_ROCM|__HIP_PLATFORM_AMD__|__HIP_PLATFORM_HCC__|__HIPCC__|__HIP__)\b")
PLATFORM_MACRO = re.compile(ROCM_MACRO.pattern + r"|\b(?:__HIP_PLATFORM_NVIDIA__|__HIP_PLATFORM_NVCC__)\b")
HIP_TWIN = re.compile(r"did you mean '(?:hip|HIP|__hip)\w*'")  # clang knows the HIP name of the CUDA one used
ASKS_FOR_CUDA = re.compile(r"^(?:#error\b|[\"']).*?(?P<name>\bCUDA\b|\bcuda\b|NVIDIA|\bsm_\d+|\bnvcc\b)")  # an #error
CUDA_TOOL = r"(?:nvcc|nvidia-smi|ptxas|cuobjdump|nvdisasm|fatbinary|cudafe\+\+|nvprof|nsys|ncu)"
CUDA_LIBRARY = (
    r"lib(?:cudart|cuda|cublas(?:Lt)?|cudnn\w*|nvrtc(?:-builtins)?|nccl|nvToolsExt|cufft\w*|curand|cusparse\w*"
    r"|cusolver\w*|nvJitLink|nvidia-ml|cupti)\b[\w.]*"
)
# The CUDA toolkit itself: its programs, libraries, install-root variable and CMake package names.
CUDA_TOOLKIT = re.compile(
    r"\b(?:" + CUDA_TOOL + r"|" + CUDA_LIBRARY + r"|CUDA_HOME|CUDA_PATH|CUDAToolkit\w*|CMAKE_CUDA_\w+"
    r"|CUDA_TOOLKIT_ROOT_DIR)\b|-l(?:cudart|cuda|cublas\w*|cudnn|nvrtc|nccl|nvToolsExt|cufft|curand|cusparse"
    r"|cusolver)\b"
)
# The toolchain or runtime of CUDA asked for on a node that has none: a shell, the dynamic loader, CPython,
# PyTorch's extension builder or CMake saying a CUDA program, library or install root is missing, or nvcc or
# ptxas running at all.
CUDA_TOOLKIT_MISSING = re.compile(
    r"\b" + CUDA_TOOL + r"['\"]?:\s*(?:not found|command not found|No such file)"
    r"|(?:No such file or directory|not found|cannot find|could not find|Cannot find)\W{0,6}\S*?\b" + CUDA_TOOL + r"\b"
    r"|\b(?:nvcc|ptxas)\s+(?:fatal|error)\s*:|PTXASError"
    r"|\b" + CUDA_LIBRARY + r":?\s*cannot open shared object file"
    r"|cannot find -l(?:cudart|cuda|cublas\w*|cudnn|nvrtc|nccl|nvToolsExt|cufft|curand|cusparse|cusolver)\b"
    r"|CUDA_HOME(?: environment variable)? is not set|(?i:could not find CUDA(?:Toolkit)?\b)"
    r"|No CMAKE_CUDA_COMPILER could be found"
)
# The quoted source under a diagnostic (or a CMake message's lines) marks CUDA-only code by what it contains,
# not by the macros it tests (an error inside a ROCm branch is an ordinary compile error).
CUDA_HEADER_INCLUDE = re.compile(
    r"#\s*include\s*[<\"](?P<header>(?:cuda\w*|cub|cutlass|cute|nvtx3?|cudnn|thrust/system/cuda)[\w/.]*"
    r"|nccl\.h|nvml\.h)[>\"]"
)
MAPPED_TO_HIP = re.compile(r"'[^']*' \(aka '[^']*(?:hip|HIP)[^']*'\)")  # a CUDA name a header maps to HIP
SYSTEM_PATH = re.compile(r"^(?:/usr/|/opt/rocm|/opt/conda/|\S*/(?:site|dist)-packages/|\S*/include/c\+\+/)")
INSTANTIATED_FROM = re.compile(
    r"(?P<file>\S+?\.(?:" + SOURCE_EXTENSIONS + r")):(?P<line>\d+):\d+:\s+required from here"
)
INCLUDED_FROM = re.compile(r"(?:In file included from|^\s+from) (?P<file>\S+?):(?P<line>\d+)[:,]")
LINKED_FROM = re.compile(
    r"referenced by \S+ \((?P<file>[^)\s]+?):(?P<line>\d+)\)|referenced by (?P<bare>\S+?):(?P<bare_line>\d+)\b"
    r"|(?:^|\s)(?P<object>[^\s:]+?\.(?:" + SOURCE_EXTENSIONS + r"|o|obj))(?::\(\.\w+\+0x[0-9a-f]+\))?: "
    r"(?:in function|undefined reference)"
)
COMPILE_COMMAND = re.compile(r"\s-c\s+(?P<file>\S+?\.(?:" + SOURCE_EXTENSIONS + r"))(?=\s|$)")


def cuda_only_in_message(message: str) -> str | None:
    """The CUDA-only name, platform macro, HIP twin or CUDA request a diagnostic's own message names; a CUDA name
    the compiler shows as an alias of a HIP type (`'cudaStream_t' (aka 'ihipStream_t *')`) is guarded, not one."""
    message = MAPPED_TO_HIP.sub("", message)
    for pattern in (CUDA_ONLY, PTX, PLATFORM_MACRO, CUDA_TOOLKIT):
        found = pattern.search(message)
        if found:
            return found.group(0)
    if HIP_TWIN.search(message):
        quoted = re.search(r"'([^']+)'", message)
        return quoted.group(1) if quoted else "HIP twin"
    asks = ASKS_FOR_CUDA.search(message)
    return asks.group("name") if asks else None


def cuda_only_in_source(text: str) -> str | None:
    """The CUDA-only construct in the lines quoted under a diagnostic: PTX, a CUDA header include, an `__nv_` type
    or the CUDA toolkit (a CMake message)."""
    include = CUDA_HEADER_INCLUDE.search(text)
    if include:
        return include.group("header")
    for pattern in (PTX, re.compile(r"\b__nv_\w+"), CUDA_TOOLKIT):
        found = pattern.search(text)
        if found:
            return found.group(0)
    return None


def origin_of(text: str, context: list[str]) -> str | None:
    """The project location a toolchain error came from when the line itself does not say: the file that
    instantiated or included a system header, the source or object a link error is referenced by, or the source
    the last compile command in view was building."""
    linked = LINKED_FROM.search(text)
    if linked:
        if linked.group("file") or linked.group("bare"):
            return f"{linked.group('file') or linked.group('bare')}:{linked.group('line') or linked.group('bare_line')}"
        return linked.group("object")
    for pattern in (INSTANTIATED_FROM, INCLUDED_FROM):
        for line in reversed(context):
            found = pattern.search(line)
            if found and not SYSTEM_PATH.match(found.group("file")):
                return f"{found.group('file')}:{found.group('line')}"
    for line in reversed(context):
        found = COMPILE_COMMAND.search(line)
        if found:
            return found.group("file")
    return None


# The toolchain's class rules, highest precedence first (rules.RULES puts them before mechanisms.RULES): the CUDA
# toolkit or CUDA-only code reaching a ROCm build, then the first diagnostic of a compiler, linker or CMake.
TOOLCHAIN_RULES: tuple[Rule, ...] = (
    Rule(
        "cuda_only_in_rocm_build",
        "missing_rocm_guard",
        100,
        ("error:",),
        COMPILER_DIAGNOSTIC.pattern,
        cuda_only_in_message,
        layer="clang/hipcc diagnostics (clang/lib/Frontend/TextDiagnostic.cpp: file:line:col: error:), gcc's and "
        "nvcc's, naming CUDA-only APIs, headers, PTX or the platform macros a guard tests (toolchain.py)",
    ),
    Rule(
        "cuda_symbol_in_rocm_binary",
        "missing_rocm_guard",
        99,
        ("undefined",),
        r"undefined (?:symbol|reference to)\W+(?P<message>\S*(?:cuda[A-Z]|cublas|curand|cufft|cusparse|nvrtc)\S*)",
        CUDA_ONLY,
        layer="glibc's dynamic loader (elf/dl-lookup.c 'undefined symbol') and the linkers ('undefined reference to')",
    ),
    # The CUDA toolkit asked for on a node that has none (toolchain.CUDA_TOOLKIT_MISSING): a shell's "nvcc: not
    # found", CPython's FileNotFoundError on nvcc, glibc's dlopen "libcudart.so.12: cannot open shared object file",
    # PyTorch utils/cpp_extension.py "CUDA_HOME environment variable is not set", GNU ld "cannot find -lcudart",
    # CMake's FindCUDAToolkit, and nvcc or ptxas running at all.
    Rule(
        "cuda_toolkit_missing",
        "missing_rocm_guard",
        98,
        (
            *("not found", "no such file", "cannot find", "could not find", "cannot open shared object"),
            *("nvcc", "ptxas", "cuda_home", "cmake_cuda_compiler"),
        ),
        CUDA_TOOLKIT_MISSING.pattern,
        layer="the shell ('nvcc: not found'), glibc's dlopen (dlerror 'cannot open shared object file'), CPython "
        "(FileNotFoundError), PyTorch utils/cpp_extension.py ('CUDA_HOME environment variable is not set'), GNU ld "
        "('cannot find -l'), CMake Modules/FindCUDAToolkit.cmake, nvcc and ptxas",
    ),
    Rule("compiler_error", "compile_error", 95, ("error:",), COMPILER_DIAGNOSTIC.pattern, confidence=0.9),
    Rule("compiler_driver_error", "compile_error", 95, ("error:", "error in backend"), COMPILER_DRIVER.pattern),
    Rule(
        "linker_error",
        "compile_error",
        95,
        (
            *("ld:", "ld.lld:", "ld.gold:", "ld.bfd:", "lld:", "ld-", "undefined reference", "multiple definition"),
            "recompile with",
        ),
        LINKER.pattern,
        confidence=0.9,
    ),
    Rule("cmake_error", "compile_error", 95, ("cmake error",), CMAKE_ERROR.pattern, confidence=0.8),
)
