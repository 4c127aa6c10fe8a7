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

from porter.task import FlagValue, Task

RULE = "tensor x data x pipeline parallel size must equal {count} (the GPUs of a node); null counts as 1"
DP_RULE = "with {switch}: tensor x pipeline parallel size must equal {count} and dp must divide tp"


def _sizes(task: Task, flags: dict[str, FlagValue]) -> list[tuple[str | None, int]]:
    """(the spelling set, its size) of tensor, data and pipeline parallelism."""
    engine, found = task.engine, []
    for names in (engine.tensor_parallel, engine.data_parallel, engine.pipeline_parallel):
        name = next((name for name in names if name in flags), None)
        value = flags.get(name) if name else None
        found.append((name, value if isinstance(value, int) and not isinstance(value, bool) else 1))
    return found


def applies(task: Task) -> bool:
    """True when the task lets the agent change a parallel size."""
    return any(name for name, _ in _sizes(task, task.serve.tunables))


def describe(task: Task) -> list[str]:
    """The rules in words, for the prompt."""
    count, switch = task.hardware.count, task.engine.dp_attention
    rules = [RULE.format(count=count)] + ([DP_RULE.format(switch=switch, count=count)] if switch else [])
    return rules if applies(task) else []


def problem(task: Task, flags: dict[str, FlagValue]) -> str | None:
    """Why `flags` break a rule (None when they do not)."""
    count, switch = task.hardware.count, task.engine.dp_attention
    (_, tp), (_, dp), (_, pp) = sizes = _sizes(task, flags)
    shown = ", ".join(f"{name}={size}" for name, size in sizes if name)
    if not applies(task):
        return None
    if switch and flags.get(switch):
        return None if tp * pp == count and tp % dp == 0 else f"{shown} {DP_RULE.format(switch=switch, count=count)}"
    if tp * dp * pp != count:
        return f"{shown} use {tp * dp * pp} GPUs; this node has {count}: tp x dp x pp must equal {count}"
    return None
