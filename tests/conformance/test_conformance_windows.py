"""Which architectures' windowed layers sglang keeps a window of, against sglang's own is_hybrid_swa_model.

porter init counts a sliding-window or chunked layer's KV as bounded only where the engine keeps just the window
(Engine.bounds_window). For sglang that is the set of architectures its configs/model_config.py is_hybrid_swa_model
names (with SWA_SINK_ARCHS and MIMO_V2_MODEL_ARCHS), lifted here from the wheel (the module imports torch) and asked
about every architecture sglang registers and every one porter's HYBRID_SWA lists.
"""

from __future__ import annotations

from typing import Optional

import pytest
import upstream_wheels

from porter.engines.sglang import HYBRID_SWA
from porter.init.task_draft import registered_architectures

MEMBER = "sglang/srt/configs/model_config.py"
NAMES = ["is_hybrid_swa_model", "SWA_SINK_ARCHS", "MIMO_V2_MODEL_ARCHS"]


def test_porters_hybrid_pool_list_is_sglangs(wheels):
    source = upstream_wheels.read_source(wheels["sglang"], MEMBER)
    namespace = {"List": list, "Optional": Optional, "PretrainedConfig": object}  # its annotations' names
    hybrid = upstream_wheels.lift(source, NAMES, namespace, MEMBER)["is_hybrid_swa_model"]
    asked = set(registered_architectures()["sglang"][1]) | HYBRID_SWA
    upstream = {architecture for architecture in asked if hybrid([architecture], None)}
    if upstream != HYBRID_SWA and upstream_wheels.LOCK_FILE != upstream_wheels.REPO_LOCK:
        pytest.skip(f"the list is the pinned release's; on this one: added {sorted(upstream - HYBRID_SWA)}, "
                    f"gone {sorted(HYBRID_SWA - upstream)}")  # fmt: skip
    assert upstream == HYBRID_SWA
