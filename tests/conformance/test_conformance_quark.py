"""The exclude entries porter writes for the MTP layer, run through sglang's and vLLM's own Quark matchers.

Upstream (notes: /work/notes/upstream-facts.md section 1): `should_ignore_layer` in
sglang 0.5.20 `sglang/srt/layers/quantization/quark/utils.py` and vLLM 0.25.1
`vllm/model_executor/layers/quantization/quark/utils.py` match an exclude entry exactly, or as a regex after `re:`
(re.match); a fused module (gate_up_proj) is excluded when each of its shards is. Their imports pull torch, so the
three functions are lifted out of the wheel with ast and run with the module (`re` / `regex`) they name.
sglang registers GLM-5's MTP layer under `model.decoder` (models/deepseek_nextn.py: `add_prefix("decoder", ...)`),
vLLM under the checkpoint's `model.layers.78` (models/deepseek_mtp.py: the layer's prefix is passed unchanged).
The criterion: every MTP module is excluded under the engine's name exactly when the checkpoint stores it unquantized.
"""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
import upstream_wheels

from porter.models.remedies import exclude_alias_edit

MATCHERS = {
    "sglang": ("sglang", "sglang/srt/layers/quantization/quark/utils.py"),
    "vllm": ("vllm", "vllm/model_executor/layers/quantization/quark/utils.py"),
}
# sglang: model_loader/loader.py adds this for quantization == "quark"; vLLM: DeepseekV2ForCausalLM's own mapping
FUSED = {"gate_up_proj": ["gate_proj", "up_proj"]}
MTP = "model.layers.78"  # GLM-5: num_hidden_layers 78, num_nextn_predict_layers 1
ENGINE_PREFIX = {"sglang": "model.decoder", "vllm": MTP}
# Modules of the MTP layer as the engines build them (suffix after the layer prefix), and a main-model module
MTP_MODULES = ["mlp.shared_experts.gate_up_proj", "mlp.shared_experts.down_proj", "mlp.experts", "self_attn.o_proj"]
MAIN_MODULE = "model.layers.3.mlp.shared_experts.gate_up_proj"
SHARED_EXPERT = "model.layers.78.mlp.shared_experts.gate_proj.weight"  # the name the crash log names


GLM_NEXTN = ("sglang/srt/models/glm4_moe.py", "GlmMoeDsaForCausalLMNextN")
GLM_NEXTN_MEMBERS = ["_NEXTN_SPEC_WEIGHT_NAMES", "_map_mtp_ckpt_name", "_resolve_nextn_quant_config"]


@pytest.fixture(scope="module")
def sglang_nextn_excludes(wheels):
    """sglang 0.5.20's own rewrite of the exclude list for GLM-5's draft model (`_resolve_nextn_quant_config`):
    exact `model.layers.78.*` names gain a `model.decoder.*` copy; `re:` entries are left as they are."""
    member, class_name = GLM_NEXTN
    stand_in = upstream_wheels.lift_methods(wheels["sglang"], member, class_name, GLM_NEXTN_MEMBERS, {})

    def rewrite(excludes: list[str]) -> list[str]:
        quant_config = SimpleNamespace(exclude_layers=list(excludes), quant_config={}, get_name=lambda: "quark")
        resolved = stand_in()._resolve_nextn_quant_config(SimpleNamespace(num_hidden_layers=78), quant_config)
        return resolved.exclude_layers

    return rewrite


@pytest.fixture(scope="module")
def should_ignore(wheels):
    """engine -> the engine's own should_ignore_layer, from its wheel, with its helpers from where they live."""
    regex = upstream_wheels.import_from_wheel(wheels["regex"], "regex")
    functions = {}
    for engine, (package, member) in MATCHERS.items():
        namespace = {"re": regex if engine == "vllm" else re, "Any": object}
        lifted = upstream_wheels.lift_where_defined(wheels[package], member, ["should_ignore_layer"], namespace)
        functions[engine] = lifted["should_ignore_layer"]
    return functions


# The checkpoint's exclude list as Quark exports spell it, and which MTP modules it keeps unquantized
EXACT = [f'    "{MTP}.mlp.shared_experts.{name}",' for name in ("gate_proj", "up_proj", "down_proj")]
SHARED_REGEX = [f'    "re:{MTP}.mlp.shared_experts.*",']
LAYER_REGEX = [f'    "re:{MTP}.*",']  # AMD's MXFP4 exports keep the whole MTP layer unquantized this way
CHECKPOINTS = {
    "exact names": (EXACT, {"mlp.shared_experts.gate_up_proj", "mlp.shared_experts.down_proj"}),
    "re: shared experts": (SHARED_REGEX, {"mlp.shared_experts.gate_up_proj", "mlp.shared_experts.down_proj"}),
    "re: whole layer": (LAYER_REGEX, set(MTP_MODULES)),
}


def entries(lines: list[str]) -> list[str]:
    """The entries of an exclude list written one JSON string a line."""
    return [json.loads(line.strip().rstrip(",")) for line in lines]


def remedied(lines: list[str]) -> list[str]:
    """The exclude list after porter's remedy edited it (one edit over the whole list, as the playbook makes it)."""
    edit = exclude_alias_edit(lines, MTP, "model.decoder", SHARED_EXPERT)
    if edit is None:
        return entries(lines)
    old, new = edit
    index = lines.index(old)
    return entries([*lines[:index], *new.splitlines(), *lines[index + 1 :]])


def test_a_glob_is_no_wildcard_to_either_engine(should_ignore):
    """An fnmatch glob (`model.decoder.mlp.shared_experts.*`) is one literal name to both engines; a `re:` entry is
    the pattern they match, so the remedy writes exact names or `re:` entries."""
    for engine, matcher in should_ignore.items():
        glob = [f"{ENGINE_PREFIX[engine]}.mlp.shared_experts.*"]
        assert not matcher(f"{ENGINE_PREFIX[engine]}.mlp.shared_experts.down_proj", glob, FUSED), engine
        assert not matcher(f"{ENGINE_PREFIX[engine]}.mlp.shared_experts.gate_up_proj", glob, FUSED), engine
        regex = [f"re:{re.escape(ENGINE_PREFIX[engine])}\\.mlp\\.shared_experts\\..*"]
        assert matcher(f"{ENGINE_PREFIX[engine]}.mlp.shared_experts.gate_up_proj", regex, FUSED), engine


def test_sglang_resolves_a_fused_module_by_its_shards(should_ignore):
    """Both shards excluded exclude the fused module, one alone is refused: on every version. The fused module's
    own name is enough only from 0.5.23 on (its direct check), so the remedy writes the shards' names."""
    matcher = should_ignore["sglang"]
    shards = ["model.decoder.mlp.shared_experts.gate_proj", "model.decoder.mlp.shared_experts.up_proj"]
    assert matcher("model.decoder.mlp.shared_experts.gate_up_proj", shards, FUSED)
    with pytest.raises(ValueError, match="same scheme"):
        matcher("model.decoder.mlp.shared_experts.gate_up_proj", shards[:1], FUSED)


def check_engine(matcher, engine: str, written: list[str], unquantized: set[str]) -> None:
    for module in MTP_MODULES:
        name = f"{ENGINE_PREFIX[engine]}.{module}"
        assert matcher(name, written, FUSED) == (module in unquantized), f"{engine}: {name} under {written}"
    assert not matcher(MAIN_MODULE, written, FUSED), f"{engine}: the main model's {MAIN_MODULE} under {written}"


def test_exact_names_from_the_checkpoint_reach_sglang_through_its_own_rewrite(should_ignore, sglang_nextn_excludes):
    lines, unquantized = CHECKPOINTS["exact names"]
    check_engine(should_ignore["sglang"], "sglang", sglang_nextn_excludes(entries(lines)), unquantized)
    check_engine(should_ignore["sglang"], "sglang", sglang_nextn_excludes(remedied(lines)), unquantized)


def test_sglang_leaves_a_regex_for_the_mtp_layer_unmapped(should_ignore, sglang_nextn_excludes):
    """The story's crash on the real engine: the checkpoint's `re:` entry never reaches `model.decoder`."""
    written = sglang_nextn_excludes(entries(SHARED_REGEX))
    assert not should_ignore["sglang"]("model.decoder.mlp.shared_experts.down_proj", written, FUSED)


def test_exact_names_still_select_the_checkpoint_names_in_vllm(should_ignore):
    lines, unquantized = CHECKPOINTS["exact names"]
    check_engine(should_ignore["vllm"], "vllm", remedied(lines), unquantized)


@pytest.mark.parametrize("checkpoint", ["re: shared experts", "re: whole layer"])
def test_the_checkpoint_regex_itself_selects_what_it_keeps_unquantized(should_ignore, checkpoint):
    """The test's ground truth under upstream's own matcher, on the checkpoint's names (vLLM's names)."""
    lines, unquantized = CHECKPOINTS[checkpoint]
    check_engine(should_ignore["vllm"], "vllm", entries(lines), unquantized)


@pytest.mark.parametrize("checkpoint", ["re: shared experts", "re: whole layer"])
def test_a_regex_from_the_checkpoint_is_aliased_so_sglang_matches(should_ignore, sglang_nextn_excludes, checkpoint):
    lines, unquantized = CHECKPOINTS[checkpoint]
    check_engine(should_ignore["sglang"], "sglang", sglang_nextn_excludes(remedied(lines)), unquantized)


@pytest.mark.parametrize("checkpoint", ["re: shared experts", "re: whole layer"])
def test_the_alias_leaves_vllm_matching_the_checkpoint_names(should_ignore, checkpoint):
    lines, unquantized = CHECKPOINTS[checkpoint]
    check_engine(should_ignore["vllm"], "vllm", remedied(lines), unquantized)
