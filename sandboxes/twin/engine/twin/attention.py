"""Attention backend selection and KV-cache dtypes for ROCm GPUs (gfx942 = MI300X, gfx950 = MI355X)."""

from twin import device

BACKENDS = ("aiter", "triton", "torch_native", "fa3", "wave")
FP8_KV_DTYPES = ("fp8_e4m3", "fp8_e5m2")


class OutOfResources(Exception):
    """Raised like triton.runtime.errors.OutOfResources."""


def gpu_arch() -> str:
    return device.properties()["gcn_arch"]


def select_backend(requested: str | None, use_mla: bool) -> str:
    if requested:
        return requested
    return "aiter" if use_mla else "triton"


def check_backend(backend: str, kv_lora_rank: int, rope_dim: int) -> None:
    if backend == "fa3":
        raise ValueError("fa3 attention backend requires CUDA sm90+; it is not available on ROCm")
    if backend == "triton":
        block_h, block_n, stages = 16, 64, 2
        required = (kv_lora_rank + rope_dim) * (block_h + block_n) * 2 * stages
        limit = int(device.properties()["lds_bytes"])
        if required > limit:
            raise OutOfResources(
                f"out of resource: shared memory, Required: {required}, Hardware limit: {limit}. "
                "Reducing block sizes or `num_stages` may help."
            )


def is_fp8_fnuz() -> bool:
    return gpu_arch() == "gfx942"


def kv_torch_dtype(kv_cache_dtype: str) -> str:
    if kv_cache_dtype in ("auto", "bf16"):
        return "torch.bfloat16"
    if kv_cache_dtype == "fp8_e4m3":
        return "torch.float8_e4m3fnuz" if is_fp8_fnuz() else "torch.float8_e4m3fn"
    if kv_cache_dtype == "fp8_e5m2":
        return "torch.float8_e5m2fnuz" if is_fp8_fnuz() else "torch.float8_e5m2"
    if kv_cache_dtype == "fp4_e2m1":
        return "torch.float4_e2m1fn_x2"
    raise ValueError(f"unknown kv cache dtype {kv_cache_dtype!r}")


def check_kv_dtype(backend: str, torch_dtype: str) -> None:
    supported = {
        "gfx950": ("torch.bfloat16", "torch.float8_e4m3fn", "torch.float8_e5m2", "torch.float4_e2m1fn_x2"),
        "gfx942": ("torch.bfloat16", "torch.float8_e4m3fnuz", "torch.float8_e5m2fnuz"),
    }[gpu_arch()]
    if backend == "aiter" and torch_dtype not in supported:
        raise RuntimeError(
            f"Unsupported dtype {torch_dtype}: should be one of {', '.join(supported)} "
            f"(aiter mla_decode_fwd on {gpu_arch()})"
        )
