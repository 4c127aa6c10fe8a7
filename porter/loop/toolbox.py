"""The tool box: what a tool is (name, description, JSON schema, handler), the registry, and what a call returns.

A handler returns a `Result`: the text the model reads, and the facts (a dict) that the playbook, replay and
the transcript read; the facts never enter the text. `tool(...)` registers a handler with its schema, next to
it, in the module that defines it (file_tools.py, serve_tools.py, tools.py); tools.py dispatches. Runs nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from porter.models import ToolSpec

STRING = {"type": "string"}

Result = tuple[str, dict]  # what a handler returns: the text for the model, and the facts for programs


class Finished(Exception):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Tool:
    """One tool: what the model is told (name, description, schema) and what runs (handler)."""

    name: str
    description: str
    parameters: dict
    handler: Callable[..., Result]


@dataclass
class ToolResult:
    ok: bool
    text: str  # what the model reads
    facts: dict | None = field(default_factory=dict)  # for the playbook, replay and the transcript; never shown


TOOLS: dict[str, Tool] = {}


def tool(name: str, description: str, properties: dict[str, Any] | None = None, required: tuple[str, ...] = ()):
    """Register the decorated handler as the tool `name`; its schema is an object of `properties`."""
    schema = {"type": "object", "properties": properties or {}, "required": list(required)}
    schema["additionalProperties"] = False

    def register(handler: Callable[..., Result]) -> Callable[..., Result]:
        jsonschema.Draft202012Validator.check_schema(schema)
        TOOLS[name] = Tool(name, description, schema, handler)
        return handler

    return register


def tool_specs() -> list[ToolSpec]:
    return [ToolSpec(item.name, item.description, item.parameters) for item in TOOLS.values()]
