"""Anyone can be the model: a person at the terminal (`human`) or another program through files (`file:DIR`).

`file:DIR`: for each model call porter writes `DIR/request-N.json`, `{"n", "messages", "tools"}` with the
messages and tools in the OpenAI Chat Completions format, and waits for `DIR/reply-N.json`:
`{"text": "...", "tool_calls": [{"name": ..., "arguments": {...}}]}` (optional `"usage"`). Write the reply
to another name and rename it into place; a reply that stays unreadable is shown to the responder as a
format error in the next request. Waits are bounded (`agent.request_timeout_s`): no reply in time ends
the run with a ModelError that says how to resume. When the run ends porter writes `DIR/closed.json`
(`{"finished", "solved", "step", "messages"}`: why it ended and the results the responder has not seen),
so a responder polling for the next request stops instead of waiting forever.

`human`: the same at the terminal: the new observations are printed, and one line is read per turn,
`TOOL {json arguments}` (`bash {"command": "ls"}`), or `say TEXT`. Does not cover the wire providers.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import TextIO

from porter.models.base import Message, ModelError, RawToolCall, Reply, ToolSpec, Usage, validate_reply, written_reply
from porter.models.openai import to_openai_message, to_openai_tool
from porter.models.replay import messages_since_last_reply
from porter.terminal import printable

REQUEST = re.compile(r"^request-(\d+)\.json$")
REPLY_SHAPE = '{"text": "...", "tool_calls": [{"name": "...", "arguments": {...}}]}'


def write_json(path: Path, data: dict) -> None:
    """Write whole or not at all: a reader polling the directory never sees half a file."""
    scratch = path.with_name(f".{path.name}.tmp")
    scratch.write_text(json.dumps(data, indent=1, ensure_ascii=False, default=str), encoding="utf-8")
    os.replace(scratch, path)


class FileModel:
    """Model protocol over a directory of request/reply files (see the module docstring)."""

    def __init__(self, directory: str | Path, timeout_s: float = 600.0, poll_s: float = 0.2):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.name = f"file:{self.directory}"
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self._shown = 0  # messages the responder has seen, for the closing record
        (self.directory / "closed.json").unlink(missing_ok=True)  # a resumed run is open again
        self.number = max(
            (int(m.group(1)) for p in self.directory.iterdir() if (m := REQUEST.match(p.name))), default=0
        )

    def step(self, messages: list[Message], tools: list[ToolSpec]) -> Reply:
        self.number += 1
        request = {
            "n": self.number,
            "messages": [to_openai_message(message) for message in messages],
            "tools": [to_openai_tool(tool) for tool in tools],
            "reply_to": f"reply-{self.number}.json",
        }
        write_json(self.directory / f"request-{self.number}.json", request)
        self._shown = len(messages)
        return self._read_reply(self.directory / f"reply-{self.number}.json", tools)

    def _read_reply(self, path: Path, tools: list[ToolSpec]) -> Reply:
        deadline = time.monotonic() + self.timeout_s
        problem = None
        while time.monotonic() < deadline:
            if path.is_file():
                try:
                    return parse_reply(json.loads(path.read_text(encoding="utf-8")), self.number, tools)
                except (json.JSONDecodeError, UnicodeDecodeError) as error:
                    problem = f"{path.name} is not valid JSON ({error})"  # maybe half written: read it again
            time.sleep(self.poll_s)
        if problem:
            return Reply("", [], Usage(cost_usd=0.0), format_error=f"{problem}; write the reply again")
        raise ModelError(
            f"no {path.name} in {self.directory} within {self.timeout_s:.0f} s (agent.request_timeout_s); "
            "the request is still there: answer it and continue the run with --resume"
        )

    def close(self, messages: list[Message], finished: str | None, solved: bool, step: int) -> None:
        unseen = [to_openai_message(message) for message in messages[self._shown :]]
        record = {"finished": finished, "solved": solved, "step": step, "messages": unseen}
        write_json(self.directory / "closed.json", record)


def parse_reply(data: object, number: int, tools: list[ToolSpec]) -> Reply:
    """A reply file's object as a Reply; what is wrong with it becomes a format error for the responder."""
    if not isinstance(data, dict) or not isinstance(data.get("tool_calls") or [], list):
        return Reply("", [], Usage(cost_usd=0.0), format_error=f"the reply must be {REPLY_SHAPE}, got {data!r:.300}")
    return written_reply(data, tools, f"file-{number}")


class HumanModel:
    """Model protocol at a terminal: show what is new, read one line per turn."""

    name = "human"

    def __init__(self, stdin: TextIO | None = None, stdout: TextIO | None = None):
        self.stdin = stdin or sys.stdin
        self.stdout = stdout or sys.stdout
        self.turn = 0

    def step(self, messages: list[Message], tools: list[ToolSpec]) -> Reply:
        self.turn += 1
        for message in messages_since_last_reply(messages):
            label = message.role if message.role != "tool" else f"result of {message.name}"
            self.stdout.write(f"\n--- {label}\n{printable(message.content)}\n")  # logs may carry escapes
        self.stdout.write(f"\nTools: {', '.join(tool.name for tool in tools)}\n")
        while True:
            self.stdout.write('porter> TOOL {"arg": ...} | say TEXT: ')
            self.stdout.flush()
            line = self.stdin.readline()
            if not line:
                raise ModelError("the terminal closed (end of input); continue the run with --resume")
            reply = parse_line(line.strip(), self.turn, tools)
            if reply is not None:
                return reply
            self.stdout.write('write a tool name and its JSON arguments, e.g. bash {"command": "ls"}\n')


def parse_line(line: str, turn: int, tools: list[ToolSpec]) -> Reply | None:
    if not line:
        return None
    if line.startswith("say "):
        return validate_reply(line[4:], [], tools, Usage(cost_usd=0.0))
    name, _, arguments = line.partition(" ")
    raw = RawToolCall(id=f"human-{turn}", name=name, arguments=arguments.strip() or "{}")
    return validate_reply("", [raw], tools, Usage(cost_usd=0.0))
