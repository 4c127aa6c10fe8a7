"""Just-in-time build of the engine's C++ kernels with the ROCm toolchain (`hipcc`), like aiter's JIT.

Sources live in csrc/ of this tree; the shared object is cached under ~/.cache/twin/jit by a hash of the
source and flags, then loaded with ctypes and smoke-tested. A build takes the node's compile time once; a later
start-up with the same source loads the cached object. A compiler error is shown as the compiler printed it
and re-raised as "Error building extension", the way torch's cpp_extension does.
Does not cover deciding when a kernel is needed (launch_server.py).
"""

import ctypes
import hashlib
import os
import subprocess
import time
from pathlib import Path

from twin import device, logs

CSRC = Path(__file__).resolve().parent / "csrc"


def rocm_path() -> Path:
    """ROCM_PATH, else /opt/rocm, else the opt/rocm of a --local layout."""
    candidates = [os.environ.get("ROCM_PATH"), "/opt/rocm", str(device.layout_root() / "opt" / "rocm")]
    for candidate in candidates:
        if candidate and (Path(candidate) / "bin" / "hipcc").exists():
            return Path(candidate)
    raise RuntimeError(f"hipcc not found (looked in {[c for c in candidates if c]}); set ROCM_PATH")


# The HIP flags every torch C++ extension build passes (torch.utils.cpp_extension COMMON_HIP_FLAGS, copied by
# aiter/jit/utils/cpp_extension.py): hipcc itself does not define USE_ROCM.
HIP_FLAGS = ["-D__HIP_PLATFORM_AMD__=1", "-DUSE_ROCM=1", "-DHIPBLAS_V2", "-fPIC"]


def build(name: str, source_file: str) -> ctypes.CDLL:
    source = CSRC / source_file
    hipcc = rocm_path() / "bin" / "hipcc"
    flags = ["-O2", "-shared", *HIP_FLAGS, "-std=c++17", "--offload-arch=gfx950"]
    digest = hashlib.sha256(source.read_bytes() + " ".join(flags).encode()).hexdigest()[:16]
    cache = Path(os.environ.get("TWIN_JIT_CACHE", Path.home() / ".cache" / "twin" / "jit"))
    cache.mkdir(parents=True, exist_ok=True)
    output = cache / f"{name}_{digest}.so"
    if not output.exists():
        logs.aiter(f"start build [{name}] under {cache}")
        command = [
            str(hipcc),
            *flags,
            str(source),
            "-o",
            str(output),
        ]
        logs.aiter(" ".join(command))
        started = time.monotonic()
        result = subprocess.run(command, capture_output=True, text=True)
        # the compile's own time on the node: a build that fails stops at its first error
        device.wait("jit_build", module=name, failed=result.returncode != 0)
        if result.returncode != 0:
            print(result.stderr, end="", flush=True)
            raise RuntimeError(f"Error building extension '{name}': hipcc exited with status {result.returncode}")
        logs.aiter(f"finish build [{name}], cost {time.monotonic() - started:.1f}s")
    return ctypes.CDLL(str(output))


def fused_multistep_metadata(steps: int, topk: int) -> int:
    """Build the fused metadata kernel and run it once on a tiny batch (the start-up smoke test)."""
    library = build("fused_multistep_metadata", "fused_multistep_metadata.cpp")
    batch = 2
    array = ctypes.c_int32 * (batch * steps * topk)
    seq_lens = (ctypes.c_int32 * batch)(7, 11)
    positions, lengths = array(), array()
    return library.twin_fused_multistep_metadata(seq_lens, positions, lengths, batch, steps, topk)


def mla_rope_and_cache() -> int:
    """Build the MLA rope/KV-write kernel and run it on four tokens (the start-up smoke test)."""
    library = build("mla_rope_and_cache", "mla_rope_kernels.cpp")
    tokens, rope_dim = 4, 64
    positions = (ctypes.c_int32 * tokens)(0, 1, 2, 3)
    cache = (ctypes.c_uint16 * (tokens * rope_dim))()
    return library.twin_mla_rope_and_cache(positions, cache, tokens, rope_dim)


def per_token_group_quant_fp8(group: int) -> int:
    """Build the activation quantization kernel (fp8 e4m3, one scale per `group` values) and run it on one token."""
    library = build("per_token_group_quant_fp8", "per_token_group_quant_fp8.cpp")
    hidden = 2 * group
    values = (ctypes.c_float * hidden)(*[(index % 17 - 8) / 4 for index in range(hidden)])
    output, scales = (ctypes.c_uint8 * hidden)(), (ctypes.c_float * 2)()
    return library.twin_per_token_group_quant_fp8(values, output, scales, 1, hidden, group)


def topk_v2(rows: int = 2, width: int = 8, topk: int = 2) -> int:
    """Build the fused DSA top-k v2 kernel and run it on a tiny batch (the start-up smoke test)."""
    library = build("topk_v2", "topk_v2_kernels.cpp")
    scores = (ctypes.c_float * (rows * width))(*[float(i % 3) for i in range(rows * width)])
    lengths = (ctypes.c_int32 * rows)(*[width] * rows)
    table = (ctypes.c_int32 * (rows * width))(*range(rows * width))
    out = (ctypes.c_int32 * (rows * topk))()
    return library.twin_topk_transform_paged_v2(scores, lengths, table, out, rows, width, topk)
