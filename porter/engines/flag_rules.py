"""Rules between serve flags that the allowed values of each flag alone cannot say, from the task's hardware.

The one rule today: the parallel layout must use exactly the GPUs of a node. Tensor x data x pipeline
parallel size equals `hardware.count`; with sglang's `--enable-dp-attention` the data-parallel groups
split the tensor-parallel ranks instead of multiplying them, so tp x pp equals the count and dp divides tp
(sglang python/sglang/srt/layers/dp_attention.py, compute_dp_attention_world_info: attn_tp_size =
tp_size // dp_size). Flag names cover sglang (tp, tp-size, dp, dp-size, pp, pp-size) and vLLM
(tensor-parallel-size, data-parallel-size, pipeline-parallel-size). A flag set to null counts as 1.
Stated in the prompt, checked by set_flags before anything launches. Does not know engine-specific limits
beyond this (heads divisible by tp and the like): the crash log says those.
"""

from __future__ import annotations

from porter.task import FlagValue, Task

SIZES = {
    "tp": ("tp", "tp-size", "tensor-parallel-size"),
    "dp": ("dp", "dp-size", "data-parallel-size"),
    "pp": ("pp", "pp-size", "pipeline-parallel-size"),
}
DP_ATTENTION = "enable-dp-attention"


def _size(flags: dict[str, FlagValue], kind: str) -> tuple[str | None, int]:
    for name in SIZES[kind]:
        if name in flags:
            value = flags[name]
            return name, value if isinstance(value, int) and not isinstance(value, bool) else 1
    return None, 1


def applies(task: Task) -> bool:
    """True when the task lets the agent change a parallel size."""
    names = {name for names in SIZES.values() for name in names}
    return any(name in task.serve.tunables for name in names)


def describe(task: Task) -> list[str]:
    """The rules in words, for the prompt."""
    if not applies(task):
        return []
    count = task.hardware.count
    return [
        f"tensor x data x pipeline parallel size must equal {count} (the GPUs of a node); null counts as 1",
        f"with {DP_ATTENTION}: tensor x pipeline parallel size must equal {count} and dp must divide tp",
    ]


def problem(task: Task, flags: dict[str, FlagValue]) -> str | None:
    """Why `flags` break a rule (None when they do not)."""
    if not applies(task):
        return None
    count = task.hardware.count
    (tp_name, tp), (dp_name, dp), (pp_name, pp) = (_size(flags, kind) for kind in ("tp", "dp", "pp"))
    shown = ", ".join(f"{name}={size}" for name, size in ((tp_name, tp), (dp_name, dp), (pp_name, pp)) if name)
    if flags.get(DP_ATTENTION):
        if tp * pp != count or tp % dp:
            return f"{shown} with {DP_ATTENTION}: tp x pp must equal {count} and dp must divide tp"
        return None
    if tp * dp * pp != count:
        return f"{shown} use {tp * dp * pp} GPUs; this node has {count}: tp x dp x pp must equal {count}"
    return None
