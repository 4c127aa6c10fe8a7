"""ScriptedModel: a queue of replies for tests and demos, with fault injection.

Covers answering each step with the next scripted item, given as a list or a YAML/JSON file.
An item is a reply (`text`, `tool_calls` [{name, arguments, id?}], `usage`) that may also carry
`sleep_s` (wait before answering) and `fault`:
  - `raise`: raise ModelError(`message`) instead of answering;
  - `malformed`: answer with a tool call whose arguments are not JSON;
  - `empty`: answer with nothing at all.
Tool calls go through the same validation as the real adapters, so string `arguments` that do not
parse, or an unknown tool name, come back as a `format_error`. An exhausted queue answers with a
`finish` call (reason "script ended"). Does not cover recorded runs: that is ReplayModel.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import yaml

from porter.models.base import Message, ModelError, Reply, ToolCall, ToolSpec, Usage, written_reply

FAULTS = ("raise", "malformed", "empty")
ITEM_KEYS = {"text", "tool_calls", "usage", "sleep_s", "fault", "message"}


class ScriptedModel:
    def __init__(self, script: list[dict] | str | Path, name: str = "scripted"):
        if isinstance(script, str | Path):
            self.items, self.name = load_script(script), f"scripted:{script}"
        else:
            self.items, self.name = [_checked(index, item) for index, item in enumerate(script)], name
        self.position = 0
        self.requests: list[list[Message]] = []  # what the model was shown, step by step, for assertions

    def step(self, messages: list[Message], tools: list[ToolSpec]) -> Reply:
        self.requests.append(list(messages))
        if self.position >= len(self.items):
            finish = ToolCall(id=f"scripted-{self.position + 1}", name="finish", arguments={"reason": "script ended"})
            return Reply(text="", tool_calls=[finish], usage=Usage(cost_usd=0.0))
        item = self.items[self.position]
        self.position += 1
        if item.get("sleep_s"):
            time.sleep(float(item["sleep_s"]))
        fault = item.get("fault")
        if fault == "raise":
            raise ModelError(item.get("message") or f"scripted fault at step {self.position}")
        if fault == "empty":
            item = {"usage": item.get("usage")}
        elif fault == "malformed":
            name = tools[0].name if tools else "bash"
            bad = {"id": f"scripted-{self.position}-bad", "name": name, "arguments": '{"command": "ls",'}
            item = {**item, "tool_calls": [bad]}
        return written_reply(item, tools, f"scripted-{self.position}")


def load_script(path: str | Path) -> list[dict]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ModelError(f"cannot read the script {path}: {error.strerror or error}") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        raise ModelError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {error}") from None
    if isinstance(data, dict) and "replies" in data:
        data = data["replies"]
    if not isinstance(data, list):
        raise ModelError(
            f"{path}: expected a list of replies (or a mapping with `replies:`), got {type(data).__name__}"
        )
    return [_checked(index, item, path) for index, item in enumerate(data)]


def _checked(index: int, item: Any, path: Path | None = None) -> dict:
    where = f"{path}: reply {index + 1}" if path else f"reply {index + 1}"
    if not isinstance(item, dict):
        raise ModelError(f"{where}: expected a mapping (text, tool_calls, usage, sleep_s, fault), got {item!r}")
    unknown = sorted(set(item) - ITEM_KEYS)
    if unknown:
        raise ModelError(f"{where}: unknown keys {unknown}; allowed: {sorted(ITEM_KEYS)}")
    if item.get("fault") is not None and item["fault"] not in FAULTS:
        raise ModelError(f"{where}: fault must be one of {FAULTS}, got {item['fault']!r}")
    for call in item.get("tool_calls") or []:
        if not isinstance(call, dict) or "name" not in call:
            raise ModelError(f"{where}: each tool call needs a `name` (and `arguments`), got {call!r}")
    return item
