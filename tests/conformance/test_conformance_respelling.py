"""The launch flags porter renders for the sglang release under test, through that release's own parser and resolution.

DP attention is spelled `--enable-dp-attention --dp-size N` in sglang 0.5.20 (arg_groups/fields/parallel.py) and
`--attn-dp-size N` from 0.5.23 on, where `--enable-dp-attention` is a deprecated DeprecatedStoreTrueAction
(server_args.py, "remove ... after 2026-12-31") that arg_groups/parallel_hook.py handle_deprecated_dp_attention turns
into attn_dp_size = dp_size, dp_size = 1. engines/sglang.py declares that as a respelling; here porter's render for
the wheel's version (engines/serve.py render_command) must parse, use no option the release marks deprecated, and
resolve to N attention groups in one replica. The architectures porter offers DP attention for are read in the
pinned wheel: the help of 0.5.20's `--enable-dp-attention` and the model classes of the modules it names.
"""

from __future__ import annotations

import ast
import json

import pytest
import upstream_runtime
import upstream_wheels
from test_conformance_recipe import GLM52_SHAPE, porter_argv

from porter.engines.engine import FlagRefused
from porter.engines.known import ENGINES
from porter.task import render_flags

ENGINE = ENGINES["sglang"]
GROUPS = 8
DP_ATTENTION = {"tp-size": GROUPS, "dp-size": GROUPS, "enable-dp-attention": True}
FIELDS = ["tp_size", "dp_size", "enable_dp_attention", "attn_dp_size"]


def version_under_test() -> str:
    return upstream_wheels.pinned()["sglang"][0]


@pytest.fixture(scope="module")
def dp_attention(wheels, tmp_path_factory) -> tuple[list[str], dict, dict]:
    """(porter's argv with DP attention, the fields sglang resolves from it, the parser's options)."""
    scratch = tmp_path_factory.mktemp("respelling")
    (scratch / "config.json").write_text(json.dumps(GLM52_SHAPE))
    argv = porter_argv(DP_ATTENTION, str(scratch))  # rendered for the release under test
    [resolved] = upstream_runtime.resolve_sglang(wheels, [argv], FIELDS, scratch)
    options = upstream_runtime.sglang_options(wheels, [], scratch)["options"]
    return argv, resolved, options


def test_dp_attention_resolves_to_its_groups_in_one_replica(dp_attention):
    argv, resolved, _ = dp_attention
    assert "error" not in resolved, (argv, resolved)
    if isinstance(resolved["attn_dp_size"], int):  # 0.5.23 on: a field of its own; dp_size counts replicas again
        groups, replicas = resolved["attn_dp_size"], resolved["dp_size"]
    else:  # 0.5.20: dp_size counts the attention groups while enable_dp_attention is on
        groups, replicas = (resolved["dp_size"] if resolved["enable_dp_attention"] else 1), 1
    assert (resolved["tp_size"], groups, replicas) == (GROUPS, GROUPS, 1), (version_under_test(), argv, resolved)


def test_porter_writes_no_option_the_release_deprecates(dp_attention):
    argv, _, options = dp_attention
    deprecated = {word: options[word]["deprecated"] for word in argv if options.get(word, {}).get("deprecated")}
    assert deprecated == {}, f"sglang {version_under_test()} deprecates {deprecated}: add a respelling"
    assert any(options.get("--" + change.new) for change in ENGINE.respellings) == any(
        options.get("--" + change.old, {}).get("deprecated") for change in ENGINE.respellings
    ), "a respelling's new flag exists exactly where its old one is deprecated"


def test_the_new_spelling_is_refused_before_its_release():
    with pytest.raises(FlagRefused, match="0.5.20 has no --attn-dp-size"):
        ENGINE.spelled_for("0.5.20", {"tp-size": 8, "attn-dp-size": 8})
    assert ENGINE.spelled_for("0.5.23", DP_ATTENTION) == {"tp-size": GROUPS, "attn-dp-size": GROUPS}


def test_the_architectures_offered_dp_attention_are_the_ones_the_pinned_help_names():
    """0.5.20's help: "Currently DeepSeek-V2 and Qwen 2/3 MoE models are supported"; their classes, by module."""
    wheel = upstream_wheels.fetch(upstream_wheels.REPO_LOCK, ["sglang"])["sglang"]
    fields = upstream_wheels.read_source(wheel, "sglang/srt/arg_groups/fields/parallel.py")
    assert "Currently DeepSeek-V2 and Qwen 2/3 MoE models are supported" in fields
    classes = set()
    for module in ("deepseek_v2", "qwen2_moe", "qwen3_moe"):
        tree = ast.parse(upstream_wheels.read_source(wheel, f"sglang/srt/models/{module}.py"))
        entry = next(
            n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "EntryClass"
        )
        classes |= {node.id for node in ast.walk(entry.value) if isinstance(node, ast.Name)}
    assert set(ENGINE.dp_attention_architectures) <= classes, classes
    assert "DeepseekV32ForCausalLM" in classes  # DSA, named by the help's family but not offered: it hangs on ROCm


def test_the_reduced_start_up_parses_as_dummy_weights_fewer_layers_and_no_graphs(wheels, tmp_path_factory):
    """serve's reduced start-up (Engine.reduced_flags) through each release's own parser: sglang's load_format,
    json_model_override_args and cuda_graph_backend_*, vLLM's EngineArgs load_format, hf_overrides, enforce_eager."""
    from test_conformance_recipe import vllm_porter_argv

    scratch = tmp_path_factory.mktemp("reduced")
    (scratch / "config.json").write_text(json.dumps(GLM52_SHAPE))
    graphs = ["cuda_graph_backend_decode", "cuda_graph_backend_prefill"]
    argv = porter_argv(ENGINE.reduced_flags(4), str(scratch))
    [sglang] = upstream_runtime.resolve_sglang(
        wheels, [argv], ["load_format", "json_model_override_args", *graphs], scratch
    )
    overrides = json.loads(sglang["json_model_override_args"])
    assert (sglang["load_format"], overrides, {sglang[field] for field in graphs}) == LAYERS_4 + ({"disabled"},)
    argv = vllm_porter_argv(str(scratch)) + render_flags(ENGINES["vllm"].reduced_flags(4))
    [vllm] = upstream_runtime.vllm_engine_args(
        wheels, [argv], ["load_format", "hf_overrides", "enforce_eager"], scratch
    )
    assert (vllm["load_format"], vllm["hf_overrides"], vllm["enforce_eager"]) == LAYERS_4 + (True,), vllm


LAYERS_4 = ("dummy", {"num_hidden_layers": 4})
