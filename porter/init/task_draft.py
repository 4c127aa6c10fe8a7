"""`porter init CHECKPOINT --engine E --hardware GPU:N`: a commented task drafted from the checkpoint, and a report.

Covers assembling the task (the model, the node, the engine's image and the trees it installs, the serve command and
flags in the engine's own names with the plan's layouts, memory, KV and draft tunables, the quality sets and the
workload preset with relative targets, the MoE tuning command), merging a profile over it (a YAML file of task
sections, per engine and for all, with {variables}: the twin's image, in-image checkpoint, device service and
local_setup; relative command paths in it are relative to the profile and rewritten for the output file), writing it
with a comment beside what init decided and why, and printing what it inferred, why, and what it could not decide.
Reading the checkpoint is checkpoint_source.py and checkpoint_facts.py; deciding is layout_plan.py.
"""

from __future__ import annotations

import copy
import os
import re
import shlex
import sys
from pathlib import Path

import yaml

from porter.checks.quality_data import OUTPUT_NAMES
from porter.engines.engine import Engine
from porter.engines.known import engine_named
from porter.init import layout_plan, task_yaml
from porter.init.checkpoint_facts import CheckpointFacts, FactsError
from porter.init.checkpoint_source import CheckpointError, CheckpointFiles, read_checkpoint
from porter.init.hardware import GIB, Gpu, parse_hardware
from porter.init.weight_estimate import sized_facts
from porter.upstream_facts import AITER_FMOE_TUNE_FLAGS, AITER_FMOE_TUNER, ImageLayout, default_image, layouts_of

DATA = "${PORTER_DATA:-/data/evals}"
QUALITY = [
    {
        "name": "gsm8k",
        "kind": "gsm8k",
        "dataset": f"{DATA}/gsm8k/{OUTPUT_NAMES['gsm8k']}",
        "samples": 1319,
        "few_shot": 5,
        "few_shot_dataset": f"{DATA}/gsm8k/{OUTPUT_NAMES['gsm8k-train']}",
        "metric": "flexible_match",
        "max_tokens": 1024,
        "reference": "first_healthy",
        "tolerance": 0.015,
    },
    {
        "name": "gpqa-diamond",
        "kind": "multiple_choice",
        "dataset": f"{DATA}/gpqa/{OUTPUT_NAMES['gpqa-diamond']}",
        "samples": 198,
        "few_shot": 0,
        "metric": "accuracy",
        "max_tokens": 16384,
        "reference": "first_healthy",
        "tolerance": 0.04,
    },
]
PLATEAU_CANDIDATES = 3
# The architecture names each pinned engine registers, generated from its wheel and checked against it by
# tests/conformance/test_conformance_architectures.py.
ARCHITECTURES = Path(__file__).with_name("engine_architectures.txt")
ARGV_PATHS = (("sandbox", "local_setup"), ("sandbox", "image_build"))  # a profile's host commands, first word a path


class InitError(Exception):
    """Bad input to porter init: one line."""


def init_main(
    checkpoint: str,
    engine_name: str,
    hardware: str,
    image: str | None,
    out: str | None,
    profile: str | None,
    variables: tuple[str, ...],
) -> int:
    try:
        engine, (gpu, count) = engine_named(engine_name), parse_hardware(hardware)
        files = read_checkpoint(checkpoint)
        facts = sized_facts(files.config, files.index, files.quant)
        facts.count_windows(engine)
        plan = layout_plan.plan(facts, engine, gpu, count)
        task, comments = build_task(files, facts, plan, engine, gpu, count, image)
        header = _header(files, engine, hardware, out, profile, variables)
        warning = unregistered(facts, engine)
        if warning:
            print(f"porter: warning: {warning}", file=sys.stderr)
            header.append(f"WARNING: {warning}")
            plan.undecided.append(warning)
        if profile:
            task, extra = apply_profile(task, Path(profile), engine, plan, _variables(variables), out)
            header += extra
    except (CheckpointError, FactsError, InitError, ValueError, OSError) as exc:
        print(f"porter: {exc}", file=sys.stderr)
        return 2
    text = task_yaml.render(task, comments, header)
    if out:
        Path(out).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    report = sys.stdout if out else sys.stderr
    print(describe(files, facts, plan, engine, gpu, count, out), file=report)
    return 0


def registered_architectures() -> dict[str, tuple[str, set[str]]]:
    """engine -> (its pinned version, the architecture names it registers)."""
    found = {}
    for line in ARCHITECTURES.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            head, _, names = line.partition(": ")
            engine, version = head.split()
            found[engine] = (version, set(names.split()))
    return found


def unregistered(facts: CheckpointFacts, engine: Engine) -> str | None:
    """A warning when the pinned engine registers no model class under the checkpoint's architecture name."""
    version, names = registered_architectures().get(engine.name, ("", set()))
    if facts.architecture in names:
        return None
    return (
        f"{engine.name} {version or '(no list)'} registers no architecture named {facts.architecture!r}: it loads "
        "this checkpoint only through its Transformers fallback or a patch that registers one"
    )


def build_task(
    files: CheckpointFiles,
    facts: CheckpointFacts,
    plan: layout_plan.Plan,
    engine: Engine,
    gpu: Gpu,
    count: int,
    image: str | None,
) -> tuple[dict, dict]:
    image = image or default_image(engine.name)
    base = files.model_id.split("/")[-1]
    layouts = layouts_of(image or "")
    repos = [{"name": entry.repo, "path": entry.path, "upstream": entry.upstream} for entry in layouts]
    if not repos:
        plan.undecided.append(f"image {image} is not pinned in porter/upstream_facts.py: declare the repos to patch")
    serve = {
        "engine": engine.name,
        "command": engine.launch,
        "host": "0.0.0.0",
        "port": engine.default_port,
        "health_path": "/health",
        "startup_timeout_s": 2400,
        "flags": plan.flags,
        "tunables": plan.tunables,
    }
    task = {
        "name": re.sub(r"[^a-z0-9_.-]+", "-", f"{base}-{gpu.name}-{engine.name}".lower()).strip("-"),
        "description": f"Serve {files.model_id} on {count}x {gpu.name} with {engine.name}: quality within tolerance "
        "of its first healthy configuration, throughput and single stream as high as the budget allows.",
        "model": _model(files, facts, base),
        "hardware": {"gpu": gpu.name, "count": count, "nodes": 1},
        "sandbox": _sandbox(engine, image, layouts),
        "repos": repos,
        "serve": serve,
        "checks": {
            "plateau_candidates": PLATEAU_CANDIDATES,
            "quality": copy.deepcopy(QUALITY),
            **copy.deepcopy(layout_plan.PRESET),
        },
        "tune": _tune(plan, facts, layouts),
        "agent": {
            "provider": "anthropic",
            "model": "claude-sonnet-4-5",
            "api_key_env": "ANTHROPIC_API_KEY",
            "limits": {"max_steps": 120, "max_cost_usd": 40, "max_wall_hours": 14, "max_relaunches": 40},
        },
        "outputs": {"runs_dir": "runs"},
    }
    comments = {("serve", "flags", flag): why for flag, why in plan.comments.items()}
    comments |= {
        ("checks", "plateau_candidates"): "a relative target ends after this many candidates in a row within noise",
        ("checks", "quality"): "reference first_healthy: the score of the run's first healthy configuration",
        ("checks", "throughput"): "target max: as high as the budget allows",
    }
    return task, comments


def _model(files: CheckpointFiles, facts: CheckpointFacts, base: str) -> dict:
    if "$" in files.source or "$" in files.model_id:  # the task loader would read ${NAME} in it as the environment
        raise InitError(f"{files.source!r}: a checkpoint path with `$` in it; rename or link the folder without one")
    path = files.source if files.local else f"${{MODEL_WEIGHTS:-/data/models/{base}}}"
    quant = facts.quantization.method
    return {
        "id": files.model_id,
        "path": path,
        "mount": f"/models/{base}",
        "quantization": None if quant == "none" else quant,
        "dtype": facts.dtype,
    }


def _sandbox(engine: Engine, image: str | None, layouts: list[ImageLayout]) -> dict:
    return {
        "kind": "docker",
        "image": image,
        "devices": ["/dev/kfd", "/dev/dri"],
        "group_add": ["video", "render"],
        "ipc": "host",
        "shm_size": "64g",
        "security_opt": ["seccomp=unconfined"],
        "cap_add": ["SYS_PTRACE"],
        "mounts": [
            {"host": "${PORTER_SANDBOX_CACHE:-/data/porter-cache}", "container": "/root/.cache", "read_only": False}
        ],
        "env": dict(engine.rocm_environment),
        "network": "none",
        "memory": "1536g",
        "pids": 32768,
        "max_file_size": "256g",
        "workdir": layouts[0].path if layouts else "/",
    }


def _tune(plan: layout_plan.Plan, facts: CheckpointFacts, layouts: list[ImageLayout]) -> list[dict]:
    aiter = next((entry for entry in layouts if entry.repo == "aiter"), None)
    if not plan.tune_rows:
        return []
    if aiter is None:
        plan.undecided.append("no tune command: the image has no pinned aiter tree to run aiter's tuner in")
        return []
    header = ",".join(plan.tune_rows[0])
    rows = " ".join(shlex.quote(",".join(str(v) for v in row.values())) for row in plan.tune_rows)
    untuned, tuned = "/tmp/porter_untuned_fmoe.csv", "porter_tuned_fmoe.csv"
    command = f"printf '%s\\n' {header} {rows} > {untuned} && rm -f {tuned} && "
    command += f"python3 {AITER_FMOE_TUNER} -i {untuned} -o {tuned} {AITER_FMOE_TUNE_FLAGS}"
    moe = facts.moe
    description = (
        f"Tune aiter's fused MoE for the checkpoint's experts (model_dim {moe.hidden}, expert width "
        f"{moe.expert_width}, E={moe.experts}, topk={moe.top_k}) at every padded M and each layout's "
        "share. Every row is tuned, those aiter already ships included: the tuner keeps a row only where the engine's "
        "operator runs faster with it than with the shipped one on this machine, and porter merges the rows kept into "
        "aiter's tables. The engine falls back to a slow default for a shape with no row."
    )
    entry = {"name": "moe", "description": description, "workdir": aiter.path, "command": command}
    return [{**entry, "timeout_s": 14400, "aiter_tuned_output": tuned}]


def _variables(pairs: tuple[str, ...]) -> dict[str, str]:
    found = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
            raise InitError(f"--var takes NAME=VALUE (NAME in lower case), got {pair!r}")
        found[name] = value
    return found


def apply_profile(task: dict, path: Path, engine: Engine, plan: layout_plan.Plan, given: dict, out: str | None):
    """The task with the profile's sections merged in, and the profile's header lines."""
    try:
        profile = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise InitError(f"profile {path}: {exc}") from None
    if not isinstance(profile, dict):
        raise InitError(f"profile {path}: expected a mapping of task sections")
    variables = {**(profile.get("variables") or {}), **given, "engine": engine.name}
    profile = _expand(profile, variables)
    section = dict(((profile.get("engines") or {}).get(engine.name)) or {})
    tune = {**(profile.get("tune") or {}), **(section.pop("tune", None) or {})}
    merged = _merge(_merge(task, profile.get("task") or {}), section)
    if tune and plan.tune_shape:
        quant = (tune.get("quant") or {}).get(plan.quant_key or "", plan.quant_key)
        command = tune["command"].format(**plan.tune_shape, quant=quant)
        merged["tune"] = [{**{k: v for k, v in tune.items() if k not in ("command", "quant")}, "command": command}]
    _rebase_paths(merged, path.parent, Path(out).resolve().parent if out else Path.cwd())
    return merged, [str(line) for line in profile.get("header") or []]


def _expand(value, variables: dict):
    if isinstance(value, str):
        for name, replacement in variables.items():
            value = value.replace(f"{{{name}}}", str(replacement))
        return value
    if isinstance(value, dict):
        return {key: _expand(item, variables) for key, item in value.items()}
    if isinstance(value, list):
        return [_expand(item, variables) for item in value]
    return value


def _merge(base: dict, over: dict) -> dict:
    merged = dict(base)
    for key, value in over.items():
        merged[key] = (
            _merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
        )
    return merged


def _rebase_paths(task: dict, profile_dir: Path, out_dir: Path) -> None:
    """A relative first word of a profile's host command is relative to the profile: make it relative to the task."""
    argvs = [task.get(section, {}).get(key) for section, key in ARGV_PATHS]
    argvs += [service.get("command") for service in task.get("sandbox", {}).get("services") or []]
    for argv in argvs:
        if argv and isinstance(argv[0], str) and argv[0].startswith("."):
            argv[0] = os.path.relpath((profile_dir / argv[0]).resolve(), out_dir)


def _header(files: CheckpointFiles, engine: Engine, hardware: str, out, profile, variables) -> list[str]:
    words = ["porter", "init", files.model_id if not files.local else "CHECKPOINT"]
    words += ["--engine", engine.name, "--hardware", hardware]
    words += ["--profile", str(profile)] if profile else []
    words += [item for pair in variables for item in ("--var", pair)]
    words += ["--out", str(out)] if out else []
    return [
        f"Written by `{' '.join(words)}` from {files.model_id}'s config.json"
        + (" and weight index" if files.index else "")
        + "; edit it, or rerun init.",
        "Every flag is the engine's own name (porter/engines/); the layouts, tunables and tuning rows say why below.",
    ]


def describe(
    files: CheckpointFiles, facts: CheckpointFacts, plan: layout_plan.Plan, engine: Engine, gpu: Gpu, count: int, out
) -> str:
    moe = facts.moe
    lines = [f"porter init: {files.model_id} ({files.source}) for {engine.name} on {count}x {gpu.name}", "Inferred:"]
    facts_rows = [
        (
            "architecture",
            f"{facts.architecture} ({facts.model_type}), dtype "
            + ("undecided (2 bytes a weight)" if "dtype" in facts.open else facts.dtype),
            facts.why.dtype,
        ),
        ("quantization", facts.quantization.summary + _exclude_text(facts), facts.why.quantization),
        ("layers", _layers_text(facts), facts.why.layers or facts.why.attention_layers),
        ("MoE", _moe_text(moe), facts.why.moe),
        ("MLP activation", facts.activation, facts.why.activation),
        ("expert dtype", facts.expert_dtype or "no routed experts", facts.why.expert_dtype),
        ("MTP layers", str(facts.mtp_layers), facts.why.mtp),
        (
            "attention",
            f"{facts.attention.kind} ({facts.attention.heads} heads, {facts.attention.kv_heads} KV heads, head dim "
            f"{facts.attention.head_dim}), {facts.attention.full_layers} layers with a growing KV cache"
            + (f"; {facts.attention.bounded_layers}" if facts.attention.bounded_layers else ""),
            facts.why.attention,
        ),
        ("context", str(facts.context_length), facts.why.context),
        ("weights", f"{facts.weight_bytes / 1e9:.1f} GB", facts.why.weights),
        (
            "KV per token",
            f"{facts.kv_bytes_per_token(2) / 1024:.1f} KiB bf16, {facts.kv_bytes_per_token(1) / 1024:.1f} KiB fp8",
            "the cache of every layer whose KV grows, for one token",
        ),
    ]
    lines += [
        f"  {name}: {f'undecided ({value} as far as init read: see Could not decide)' if name in facts.open else value}"
        + (f"  [{why}]" if why else "")
        for name, value, why in facts_rows
    ]
    lines.append(
        f"Layouts ({gpu.name} {gpu.memory_gib} GiB, {engine.memory_fraction} {engine.memory_share}, "
        f"headroom {plan.need_tokens} KV tokens a replica):"
    )
    for layout in plan.layouts:
        tokens = f"{layout.tokens('auto') / 1e6:.2f}M/{layout.tokens('fp8') / 1e6:.2f}M tokens bf16/fp8"
        share = (
            f", expert share {layout.expert_share:g}{'' if layout.whole_blocks else ' (not whole blocks)'}"
            if moe
            else ""
        )
        lines.append(
            f"  {layout.label():<16} weights {layout.weights_per_gpu / GIB:6.1f} GiB/GPU, KV room "
            f"{layout.kv_room_per_gpu / GIB:6.1f} GiB, {tokens}{share}"
        )
    lines += [f"  {line}" for line in plan.inferred]
    lines.append("Could not decide:")
    lines += [f"  - {line}" for line in [*facts.undecided, *plan.undecided, *_always_undecided(facts)]] or ["  nothing"]
    lines.append(f"Wrote {out}: check it with `porter validate {out}`" if out else "Task written to stdout.")
    return "\n".join(lines)


def _layers_text(facts: CheckpointFacts) -> str:
    counts: dict[str, int] = {}
    for mixer, mlp in facts.layer_kinds:
        kind = " + ".join(part for part in (mixer, mlp) if part != "none") or "empty"
        counts[kind] = counts.get(kind, 0) + 1
    return ", ".join(f"{count} {kind}" for kind, count in counts.items())


def _moe_text(moe) -> str:
    if moe is None:
        return "dense"
    shared = (
        f", {moe.shared_experts} shared of width {moe.shared_width}" if moe.shared_experts else ", no shared expert"
    )
    return (
        f"hidden {moe.hidden}, expert width {moe.expert_width}, {moe.experts} experts, "
        f"{f'top-{moe.top_k}' if moe.top_k else 'top-k undecided'}{shared}; "
        f"{moe.moe_layers} MoE layers, {moe.dense_layers} dense"
    )


def _exclude_text(facts: CheckpointFacts) -> str:
    quant = facts.quantization
    if not quant.exclude_key:
        return "; no exclude list"
    regex = sum(entry.startswith("re:") for entry in quant.exclude)
    globs = sum("*" in entry and not entry.startswith("re:") for entry in quant.exclude)
    return f"; {quant.exclude_key}: {len(quant.exclude)} entries ({regex} re:, {globs} glob)"


def _always_undecided(facts: CheckpointFacts) -> list[str]:
    found = [
        "the attention backend is left to the engine's default for this GPU and head size",
        "targets: nobody knows them on day 0, so they are relative (see checks:)",
    ]
    if facts.mtp_layers:
        found.append(
            "whether the engine has a draft model class for this architecture's MTP layers (preflight "
            "checks the flags only; the first launch with a draft says)"
        )
    return found
