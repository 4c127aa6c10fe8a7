"""vLLM's front over the engine: the `vllm` package of the vLLM image (vllm/vllm-openai-rocm's layout).

What a user of vLLM 0.25.1 meets: the `vllm serve MODEL` CLI with vLLM's flag names, value choices and defaults
(engine/arg_utils.py), its log format and start-up wording (logger.py, engine/wording.py), its periodic statistics
(v1/metrics/loggers.py), and its exception texts. The engine that serves is the `twin` package under this one,
the same source as the sglang image's /sgl-workspace/twin. Does not cover the engine (twin/).
"""

import importlib.util
import sys
from pathlib import Path

__version__ = "0.25.1"

# The engine imports itself as `twin` (its package name in the sglang tree). It ships inside this package, so it is
# loaded from here under that name, once: importing it as `vllm.twin` as well would give two copies of each module.
if "twin" not in sys.modules:
    _engine = Path(__file__).resolve().parent / "twin"
    _spec = importlib.util.spec_from_file_location(
        "twin", _engine / "__init__.py", submodule_search_locations=[str(_engine)]
    )
    sys.modules["twin"] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules["twin"])
