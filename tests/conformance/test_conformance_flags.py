"""Every serve flag and value the real tasks write, against the engines' own CLI declarations (the wheels under test).

- sglang: its own parser, `ServerArgs.add_cli_args` built in a child process from the wheel with torch stubbed
  (upstream_runtime.py): every option string with its dest, whether it takes a value, its choices, and whether the
  release marks it deprecated (a `Deprecated*` action of `arg_groups/argparse_actions.py`, naming its replacement,
  as 0.5.23 does for `--enable-dp-attention` -> `--attn-dp-size`); the speculative algorithm names of
  `speculative/spec_info.py` (enum) and `spec_registry.py` (`_RESERVED_ALIASES`). Porter's parallel spellings
  (engines/sglang.py) are parsed by it and must set the size they name.
- vLLM, read with ast (its `EngineArgs.add_cli_args` needs `vllm.config`, i.e. torch): the option strings of every
  `add_argument` call in `vllm/engine/arg_utils.py`; kv-cache dtypes from `vllm/config/cache.py: CacheDType`;
  speculative methods from `vllm/config/speculative.py` (`"mtp"` in MTPModelTypes).
The real tasks' flags must be long names as declared (argparse would accept an abbreviation; porter's preflight
refuses them), not deprecated in the release under test, and each value must be one the declaration allows.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import upstream_runtime
import upstream_wheels

from porter.engines.known import ENGINES
from porter.task import load_task

ROOT = Path(__file__).resolve().parents[2]
SGLANG_TASK = ROOT / "tasks" / "glm52_mi355x.yaml"
VLLM_TASK = ROOT / "tasks" / "glm52_mi355x_vllm.yaml"
ENGINE = ENGINES["sglang"]
PARALLEL = {
    "tp_size": ENGINE.tensor_parallel,
    "dp_size": ENGINE.data_parallel,
    "pp_size": ENGINE.pipeline_parallel,
    "ep_size": ENGINE.expert_parallel,
}


def literal_strings(node: ast.AST) -> list[str]:
    return [item.value for item in ast.walk(node) if isinstance(item, ast.Constant) and isinstance(item.value, str)]


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
def sglang_parser(wheels, tmp_path_factory) -> dict:
    """sglang's own parser, built from the wheel under test, and how it takes each spelling porter declares."""
    spellings = [name for names in PARALLEL.values() for name in names]
    return upstream_runtime.sglang_options(wheels, spellings, tmp_path_factory.mktemp("sglang-parser"))


@pytest.fixture(scope="module")
def sglang_cli(sglang_parser) -> dict:
    return sglang_parser["options"]


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
        if spec.get("deprecated") and any(value is not None for value in options):
            problems.append(f"--{flag} is deprecated in this release: {spec['deprecated']} replaces it")
        for value in options:
            if value is None:
                continue
            if spec["bool"] and value is not True:
                problems.append(f"--{flag} takes no value (store_true); the task gives {value!r}")
            if spec["choices"] and str(value) not in spec["choices"]:
                problems.append(f"--{flag} {value!r} is not among {spec['choices']}")
    return problems


def test_the_sglang_task_speaks_the_sglang_under_test(sglang_cli, sglang_speculative_algorithms):
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


@pytest.mark.parametrize("size", PARALLEL)
def test_each_parallel_spelling_porter_declares_sets_that_size(sglang_parser, size):
    """An abbreviation is accepted only while one option starts with it: sglang's `--pp` is ambiguous (--pp-size,
    --pp-max-micro-batch-size, ...), so it must not be a spelling porter writes or reads as the pipeline size."""
    for spelling in PARALLEL[size]:
        assert sglang_parser["spellings"][spelling] == size, (spelling, sglang_parser["spellings"][spelling])


def test_a_misspelt_flag_or_value_is_reported(sglang_cli):
    problems = check_against(sglang_cli, {"tp": [8], "kv-cache-dtype": ["fp8"], "trust-remote-code": [2]})
    assert len(problems) == 3, problems


def test_a_flag_the_release_deprecates_is_reported(sglang_cli):
    """What the release under test marks deprecated, read off its parser (0.5.23: --enable-dp-attention)."""
    deprecated = sorted(name for name, spec in sglang_cli.items() if spec["deprecated"] and name.startswith("--"))
    assert deprecated, "the parser shows no Deprecated* action: reread sglang's arg_groups/argparse_actions.py"
    assert "is deprecated in this release" in " ".join(check_against(sglang_cli, {deprecated[0][2:]: [True]}))
