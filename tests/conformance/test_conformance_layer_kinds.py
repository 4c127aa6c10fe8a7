"""porter's reading of nemotron_h's layer blocks against sglang 0.5.20's own (srt/configs/nemotron_h.py).

sglang turns the legacy hybrid_override_pattern into layers_block_type with NemotronHConfig._pattern_to_list over
its MAMBA / MOE / ATTENTION / MLP characters, refuses any other character, and takes the list's length as the layer
count. The method and the constants are lifted out of the wheel with ast (the module imports torch) and run on the
patterns of the nemotron_h checkpoints in ../shared (skipped when absent) and on patterns written here; porter's
block list must be the same, and a character sglang refuses leaves porter's layers undecided.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import upstream_wheels

from porter.init.checkpoint_facts import Why, _blocks, read_layer_kinds

MEMBER = "sglang/srt/configs/nemotron_h.py"
CHECKPOINTS = Path(__file__).resolve().parents[2].parent / "shared" / "model_configs" / "checkpoints"
WRITTEN = ["M-M*-E", "EEEE*", "M*M*M-"]


def sglang_pattern_to_list(wheels):
    source = upstream_wheels.read_source(wheels["sglang"], MEMBER)
    namespace = upstream_wheels.lift(source, ["MAMBA", "ATTENTION", "MLP", "MOE"], {}, f"sglang:{MEMBER}")
    return upstream_wheels.class_stand_in(source, "NemotronHConfig", ["_pattern_to_list"], namespace, MEMBER)


def patterns() -> list[str]:
    found = [json.loads(path.read_text()).get("hybrid_override_pattern") for path in CHECKPOINTS.glob("*/config.json")]
    return [pattern for pattern in found if isinstance(pattern, str)]


def test_porters_blocks_are_sglangs(wheels):
    upstream = sglang_pattern_to_list(wheels)
    shared = patterns()
    if CHECKPOINTS.is_dir():
        assert len(shared) == 2  # Nemotron-H-56B and Nemotron-3-Super
    for pattern in WRITTEN + shared:
        assert _blocks({"hybrid_override_pattern": pattern}) == upstream._pattern_to_list(pattern)
        assert _blocks({"layers_block_type": upstream._pattern_to_list(pattern)}) == upstream._pattern_to_list(pattern)


def test_a_block_sglang_refuses_leaves_the_layers_undecided(wheels):
    with pytest.raises(ValueError, match="Pattern must only contain"):
        sglang_pattern_to_list(wheels)._pattern_to_list("M*X")
    undecided: list[str] = []
    read_layer_kinds({"hybrid_override_pattern": "M*X", "num_hidden_layers": 3}, Why(), undecided)
    assert undecided and "'X'" in undecided[0]
