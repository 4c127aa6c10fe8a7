"""Rules between serve flags that the allowed values of each flag alone cannot say, from the task's hardware.

The one rule today: the parallel layout must use exactly the GPUs of a node. Tensor x data x pipeline
parallel size equals `hardware.count`; with sglang's DP attention the data-parallel groups split the
tensor-parallel ranks instead of multiplying them, so tp x pp equals the count and dp divides tp (sglang
python/sglang/srt/layers/dp_attention.py, compute_dp_attention_world_info: attn_tp_size = tp_size //
dp_size). The flag names are the task's engine's (porter/engines/): any spelling it accepts. A flag set to
null counts as 1. Stated in the prompt, checked by set_flags before anything launches. Does not know
engine-specific limits beyond this (heads divisible by tp and the like): the crash log says those.
"""

from __future__ import annotations

from porter.engines.engine import Engine
from porter.task import FlagValue, Task


def _size(flags: dict[str, FlagValue], names: tuple[str, ...]) -> tuple[str | None, int]:
    for name in names:
        if name in flags:
            value = flags[name]
            return name, value if isinstance(value, int) and not isinstance(value, bool) else 1
    return None, 1


def _sizes(engine: Engine) -> tuple[tuple[str, ...], ...]:
    return engine.tensor_parallel, engine.data_parallel, engine.pipeline_parallel


def applies(task: Task) -> bool:
    """True when the task lets the agent change a parallel size."""
    return any(name in task.serve.tunables for names in _sizes(task.engine) for name in names)


def describe(task: Task) -> list[str]:
    """The rules in words, for the prompt."""
    if not applies(task):
        return []
    count, dp_attention = task.hardware.count, task.engine.dp_attention
    rules = [f"tensor x data x pipeline parallel size must equal {count} (the GPUs of a node); null counts as 1"]
    if dp_attention:
        rules.append(f"with {dp_attention}: tensor x pipeline parallel size must equal {count} and dp must divide tp")
    return rules


def problem(task: Task, flags: dict[str, FlagValue]) -> str | None:
    """Why `flags` break a rule (None when they do not)."""
    if not applies(task):
        return None
    count, dp_attention = task.hardware.count, task.engine.dp_attention
    (tp_name, tp), (dp_name, dp), (pp_name, pp) = (_size(flags, names) for names in _sizes(task.engine))
    shown = ", ".join(f"{name}={size}" for name, size in ((tp_name, tp), (dp_name, dp), (pp_name, pp)) if name)
    if dp_attention and flags.get(dp_attention):
        if tp * pp != count or tp % dp:
            return f"{shown} with {dp_attention}: tp x pp must equal {count} and dp must divide tp"
        return None
    if tp * dp * pp != count:
        return f"{shown} use {tp * dp * pp} GPUs; this node has {count}: tp x dp x pp must equal {count}"
    return None
