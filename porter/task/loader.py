"""Reading a task file: YAML with `${VAR}` interpolation, validated into a `Task`, errors a person can act on.

Covers loading under size and alias caps, interpolating the environment (never a secret-looking variable),
making host paths relative to the task file absolute, and errors that name the file, the line, the field
path and what was expected (never a traceback). The models themselves are spec.py's.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from porter.redaction import looks_secret
from porter.task.spec import Task


class TaskError(Exception):
    """A task file that cannot be used; the message names file, line, field and expectation."""

    def __init__(self, file: str | Path, problems: list[tuple[int | None, str, str]]):
        lines = []
        for line, field_path, message in problems:
            where = f"{file}:{line}" if line else str(file)
            lines.append(f"{where}: {field_path}: {message}" if field_path else f"{where}: {message}")
        super().__init__("\n".join(lines))


# ---------------------------------------------------------------- loading

_SCALARS = yaml.SafeLoader("")  # only its constructors are used: ints, floats, bools, nulls
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
MAX_TASK_BYTES = 1 << 20  # the real tasks are a few kB
MAX_VALUES = 50_000  # values after aliases are expanded: a task has hundreds, an alias bomb billions
MAX_PROBLEMS = 20  # problems shown; the rest are counted
_COLLECTION_TAGS = {yaml.MappingNode: "tag:yaml.org,2002:map", yaml.SequenceNode: "tag:yaml.org,2002:seq"}


def load_task(path: str | Path, environ: dict[str, str] | None = None) -> Task:
    """Read, interpolate and validate a task file; any problem raises TaskError (never a traceback)."""
    path = Path(path)
    reader = _Reader(path, os.environ if environ is None else environ)
    data = reader.read()
    _resolve_paths(data, path.parent)
    try:
        return Task.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        problems = [(reader.line_of(tuple(e["loc"])), _dotted(tuple(e["loc"])), _explain(e)) for e in errors]
        if len(problems) > MAX_PROBLEMS:
            problems[MAX_PROBLEMS:] = [(None, "", f"... and {len(problems) - MAX_PROBLEMS} more problems")]
        raise TaskError(path, problems) from None


class _Reader:
    """A task file as plain data, every value's line indexed by its field path for the error messages.

    Aliases are expanded under a cap (a 351-byte alias bomb is billions of values); a recursive alias,
    a key that is not a plain scalar and an explicit tag the safe loader does not know are errors.
    """

    def __init__(self, file: Path, environ: dict[str, str]):
        self.file, self.environ = file, environ
        self.lines: dict[tuple, int] = {}
        self.values = 0
        self.open_nodes: set[int] = set()

    def read(self) -> dict:
        text = self._text()
        try:
            root = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = mark.line + 1 if mark else None
            problem = getattr(exc, "problem", None) or str(exc)
            raise TaskError(self.file, [(line, "", f"YAML syntax error: {problem}")]) from None
        if not isinstance(root, yaml.MappingNode):
            raise TaskError(self.file, [(1, "", "expected a mapping of task fields at the top level")])
        return self.convert(root, ())

    def _text(self) -> str:
        try:
            with open(self.file, "rb") as handle:
                raw = handle.read(MAX_TASK_BYTES + 1)
        except OSError as exc:
            raise TaskError(self.file, [(None, "", f"cannot read the task file: {exc.strerror or exc}")]) from None
        if len(raw) > MAX_TASK_BYTES:
            raise TaskError(self.file, [(None, "", f"larger than {MAX_TASK_BYTES} bytes: is this a task YAML file?")])
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = raw.count(b"\n", 0, exc.start) + 1
            problem = f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}): is this a task YAML file?"
            raise TaskError(self.file, [(line, "", problem)]) from None

    def fail(self, node: yaml.Node, loc: tuple, problem: str) -> TaskError:
        return TaskError(self.file, [(node.start_mark.line + 1, _dotted(loc), problem)])

    def convert(self, node: yaml.Node, loc: tuple) -> Any:
        """Plain data from a composed YAML node, with ${VAR} filled in (errors carry the node's line)."""
        self.values += 1
        if self.values > MAX_VALUES:
            raise self.fail(node, loc, f"more than {MAX_VALUES} values (aliases expanded); a task file has hundreds")
        if id(node) in self.open_nodes:
            raise self.fail(node, loc, "an alias refers to a node that contains it (a recursive alias)")
        self.lines.setdefault(loc, node.start_mark.line + 1)
        if isinstance(node, yaml.ScalarNode):
            return self._scalar(node, loc)
        if node.tag != _COLLECTION_TAGS[type(node)]:
            raise self.fail(node, loc, f"unsupported YAML tag {node.tag}; task files use plain mappings and lists")
        self.open_nodes.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode):
                return [self.convert(item, loc + (index,)) for index, item in enumerate(node.value)]
            return self._mapping(node, loc)
        finally:
            self.open_nodes.discard(id(node))

    def _mapping(self, node: yaml.MappingNode, loc: tuple) -> dict:
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise self.fail(key_node, loc, "a key must be a plain name, not a list or a mapping")
            key = key_node.value
            if key in result:
                raise self.fail(key_node, loc + (key,), "duplicate key")
            self.lines[loc + (key,)] = key_node.start_mark.line + 1
            result[key] = self.convert(value_node, loc + (key,))
        return result

    def _scalar(self, node: yaml.ScalarNode, loc: tuple) -> Any:
        if node.tag == "tag:yaml.org,2002:str":
            scalar = node.value
        else:
            try:
                scalar = _SCALARS.construct_object(node)
            except yaml.YAMLError:
                raise self.fail(node, loc, f"unsupported YAML tag {node.tag}; write a plain value") from None
        if isinstance(scalar, str) and "${" in scalar:
            return _interpolate(scalar, self.environ, self.file, node.start_mark.line + 1, _dotted(loc))
        return scalar

    def line_of(self, loc: tuple) -> int | None:
        """Line of the deepest value on the error's path (a missing key points at its parent)."""
        for end in range(len(loc), -1, -1):
            if loc[:end] in self.lines:
                return self.lines[loc[:end]]
        return None


def _interpolate(value: str, environ: dict[str, str], file: Path, line: int, field_path: str) -> str:
    def substitute(match: re.Match) -> str:
        name, default = match.group(1), match.group(2)
        if looks_secret(name) and field_path != "agent.api_key_env":  # prompts, logs and sandboxes read the task
            raise TaskError(file, [(line, field_path, f"${{{name}}} names a secret; use agent.api_key_env: {name}")])
        if name in environ:
            return environ[name]
        if default is not None:
            return default
        hint = f"${{{name}}} is not set in the environment (or write ${{{name}:-default}})"
        raise TaskError(file, [(line, field_path, hint)])

    return _VAR.sub(substitute, value)


def _resolve_paths(data: dict, base: Path) -> None:
    """Host paths written relative to the task file are made absolute, so runs work from any cwd."""
    sandbox = data.get("sandbox")
    if isinstance(sandbox, dict):
        for key in ("dockerfile", "context"):
            if isinstance(sandbox.get(key), str):
                sandbox[key] = str((base / sandbox[key]).resolve())
        commands = [sandbox.get("local_setup"), sandbox.get("image_build")]
        commands += [s.get("command") for s in sandbox.get("services") or [] if isinstance(s, dict)]
        for command in commands:
            if isinstance(command, list) and command and isinstance(command[0], str) and "/" in command[0]:
                command[0] = str((base / command[0]).resolve())
        for mount in sandbox.get("mounts") or []:
            if isinstance(mount, dict) and isinstance(mount.get("host"), str):
                mount["host"] = str((base / mount["host"]).resolve())
    checks = data.get("checks")
    if isinstance(checks, dict):
        for check in checks.get("quality") or []:
            for key in ("dataset", "few_shot_dataset"):
                dataset = check.get(key) if isinstance(check, dict) else None
                if isinstance(dataset, str) and not dataset.startswith("builtin:"):
                    check[key] = str((base / dataset).resolve())


def _dotted(loc: tuple) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _explain(error: dict) -> str:
    kind, message = error["type"], error["msg"]
    if kind == "extra_forbidden":
        return "unknown field (check the spelling; see `porter validate --help` for the format)"
    if kind == "missing":
        return "required field is missing"
    message = message.removeprefix("Value error, ")
    if "input" in error and kind not in ("model_type", "dict_type", "list_type"):
        shown = repr(error["input"])
        if len(shown) <= 60:
            return f"{message} (got {shown})"
    return message
