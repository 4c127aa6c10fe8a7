"""Every serve flag and value the real tasks write, against the engines' own CLI declarations (pinned wheels).

Read with ast, not by running the parsers: sglang 0.5.20's `ServerArgs.add_cli_args` needs `sglang.srt.utils.common`
(psutil, torch), vLLM 0.25.1's `EngineArgs.add_cli_args` needs `vllm.config` (torch). What is read:
- sglang: the dataclass fields of `sglang/srt/arg_groups/fields/*.py` (`name: A[T, Arg(...)]`), which
  `arg_groups/arg_utils.py: add_cli_args_from_dataclass` turns into `--name-with-dashes` (+ `aliases`, or `cli_name`;
  `bool` -> store_true; `choices` literal or a name from `arg_groups/choices.py`), plus the `add_argument` calls of
  `server_args.py`; the speculative algorithm names of `speculative/spec_info.py` (enum) and `spec_registry.py`
  (`_RESERVED_ALIASES`).
- vLLM: the option strings of every `add_argument` call in `vllm/engine/arg_utils.py`; kv-cache dtypes from
  `vllm/config/cache.py: CacheDType`; speculative methods from `vllm/config/speculative.py` (`"mtp"` in MTPModelTypes).
The real tasks' flags must be long names as declared (argparse would accept an abbreviation; porter's preflight
refuses them), and each value must be one the declaration allows.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import upstream_wheels

from porter.task import load_task

ROOT = Path(__file__).resolve().parents[2]
SGLANG_TASK = ROOT / "tasks" / "glm52_mi355x.yaml"
VLLM_TASK = ROOT / "tasks" / "glm52_mi355x_vllm.yaml"
FIELDS = "sglang/srt/arg_groups/fields/"


def literal_strings(node: ast.AST) -> list[str]:
    return [item.value for item in ast.walk(node) if isinstance(item, ast.Constant) and isinstance(item.value, str)]


def module_lists(source: str) -> dict[str, list[str]]:
    """Top-level `NAME = [...]` lists of string constants."""
    lists = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.List | ast.Tuple):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    lists[target.id] = literal_strings(node.value)
    return lists


def sglang_field_flags(source: str, choice_lists: dict[str, list[str]]) -> dict[str, dict]:
    """--flag -> {"bool": ..., "choices": ...} for every CLI field declared in one fields module."""
    flags = {}
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        annotation = node.annotation
        if not (isinstance(annotation, ast.Subscript) and getattr(annotation.value, "id", None) == "A"):
            continue
        kind, meta = annotation.slice.elts[0], annotation.slice.elts[1]
        arg = {kw.arg: kw.value for kw in meta.keywords} if isinstance(meta, ast.Call) else {}
        if isinstance(arg.get("no_cli"), ast.Constant) and arg["no_cli"].value:
            continue
        names = [arg["cli_name"].value] if "cli_name" in arg else ["--" + node.target.id.replace("_", "-")]
        names += literal_strings(arg["aliases"]) if "aliases" in arg else []
        choices = arg.get("choices")
        if isinstance(choices, ast.Name):
            choices = choice_lists.get(choices.id)
        elif choices is not None:
            choices = literal_strings(choices)
        is_bool = ast.unparse(kind) in ("bool", "Optional[bool]") and "action" not in arg
        for name in names:
            flags[name] = {"bool": is_bool, "choices": choices}
    return flags


def explicit_flags(source: str) -> dict[str, dict]:
    """Option strings of the `add_argument` calls of a module, with literal choices where given."""
    flags = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            options = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            keywords = {kw.arg: kw.value for kw in node.keywords}
            choices = keywords.get("choices")
            listed = literal_strings(choices) if isinstance(choices, ast.List) else None
            is_bool = isinstance(keywords.get("action"), ast.Constant) and keywords["action"].value == "store_true"
            for option in options:
                flags[option] = {"bool": is_bool, "choices": listed}
    return flags


@pytest.fixture(scope="module")
def sglang_cli(wheels) -> dict:
    wheel = wheels["sglang"]
    choice_lists = module_lists(upstream_wheels.read_source(wheel, "sglang/srt/arg_groups/choices.py"))
    flags = explicit_flags(upstream_wheels.read_source(wheel, "sglang/srt/server_args.py"))
    members = [m for m in upstream_wheels.wheel_members(wheel) if m.startswith(FIELDS) and m.endswith(".py")]
    for member in members:
        flags.update(sglang_field_flags(upstream_wheels.read_source(wheel, member), choice_lists))
    return flags


@pytest.fixture(scope="module")
def sglang_speculative_algorithms(wheels) -> set[str]:
    source = upstream_wheels.read_source(wheels["sglang"], "sglang/srt/speculative/spec_info.py")
    enum = next(
        n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef) and n.name == "SpeculativeAlgorithm"
    )
    members = {t.id for n in enum.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    registry = upstream_wheels.read_source(wheels["sglang"], "sglang/srt/speculative/spec_registry.py")
    aliases = upstream_wheels.lift(registry, ["_RESERVED_ALIASES"], {}, "spec_registry.py")["_RESERVED_ALIASES"]
    return (members - {"NONE"}) | set(aliases)


@pytest.fixture(scope="module")
def vllm_cli(wheels) -> dict:
    wheel = wheels["vllm"]
    flags = explicit_flags(upstream_wheels.read_source(wheel, "vllm/engine/arg_utils.py"))
    cache = upstream_wheels.read_source(wheel, "vllm/config/cache.py")
    dtypes = next(n for n in ast.parse(cache).body if isinstance(n, ast.Assign) and n.targets[0].id == "CacheDType")
    flags["--kv-cache-dtype"]["choices"] = literal_strings(dtypes.value)
    return flags


def task_values(path: Path) -> dict[str, list]:
    serve = load_task(path, environ={}).serve
    values = {flag: [value] for flag, value in serve.flags.items()}
    for flag, options in serve.tunables.items():
        values.setdefault(flag, []).extend(options)
    return values


def check_against(declared: dict, values: dict[str, list]) -> list[str]:
    problems = []
    for flag, options in values.items():
        spec = declared.get("--" + flag)
        if spec is None:
            near = sorted(name for name in declared if name.startswith("--" + flag))
            problems.append(f"--{flag} is not declared upstream" + (f" (did you mean {near[:3]})" if near else ""))
            continue
        for value in options:
            if value is None:
                continue
            if spec["bool"] and value is not True:
                problems.append(f"--{flag} takes no value (store_true); the task gives {value!r}")
            if spec["choices"] and str(value) not in spec["choices"]:
                problems.append(f"--{flag} {value!r} is not among {spec['choices']}")
    return problems


def test_the_sglang_task_speaks_sglang_0_5_20(sglang_cli, sglang_speculative_algorithms):
    values = task_values(SGLANG_TASK)
    assert check_against(sglang_cli, values) == []
    for algorithm in values.get("speculative-algorithm", []):
        assert algorithm is None or algorithm.upper() in sglang_speculative_algorithms, algorithm


def test_the_sglang_declarations_read_are_the_ones_porter_relies_on(sglang_cli):
    """The reader itself: a few declarations the notes cite, so an empty or garbled read cannot pass."""
    assert sglang_cli["--tensor-parallel-size"] == sglang_cli["--tp-size"]
    assert sglang_cli["--enable-dp-attention"]["bool"]
    assert {"auto", "fp8_e4m3", "bf16"} <= set(sglang_cli["--kv-cache-dtype"]["choices"])
    assert "tilelang" in sglang_cli["--dsa-prefill-backend"]["choices"]
    assert "tilelang" in sglang_cli["--dsa-decode-backend"]["choices"]
    assert "aiter" in sglang_cli["--attention-backend"]["choices"]
    assert "--tp" not in sglang_cli  # the recipes' `--tp` is an argparse abbreviation


def test_the_vllm_task_speaks_vllm_0_25_1(vllm_cli, wheels):
    values = task_values(VLLM_TASK)
    assert check_against(vllm_cli, {k: v for k, v in values.items() if k != "speculative-config"}) == []
    speculative = upstream_wheels.read_source(wheels["vllm"], "vllm/config/speculative.py")
    mtp_types = next(
        n for n in ast.parse(speculative).body if isinstance(n, ast.Assign) and n.targets[0].id == "MTPModelTypes"
    )
    for config in values.get("speculative-config", []):
        if config is not None:
            assert json.loads(config)["method"] in literal_strings(mtp_types.value), config
    assert {"--tensor-parallel-size", "-tp", "--enable-expert-parallel", "--gpu-memory-utilization"} <= set(vllm_cli)


def test_a_misspelt_flag_or_value_is_reported(sglang_cli):
    problems = check_against(sglang_cli, {"tp": [8], "kv-cache-dtype": ["fp8"], "enable-dp-attention": [2]})
    assert len(problems) == 3, problems
