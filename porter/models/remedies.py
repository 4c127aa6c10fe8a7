"""The playbook's remedies as pure functions: what to change for a failure class, from the triage's facts.

Covers the HIP names of CUDA-only headers, the exclude-list alias for a module the engine registers under
another prefix, which tunable a failure names or the engine chose itself, the tuning command for a shape,
and the flag searches (speculative decoding, TP x DP splits, the remaining tunables, and pairs of moves that
were reverted alone, since real knobs interact). Reads no files and
calls no tools: playbook.py turns these answers into tool calls.
"""

from __future__ import annotations

import fnmatch
import re

from porter.task import FlagValue, Task, TuneSpec

HIP_HEADERS = {
    "cuda_runtime.h": "hip/hip_runtime.h",
    "cuda_runtime_api.h": "hip/hip_runtime_api.h",
    "cuda.h": "hip/hip_runtime.h",
    "cuda_fp16.h": "hip/hip_fp16.h",
    "cuda_bf16.h": "hip/hip_bf16.h",
    "cuda_fp8.h": "hip/hip_fp8.h",
    "cooperative_groups.h": "hip/hip_cooperative_groups.h",
    "curand_kernel.h": "hiprand/hiprand_kernel.h",
    "cub/cub.cuh": "hipcub/hipcub.hpp",
}


def tuning_command_for(task: Task, shape: list[str], exclude: set) -> TuneSpec | None:
    """The task's tuning command that names most of the shape's dimensions (at least three of them)."""
    dimensions = [value for value in shape if value.isdigit() and int(value) > 1]
    best, best_score = None, 2
    for spec in task.tune:
        if spec.name in exclude:
            continue
        text = f"{spec.command} {spec.description}"
        score = sum(bool(re.search(rf"(?<![\d.]){value}(?![\d.])", text)) for value in dimensions)
        if score > best_score:
            best, best_score = spec, score
    return best


def renamed_module(facts: dict) -> tuple[str, str, str, str] | None:
    """(engine name, checkpoint name, engine prefix, checkpoint prefix) when the log shows one module under
    two prefixes: `model.decoder.mlp.shared_experts.gate_proj.weight` vs
    `model.layers.78.mlp.shared_experts.gate_proj.weight` -> prefixes `model.decoder` / `model.layers.78`."""
    engine = facts.get("parameter")
    if not engine:
        return None
    for other in facts.get("module_prefixes") or []:
        if other == engine:
            continue
        engine_parts, other_parts = engine.split("."), other.split(".")
        common = 0
        while (
            common < min(len(engine_parts), len(other_parts)) - 1
            and engine_parts[-1 - common] == other_parts[-1 - common]
        ):
            common += 1
        if common >= 2:
            return engine, other, ".".join(engine_parts[:-common]), ".".join(other_parts[:-common])
    return None


def exclude_alias_lines(line: str, checkpoint_prefix: str, engine_prefix: str, checkpoint_name: str) -> str | None:
    """`line` of an exclude list preceded by the same entry under the engine's prefix (a JSON entry gets its
    comma); None when the line holds no pattern that covers `checkpoint_name`."""
    for pattern in re.findall(r"[\"']([\w.*]+)[\"']", line):
        if pattern.startswith(checkpoint_prefix + ".") and _matches(checkpoint_name, pattern):
            added = line.replace(pattern, engine_prefix + pattern[len(checkpoint_prefix) :])
            if not added.lstrip().startswith("-") and not added.rstrip().endswith(","):
                added = added.rstrip() + ","
            return added + "\n" + line
    return None


def values_in_use(values: list[FlagValue], lines: list[str]) -> list[FlagValue]:
    """Allowed values that the log lines naming a flag report ("Attention backend: triton")."""
    text = "\n".join(lines).lower()
    return [v for v in values if isinstance(v, str) and re.search(rf"\b{re.escape(v.lower())}\b", text)]


def _matches(name: str, pattern: str) -> bool:
    return fnmatch.fnmatchcase(name, pattern) or name.startswith(pattern.rstrip("*").rstrip("."))


def flag_candidates(task: Task, unmet: set[str]) -> list[tuple[str, dict[str, FlagValue]]]:
    """Flag changes worth measuring, in order: for single-stream speed, speculative decoding then each
    remaining tunable (a single-stream check is cheap); for throughput, the topology then each remaining
    tunable. A move is listed once per goal it may serve."""
    tunables = task.serve.tunables
    handled = {"tp", "dp", "tp-size", "dp-size"} | {k for k in tunables if k.startswith("speculative-")}
    others = [
        {flag: value}
        for flag, values in tunables.items()
        if flag not in handled
        for value in values
        if value != task.serve.flags.get(flag) and value is not None
    ]
    candidates: list[tuple[str, dict[str, FlagValue]]] = []
    if "single" in unmet:
        candidates += [("single_stream", config) for config in [*speculative_configs(tunables), *others]]
    if "throughput" in unmet:
        candidates += [("throughput", config) for config in [*topologies(tunables, task.hardware.count), *others]]
    return candidates


def speculative_configs(tunables: dict[str, list[FlagValue]]) -> list[dict[str, FlagValue]]:
    """One config per allowed draft depth, shallow first: algorithm, depth, the smallest top-k, and the
    smallest draft-token count above the depth."""
    algorithms = [v for v in tunables.get("speculative-algorithm", []) if v]
    steps = sorted(v for v in tunables.get("speculative-num-steps", []) if v)
    if not algorithms or not steps:
        return []
    topk = min((v for v in tunables.get("speculative-eagle-topk", []) if v), default=None)
    drafts = sorted(v for v in tunables.get("speculative-num-draft-tokens", []) if v)
    configs = []
    for depth in steps:
        draft = next((d for d in drafts if d >= depth + 1), drafts[-1] if drafts else None)
        config: dict[str, FlagValue] = {"speculative-algorithm": algorithms[0], "speculative-num-steps": depth}
        if topk is not None:
            config["speculative-eagle-topk"] = topk
        if draft is not None:
            config["speculative-num-draft-tokens"] = draft
        configs.append(config)
    return configs


def topologies(tunables: dict[str, list[FlagValue]], gpus: int) -> list[dict[str, FlagValue]]:
    """TP x DP splits that use every GPU, widest TP first (the baseline), then more data parallelism."""
    tp_name = "tp" if "tp" in tunables else "tp-size"
    dp_name = "dp" if "dp" in tunables else "dp-size"
    if tp_name not in tunables or dp_name not in tunables:
        return []
    splits = []
    for tp in sorted((v for v in tunables[tp_name] if v), reverse=True):
        for dp in tunables[dp_name]:
            if tp * (dp or 1) == gpus:
                splits.append({tp_name: tp, dp_name: dp})
    return splits


def pair_candidates(reverted: list[dict[str, FlagValue]], tried: list[dict]) -> list[dict[str, FlagValue]]:
    """Unions of two flag moves that were each reverted alone (no flag set both ways), not tried yet.

    A move that does not pay alone may pay with another (TP x DP with an fp8 KV cache: twice the batch
    fits), and the accept rules judge a pending stack as one change.
    """
    pairs = []
    for index, first in enumerate(reverted):
        for second in reverted[index + 1 :]:
            if any(first[flag] != second[flag] for flag in first.keys() & second.keys()):
                continue
            union = {**first, **second}
            if union not in tried and union not in pairs and union not in (first, second):
                pairs.append(union)
    return pairs
