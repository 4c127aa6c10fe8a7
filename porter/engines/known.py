"""The engines porter knows, by name: each declared once in its own module (engines/sglang.py, engines/vllm.py,
an `Engine` of engines/engine.py); adding one is its module and its name in ENGINE_MODULES.
"""

from __future__ import annotations

import importlib
import re

from porter.engines.engine import Engine

# The engines, each one module of porter/engines declaring ENGINE; the first launches a command none recognises.
ENGINE_MODULES = ("sglang", "vllm")
ENGINES: dict[str, Engine] = {
    engine.name: engine for engine in (importlib.import_module(f"porter.engines.{m}").ENGINE for m in ENGINE_MODULES)
}


def engine_named(name: str) -> Engine:
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; the engines are {sorted(ENGINES)}")
    return ENGINES[name]


def launched_engine(command: str) -> str:
    """The engine a serve command launches, for a task that does not name one: the first whose declaration
    recognises the command (`launched_by`), else the first declared."""
    recognised = (name for name, engine in ENGINES.items() if re.search(engine.launched_by, command))
    return next(recognised, next(iter(ENGINES)))
