"""Per-GPU memory planning: the static pool (weights + KV cache) and the runtime workspace."""

from dataclasses import dataclass

from twin import device

KV_BYTES = {"auto": 2, "bf16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp4_e2m1": 0.5}


class HipOutOfMemoryError(RuntimeError):
    """Shaped like torch.OutOfMemoryError on ROCm."""


@dataclass(frozen=True)
class MemoryPlan:
    weights_gb: float
    kv_pool_gb: float
    max_total_tokens: int
    workspace_needed_gb: float
    workspace_free_gb: float


def plan(
    weights: float, kv_dims: int, mem_fraction_static: float, kv_cache_dtype: str, layers: int, context_length: int
) -> MemoryPlan:
    """The memory of one GPU holding `weights` GB of the model and `kv_dims` KV values per token and layer (the
    caller has checked that the static pool holds the weights)."""
    static = total_memory_gb() * mem_fraction_static
    kv_pool = static - weights
    per_token = kv_dims * layers * KV_BYTES.get(kv_cache_dtype, 2)
    needed = 4.0 + context_length / 16384
    return MemoryPlan(weights, kv_pool, int(kv_pool * 1e9 / per_token), needed, total_memory_gb() - static)


def total_memory_gb() -> float:
    return float(device.properties()["total_memory_gb"])


def capture_graphs(memory_plan: MemoryPlan) -> None:
    """The graph-capture allocation: fails when the workspace left outside the static pool is too small."""
    if memory_plan.workspace_needed_gb > memory_plan.workspace_free_gb:
        raise HipOutOfMemoryError(
            f"HIP out of memory. Tried to allocate {memory_plan.workspace_needed_gb:.2f} GiB. GPU 0 has a total "
            f"capacity of {total_memory_gb() - 0.02:.2f} GiB of which {memory_plan.workspace_free_gb:.2f} GiB is free. "
            "Of the allocated memory "
            f"{total_memory_gb() - memory_plan.workspace_free_gb:.2f} GiB is allocated by PyTorch. If reserved but "
            "unallocated memory is large try setting PYTORCH_HIP_ALLOC_CONF=expandable_segments:True"
        )
