"""The twin's Quark exclude matching and the entries porter's remedy writes, against sglang 0.5.20's own matcher.

sglang's `should_ignore_layer` and the two helpers it calls are lifted out of the pinned wheel
(`sglang/srt/layers/quantization/quark/utils.py`; its imports pull torch) and run on plain strings, with the fused
mapping sglang's loader hands a Quark config (`model_loader/loader.py: _get_quantization_config`). Checked: the twin
engine (sandboxes/twin/engine/twin/quantization.py) decides as sglang does on the names it registers; today's glob
entry excludes nothing there; the entries the playbook writes into the flagship checkpoint's config.json (exact
names, as Quark's export spells them) and into a checkpoint that spells its entry as `re:` select exactly the MTP
shared expert the twin's draft model registers (`model.decoder.mlp.shared_experts.gate_up_proj` and `.down_proj`)
and nothing else of the draft or the main model. The twin's draft has no `_resolve_nextn_quant_config` (that
rewrite is sglang's own fix of this defect), so the matcher sees the checkpoint's list as written.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import upstream_wheels

from porter.models.remedies import exclude_alias_edit, renamed_module

ROOT = Path(__file__).resolve().parents[2]
TWIN = ROOT / "sandboxes" / "twin"
sys.path.insert(0, str(TWIN / "engine"))
sys.path.insert(0, str(TWIN))

from families import glm52  # noqa: E402
from twin import quantization  # noqa: E402
from twin.models import glm5  # noqa: E402

UTILS = "sglang/srt/layers/quantization/quark/utils.py"
FUSED = {"gate_up_proj": ["gate_proj", "up_proj"], "fused_qkv_a_proj_with_mqa": ["q_a_proj", "kv_a_proj_with_mqa"]}
NEXTN = glm52.CONFIG["num_hidden_layers"]
# what the crash log names: the engine's fused slot and the checkpoint's shard
CRASH = {
    "parameter": "model.decoder.mlp.shared_experts.gate_up_proj.weight",
    "module_prefixes": [
        "model.decoder.mlp.shared_experts.gate_up_proj.weight",
        f"model.layers.{NEXTN}.mlp.shared_experts.gate_proj.weight",
    ],
}
SHARED_EXPERT = {"model.decoder.mlp.shared_experts.gate_up_proj", "model.decoder.mlp.shared_experts.down_proj"}


@pytest.fixture(scope="module")
def sglang_ignores():
    """The matcher of the sglang the twin imitates: the real task's image, the repo lock's pin, also when the suite
    runs on the newest releases (sglang 0.5.23's matcher also excludes a fused module named exactly)."""
    wheel = upstream_wheels.fetch(upstream_wheels.REPO_LOCK, ["sglang"])["sglang"]
    lifted = upstream_wheels.lift_where_defined(wheel, UTILS, ["should_ignore_layer"], {"re": re})
    return lifted["should_ignore_layer"]


def decision(matcher, name: str, entries: list[str]):
    try:
        return matcher(name, entries, FUSED)
    except ValueError as error:  # shards that disagree: both sides must refuse the same way
        return f"ValueError: {error}"


def draft_modules() -> list[str]:
    return [module for module, _, _ in glm5._linear_modules("model.decoder", glm52.CONFIG, NEXTN)]


MAIN_MODULES = [module for module, _, _ in glm5._linear_modules("model.layers.3", glm52.CONFIG, 3)]
CASES = [
    ["model.decoder.mlp.shared_experts.*"],  # a glob: a literal name to sglang
    ["model.decoder.mlp.shared_experts.gate_proj", "model.decoder.mlp.shared_experts.up_proj"],
    ["model.decoder.mlp.shared_experts.gate_proj"],  # one shard of a fused module: refused
    ["model.decoder.mlp.shared_experts.gate_up_proj"],  # the fused name itself: not matched in 0.5.20
    [r"re:model\.decoder\.mlp\.shared_experts\..*"],
    ["re:model.decoder.*"],
    ["re:.*self_attn.*", "lm_head"],
    [r"re:.*\.mlp\.gate$"],
]


@pytest.mark.parametrize("entries", CASES, ids=lambda entries: " ".join(entries))
def test_the_twin_engine_decides_as_sglang_does(sglang_ignores, entries):
    assert quantization.PACKED_MODULES == FUSED
    for name in [*draft_modules(), *MAIN_MODULES, "lm_head", f"model.layers.{NEXTN}.mlp.gate"]:
        assert decision(quantization.should_ignore_layer, name, entries) == decision(sglang_ignores, name, entries)


def remedied(exclude: list[str]) -> list[str]:
    """The exclude list after the playbook's edit of a config.json that holds it (json.dump's layout)."""
    text = json.dumps({"quantization_config": {"exclude": exclude}}, indent=2)
    engine_name, checkpoint_name, engine_prefix, checkpoint_prefix = renamed_module(CRASH)
    old, new = exclude_alias_edit(text.splitlines(), checkpoint_prefix, engine_prefix, checkpoint_name)
    return json.loads(text.replace(old, new, 1))["quantization_config"]["exclude"]


def newly_excluded(matcher, before: list[str], after: list[str]) -> set[str]:
    names = [*draft_modules(), *MAIN_MODULES]
    return {name for name in names if matcher(name, after, FUSED) and not matcher(name, before, FUSED)}


def test_todays_glob_alias_excludes_nothing(sglang_ignores):
    flagship = glm52.exported_exclude(glm52.tensors())
    assert newly_excluded(sglang_ignores, flagship, [*flagship, "model.decoder.mlp.shared_experts.*"]) == set()


def test_the_remedy_on_the_flagship_checkpoint_covers_exactly_the_mtp_shared_expert(sglang_ignores):
    flagship = glm52.exported_exclude(glm52.tensors())
    assert not any(sglang_ignores(name, flagship, FUSED) for name in SHARED_EXPERT)  # the defect
    assert newly_excluded(sglang_ignores, flagship, remedied(flagship)) == SHARED_EXPERT


@pytest.mark.parametrize(
    ("entry", "covered"),
    [
        (f"re:model.layers.{NEXTN}.mlp.shared_experts.*", SHARED_EXPERT),
        (rf"re:model\.layers\.{NEXTN}\.mlp\.shared_experts\..*", SHARED_EXPERT),
        (f"re:model.layers.{NEXTN}.*", set(draft_modules())),  # the whole MTP layer kept bf16 (AMD's spelling)
    ],
)
def test_a_regex_entry_of_the_checkpoint_is_recognised_and_aliased(sglang_ignores, entry, covered):
    exclude = ["lm_head", entry]
    assert newly_excluded(sglang_ignores, exclude, remedied(exclude)) == covered
