"""porter's count of the layers that cache a DSA indexer's keys against sglang's own rule (srt/configs/model_config.py
dsa_layer_skips_topk, the function its KV pool sizes the indexer cache by), on the real configs in
../shared/model_configs (skipped when absent) and on key sets written here: porter's KV bytes a token must carry
the indexer's 132 bytes (index_head_dim 128 fp8 values, an fp32 scale a 128) exactly in the layers sglang keeps.
The function is lifted out of the wheel (the module imports torch), with is_deepseek_dsa answered true."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import upstream_wheels

from porter.init.attention_facts import _indexer_bytes

MEMBER = "sglang/srt/configs/model_config.py"
CONFIGS = Path(__file__).resolve().parents[2].parent / "shared" / "model_configs"
WRITTEN = [  # 12 layers each, DSA keys as GLM-5.2 / LongCat spell them
    {"index_topk_freq": 4, "index_skip_topk_offset": 3},
    {"index_topk_freq": 3},
    {"cli_factor": 2},
    {"index_topk_pattern": "FFSFSSFFSFSS"},
    {"indexer_types": ["full", "shared", "shared"] * 4, "index_topk_freq": 3},
]


def sglang_skips(wheels):
    source = upstream_wheels.read_source(wheels["sglang"], MEMBER)
    namespace = upstream_wheels.lift(source, ["dsa_layer_skips_topk"], {"is_deepseek_dsa": lambda config: True}, MEMBER)
    return namespace["dsa_layer_skips_topk"]


def configs() -> list[dict]:
    found = [json.loads(path.read_text()) for path in sorted(CONFIGS.glob("*.json"))]
    return [config for config in found if config.get("index_topk")]


@pytest.mark.parametrize("keys", WRITTEN + configs())
def test_porter_caches_the_indexer_keys_of_the_layers_sglang_keeps(wheels, keys):
    skips = sglang_skips(wheels)
    config = {"index_head_dim": 128, "num_hidden_layers": 12, **keys}
    count = int(config["num_hidden_layers"])
    kept = sum(not skips(SimpleNamespace(**config), layer) for layer in range(count))
    undecided: list[str] = []
    bytes_a_token = _indexer_bytes(config, count, undecided)
    if undecided:  # vLLM's rule keeps another count: porter takes the larger and names sglang's
        assert bytes_a_token >= 132 * kept and f"sglang caches the indexer keys of {kept} layers," in undecided[0]
    else:
        assert bytes_a_token == 132 * kept
