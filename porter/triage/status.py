"""Status codes of the ROCm runtime and libraries -> failure classes, in one table.

Covers the HSA runtime (`hsa_status_t`, ROCR-Runtime `hsa.h` / `hsa_ext_amd.h`), the HIP runtime
(`hipError_t`, HIP `hip_runtime_api.h`, both the enum name and the text `hipGetErrorString` prints),
hipBLAS / hipBLASLt / rocBLAS (`hipblasStatus_t`, `rocblas_status`; PyTorch on ROCm prints the hipified
CUBLAS names too) and RCCL (`ncclResult_t`). A code says what the runtime saw, not always why: each entry
carries how far the code alone decides the class (its confidence). Codes whose meaning is "something
failed" (INTERNAL_ERROR, EXECUTION_FAILED, ...) are left out, so the line falls to the generic error
rules and the text around it decides. Does not read logs or rank findings (rules.py, report.py).
"""

from __future__ import annotations

import re

# name (as printed, case-insensitive) -> (category, confidence). Names are the distinctive tail of the code,
# so a terminal-wrapped `HSA_STATUS_E` + `RROR_MEMORY_APERTURE_VIOLATION` still reads.
HSA_CODES = {
    "MEMORY_APERTURE_VIOLATION": ("gpu_memory_fault", 0.9),
    "MEMORY_FAULT": ("gpu_memory_fault", 0.9),
    "ILLEGAL_INSTRUCTION": ("gpu_memory_fault", 0.6),  # the queue dies like a fault: the kernel before is the culprit
    "EXCEPTION": ("gpu_memory_fault", 0.6),
    "OUT_OF_RESOURCES": ("out_of_memory", 0.6),  # device memory, queues or scratch could not be allocated
    "OUT_OF_REGISTERS": ("unsupported_arch_or_kernel", 0.5),
    "INVALID_ISA": ("unsupported_arch_or_kernel", 0.8),
    "INVALID_ISA_NAME": ("unsupported_arch_or_kernel", 0.8),
    "INVALID_CODE_OBJECT": ("unsupported_arch_or_kernel", 0.8),
    "INCOMPATIBLE_ARGUMENTS": ("unsupported_arch_or_kernel", 0.5),
}
HIP_CODES = {
    "hipErrorOutOfMemory": ("out_of_memory", 0.9),
    "hipErrorMemoryAllocation": ("out_of_memory", 0.9),
    "hipErrorNoBinaryForGpu": ("unsupported_arch_or_kernel", 0.9),
    "hipErrorInvalidDeviceFunction": ("unsupported_arch_or_kernel", 0.85),
    "hipErrorInvalidImage": ("unsupported_arch_or_kernel", 0.8),
    "hipErrorInvalidKernelFile": ("unsupported_arch_or_kernel", 0.8),
    "hipErrorSharedObjectInitFailed": ("unsupported_arch_or_kernel", 0.6),
    "hipErrorInvalidResourceHandle": ("unsupported_arch_or_kernel", 0.5),  # a kernel handle that never loaded
    "hipErrorInvalidHandle": ("unsupported_arch_or_kernel", 0.5),
    "hipErrorLaunchOutOfResources": ("unsupported_arch_or_kernel", 0.6),
    "hipErrorNotSupported": ("unsupported_arch_or_kernel", 0.5),
    "hipErrorIllegalAddress": ("gpu_memory_fault", 0.9),
    "hipErrorLaunchFailure": ("gpu_memory_fault", 0.5),
    "hipErrorInvalidValue": ("shape_mismatch", 0.35),  # a launch or copy whose sizes the callee rejects
    "hipErrorPeerAccessUnsupported": ("comm_error", 0.6),
    "hipErrorPeerAccessNotEnabled": ("comm_error", 0.6),
}
# What hipGetErrorString prints for the codes above (HIP hip_error.cpp), for lines that carry no enum name.
HIP_MESSAGES = {
    "out of memory": "hipErrorOutOfMemory",
    "no kernel image is available for execution on the device": "hipErrorNoBinaryForGpu",
    "invalid device function": "hipErrorInvalidDeviceFunction",
    "invalid device kernel image": "hipErrorInvalidImage",
    "invalid resource handle": "hipErrorInvalidResourceHandle",
    "too many resources requested for launch": "hipErrorLaunchOutOfResources",
    "an illegal memory access was encountered": "hipErrorIllegalAddress",
    "unspecified launch failure": "hipErrorLaunchFailure",
    "invalid argument": "hipErrorInvalidValue",
    "operation not supported": "hipErrorNotSupported",
}
BLAS_CODES = {
    "NOT_SUPPORTED": ("dtype_unsupported", 0.7),  # the GEMM's type/layout combination has no implementation
    "ARCH_MISMATCH": ("unsupported_arch_or_kernel", 0.8),
    "ALLOC_FAILED": ("out_of_memory", 0.8),
    "MEMORY_ERROR": ("out_of_memory", 0.7),
    "INVALID_VALUE": ("shape_mismatch", 0.4),
    "INVALID_SIZE": ("shape_mismatch", 0.5),
    "NOT_IMPLEMENTED": ("dtype_unsupported", 0.6),
}
RCCL_CODES = ("UnhandledCudaError", "SystemError", "InternalError", "InvalidArgument", "InvalidUsage", "RemoteError")

STATUS = re.compile(
    r"(?:ERROR|RROR|ROR)_(?P<hsa>" + "|".join(sorted(HSA_CODES, key=len, reverse=True)) + r")\b"
    r"|(?P<hip>" + "|".join(HIP_CODES) + r")\b"
    r"|(?:HIPBLAS(?:LT)?|ROCBLAS|CUBLAS|CUBLASLT|rocblas)_STATUS_(?P<blas>" + "|".join(BLAS_CODES) + r")\b"
    r"|\bnccl(?P<rccl>" + "|".join(RCCL_CODES) + r")\b",
    re.IGNORECASE,
)
HIP_TEXT = re.compile(
    r"(?i:\b(?:hip|cuda)(?: runtime)? error\b\W{0,4}(?P<message>" + "|".join(map(re.escape, HIP_MESSAGES)) + "))"
)


def status_class(text: str) -> tuple[str, str, float] | None:
    """(code, category, confidence) of the first status code a line names, or None."""
    match = STATUS.search(text)
    if match is None:
        found = HIP_TEXT.search(text)
        name = HIP_MESSAGES[found.group("message").lower()] if found else None
        return (name, *HIP_CODES[name]) if name else None
    code = match.group(match.lastgroup)  # the one table's group that matched
    if match.lastgroup == "hsa":
        return (f"HSA_STATUS_ERROR_{code.upper()}", *HSA_CODES[code.upper()])
    if match.lastgroup == "hip":
        name = next(known for known in HIP_CODES if known.lower() == code.lower())
        return (name, *HIP_CODES[name])
    if match.lastgroup == "blas":
        return (match.group(0), *BLAS_CODES[code.upper()])
    return (match.group(0), "comm_error", 0.85)
