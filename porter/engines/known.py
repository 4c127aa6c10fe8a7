"""The engines porter knows, by name: each declared once in its own module (engines/sglang.py, engines/vllm.py,
an `Engine` of engines/engine.py); adding one is its module and one entry here.
"""

from __future__ import annotations

import re

from porter.engines import sglang, vllm
from porter.engines.engine import Engine

ENGINES: dict[str, Engine] = {engine.name: engine for engine in (sglang.ENGINE, vllm.ENGINE)}


def engine_named(name: str) -> Engine:
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; the engines are {sorted(ENGINES)}")
    return ENGINES[name]


def guess_engine(command: str) -> str:
    """The engine a serve command launches, for a task that does not name one."""
    return "vllm" if re.search(r"(^|[\s/])vllm(\s|$)|vllm\.entrypoints", command) else "sglang"
