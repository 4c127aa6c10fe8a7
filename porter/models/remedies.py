"""The playbook's remedies as pure functions: what to change for a failure class, from the triage's facts.

Covers the HIP names of CUDA-only headers, the exclude-list alias for a module the engine registers under
another prefix, which tunable a failure names or the engine chose itself, the tuning command for a shape,
and the flag searches (speculative decoding, TP x DP splits, the remaining tunables, and pairs of moves that
were reverted alone, since real knobs interact). Reads no files and
calls no tools: playbook.py turns these answers into tool calls.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from pathlib import PurePosixPath

from porter.engines.engine import Engine
from porter.engines.known import engine_named
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
    """(engine name, checkpoint name, engine prefix, checkpoint prefix) when the log shows one module under two
    prefixes: `model.decoder.mlp.shared_experts.gate_up_proj.weight` (the engine's fused slot) against
    `model.layers.78.mlp.shared_experts.gate_proj.weight` (the checkpoint's shard) share the run
    `mlp.shared_experts`, so the prefixes are `model.decoder` / `model.layers.78`. The shared run is at least two
    components long and ends at most two from the end of each name (a module and its parameter may differ)."""
    engine = facts.get("parameter")
    if not engine:
        return None
    for other in facts.get("module_prefixes") or []:
        split = _shared_run(engine.split("."), other.split("."))
        if other != engine and split:
            return engine, other, split[0], split[1]
    return None


def _shared_run(engine: list[str], other: list[str]) -> tuple[str, str] | None:
    """The two prefixes before the longest run of components both names share near their ends."""
    best: tuple[int, int, int] | None = None
    for i in range(1, len(engine)):
        for j in range(1, len(other)):
            length = 0
            while i + length < len(engine) and j + length < len(other) and engine[i + length] == other[j + length]:
                length += 1
            near_end = len(engine) - (i + length) <= 2 and len(other) - (j + length) <= 2
            if length >= 2 and near_end and engine[:i] != other[:j] and (best is None or length > best[0]):
                best = (length, i, j)
    return (".".join(engine[: best[1]]), ".".join(other[: best[2]])) if best else None


# An exclude entry as a config file spells it: quoted ("..." with JSON escapes, or '...'), or a bare YAML item.
QUOTED_ENTRY = re.compile(r'"((?:[^"\\]|\\.)*)"|\'([^\']*)\'')
BARE_ITEM = re.compile(r"^(\s*-\s+)([^\s'\"#]+)\s*$")


def exclude_alias_edit(
    lines: list[str], checkpoint_prefix: str, engine_prefix: str, checkpoint_name: str
) -> tuple[str, str] | None:
    """(line, replacement) that adds to an exclude list the entries the engine's names need: every entry that
    covers a module beside the failing one (the same parent module, `...shared_experts.` here), rewritten under
    the engine's prefix, spelled as upstream matches entries (an exact module name, or `re:` and a regular
    expression matched from the start of the name). Quark's export lists exact names, so each sibling gets
    its own alias: a fused module (gate_up_proj) is excluded only when each shard it packs is. None when no
    entry covers the failing module."""
    module = checkpoint_name.rsplit(".", 1)[0]  # the tensor's module: drop .weight / .weight_scale
    group = module.rsplit(".", 1)[0] + "."
    first, aliases = None, []
    for line in lines:
        for raw, entry, quote in _entries(line):
            alias = _alias(entry, module, group, checkpoint_prefix, engine_prefix)
            if alias is not None and alias not in aliases:
                first = first or (line, raw, quote)
                aliases.append(alias)
    if first is None:
        return None
    line, raw, quote = first
    spelled = [json.dumps(alias) if quote == '"' else f"{quote}{alias}{quote}" for alias in aliases]
    if len(_entries(line)) > 1:  # a list on one line: the aliases go in before the entry
        return line, line.replace(raw, ", ".join([*spelled, raw]), 1)
    bare = BARE_ITEM.match(line)
    indent = bare.group(1) if bare else line[: len(line) - len(line.lstrip())]
    comma = "" if bare or line.lstrip().startswith("-") else ","
    added = [line.replace(raw, item, 1) if not bare else indent + item for item in spelled]
    added = [text.rstrip().rstrip(",") + comma for text in added]
    return line, "\n".join([*added, line])


def excluded_by_edit(old: str, new: str) -> str:
    """What an exclude-list edit added, for a commit subject: the entry, or the entries' common prefix."""
    before = {entry for line in old.splitlines() for _, entry, _ in _entries(line)}
    added = [entry for line in new.splitlines() for _, entry, _ in _entries(line) if entry not in before]
    if len(added) <= 1:
        return added[0] if added else "the renamed module"
    common = os.path.commonprefix([entry.split(".") for entry in added])
    return f"{len(added)} modules under {'.'.join(common)}"


def _entries(line: str) -> list[tuple[str, str, str]]:
    """(as written, as read, quote) for each exclude entry on a line."""
    bare = BARE_ITEM.match(line)
    if bare:
        return [(bare.group(2), bare.group(2), "")]
    found = []
    for match in QUOTED_ENTRY.finditer(line):
        if match.group(1) is not None:
            found.append((match.group(0), json.loads(match.group(0)), '"'))
        else:
            found.append((match.group(0), match.group(2), "'"))
    return found


def _alias(entry: str, module: str, group: str, checkpoint_prefix: str, engine_prefix: str) -> str | None:
    """The entry under the engine's prefix, when it covers a module of the failing module's group."""
    if entry.startswith("re:"):
        rooted = re.match(r"\\?\.".join(re.escape(part) for part in checkpoint_prefix.split(".")), entry[3:])
        if rooted and _regex_matches(entry[3:], module):
            return "re:" + re.escape(engine_prefix) + entry[3 + rooted.end() :]
        return None
    if entry.startswith(group):
        return engine_prefix + entry[len(checkpoint_prefix) :]
    return None


def _regex_matches(pattern: str, name: str) -> bool:
    try:
        return re.match(pattern, name) is not None
    except re.error:
        return False


def guarded_include(lines: list[str], header: str, macro: str) -> tuple[str, str] | None:
    """(line, replacement) that puts a CUDA-only `#include` under the ROCm macro, with the HIP header for ROCm."""
    pattern = rf"#\s*include\s*[<\"]{re.escape(header)}[>\"]"
    line = next((line for line in lines if re.search(pattern, line)), None)
    if line is None:
        return None
    return line, f"#ifdef {macro}\n#include <{HIP_HEADERS[header]}>\n#else\n{line}\n#endif"


def next_flag_value(values: list[FlagValue], current: FlagValue, in_use: list[FlagValue], lower: bool) -> FlagValue:
    """Another allowed value of a tunable: the next lower number for memory, else the first that is neither set nor
    what the engine chose itself; None when there is none."""
    options = [v for v in values if v != current and v is not None and v not in in_use]
    if lower:
        numbers = [v for v in values if isinstance(v, int | float)]
        ceiling = current if isinstance(current, int | float) else max(numbers, default=0)
        options = sorted((v for v in options if isinstance(v, int | float) and v < ceiling), reverse=True)
    return options[0] if options else None


def shape_signature(shape: dict) -> tuple:
    """A shape without its size field (aiter's `token`: each forward's M), which every warning line varies."""
    return tuple(sorted((key, str(value)) for key, value in shape.items() if key != "token"))


def holds_all(flags: dict, candidate: dict) -> bool:
    """`flags` already hold every value of the candidate."""
    return all(flags.get(flag) == value for flag, value in candidate.items())


def fix_subject(rule: str, arguments: dict) -> str:
    """A commit subject a reviewer can act on, from what a rule's edit changed."""
    name = PurePosixPath(arguments.get("path", "")).name
    if rule == "guard":
        return f"Guard the CUDA-only include in {name} for ROCm"
    if rule == "exclude":
        return f"Keep {excluded_by_edit(arguments.get('old', ''), arguments.get('new', ''))} unquantized"
    return f"Fix {name}"


def repo_path(roots: list[str], file: str | None) -> str | None:
    """A file named in a log, as a path inside a declared repo (logs may give it relative)."""
    if not file:
        return None
    for root in map(PurePosixPath, roots):
        path = PurePosixPath(file)
        if path.is_absolute() and root in path.parents:
            return str(path)
        if not path.is_absolute():
            return str(root / path)
    return None


def file_lines(read_file_text: str) -> list[str]:
    """The file's lines from a read_file result ("   12  text" per line after a header line)."""
    numbered = (re.match(r"^\s*\d+  (.*)$", line) for line in read_file_text.splitlines()[1:])
    return [match.group(1) for match in numbered if match]


def values_in_use(values: list[FlagValue], lines: list[str]) -> list[FlagValue]:
    """Allowed values that the log lines naming a flag report ("Attention backend: triton")."""
    text = "\n".join(lines).lower()
    return [v for v in values if isinstance(v, str) and re.search(rf"\b{re.escape(v.lower())}\b", text)]


def flag_candidates(task: Task, unmet: set[str]) -> list[tuple[str, dict[str, FlagValue]]]:
    """Flag changes worth measuring, in order: for single-stream speed, speculative decoding then each
    remaining tunable (a single-stream check is cheap); for throughput, the topology then each remaining
    tunable. A shallower draft trades verify cost against accepted drafts, a few percent either way: it is first
    judged together with the next tunable (another flag, independent of the draft) instead of paying a launch alone,
    and alone after that. A move is listed once per goal it may serve. Flags are read through the task's engine
    declaration (engines/), so sglang's and vLLM's spellings are searched alike."""
    engine = engine_named(task.serve.engine)
    tunables = task.serve.tunables
    handled = engine.topology_flags() | set(engine.speculative_flags)
    others = [
        {flag: value}
        for flag, values in tunables.items()
        if flag not in handled
        for value in values
        if value != task.serve.flags.get(flag) and value is not None
    ]
    candidates: list[tuple[str, dict[str, FlagValue]]] = []
    if "single" in unmet:
        drafts = speculative_configs(tunables, engine)
        riding = [{**draft, **others[0]} for draft in drafts[1:]] if others else []
        candidates += [("single_stream", config) for config in [*drafts[:1], *riding, *drafts[1:], *others]]
    if "throughput" in unmet:
        splits = topologies(tunables, task.hardware.count, engine)
        candidates += [("throughput", config) for config in [*splits, *others]]
    return candidates


def speculative_configs(tunables: dict[str, list[FlagValue]], engine: Engine) -> list[dict[str, FlagValue]]:
    """One draft configuration per allowed draft depth, deepest first, in the engine's own flags: of the
    combinations the tunables allow (read back through the engine's draft spelling), the smallest top-k and
    the smallest verified-token count above the depth. The deepest draft runs every code path a shallower one
    does and more (kernels built only from some depth on), so its bring-up meets every crash in one pending
    change; a shallower draft is then a flag move on a tree that serves."""
    names = [flag for flag in engine.speculative_flags if flag in tunables]
    by_depth: dict[int, tuple[tuple, dict[str, FlagValue]]] = {}
    for values in itertools.product(*(tunables[flag] for flag in names)):
        flags = {flag: value for flag, value in zip(names, values, strict=True) if value is not None}
        draft = engine.read_draft(flags) if flags else None
        if draft is None:
            continue
        tokens = draft.draft_tokens or draft.steps + 1
        below = tokens < draft.steps + 1  # fewer verified tokens than the depth drafts: only when nothing else is
        rank = (draft.topk, below, -tokens if below else tokens, -len(flags))  # then the most flags spelled out
        if draft.steps not in by_depth or rank < by_depth[draft.steps][0]:
            by_depth[draft.steps] = (rank, flags)
    return [by_depth[depth][1] for depth in sorted(by_depth, reverse=True)]


def topologies(tunables: dict[str, list[FlagValue]], gpus: int, engine: Engine) -> list[dict[str, FlagValue]]:
    """TP x DP splits that use every GPU, widest TP first (the baseline), then more data parallelism, in the
    engine's spelling of the two flags."""
    tp_name = next((flag for flag in engine.tensor_parallel if flag in tunables), None)
    dp_name = next((flag for flag in engine.data_parallel if flag in tunables), None)
    if tp_name is None or dp_name is None:
        return []
    widest_first = sorted((v for v in tunables[tp_name] if v), reverse=True)
    return [{tp_name: tp, dp_name: dp} for tp in widest_first for dp in tunables[dp_name] if tp * (dp or 1) == gpus]


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
