"""The start-up stages porter waits for (porter/engines/sglang.py `stages`), against the log lines of the sglang
under test, read per release from its source.

Every `logger.info(...)` message of `sglang/srt` that contains one of the words the stage patterns key on is
rendered as the engine prints it: the f-string's literal parts as written, each `{...}` as the value it takes on
the real task (SAMPLES: a target model's decode graph on ROCm, where sglang's graph_backend maps the "cuda" device
to "CUDA graph"), any other `{...}` as a number. Each declared stage must match a line the release prints, so a
rewording (0.5.23 prints "Init parallel ends." where 0.5.20 printed "Init torch distributed ends.") fails here,
on the release that made it, instead of silently never reaching the stage.
"""

from __future__ import annotations

import ast
import re

import pytest
import upstream_wheels

from porter.engines.known import ENGINES

ENGINE = ENGINES["sglang"]
SAMPLES = {"capture_name": "target decode", "graph_backend[model_runner.device]": "CUDA graph"}
KEYWORDS = ("ends", " end", "ready to roll", "allocated")


def rendered(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = [
            rendered(value) if isinstance(value, ast.Constant) else SAMPLES.get(ast.unparse(value.value), "1.00")
            for value in node.values
        ]
        return "".join(part or "" for part in parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return (rendered(node.left) or "") + (rendered(node.right) or "")
    return None


@pytest.fixture(scope="module")
def logged_lines(wheels) -> list[str]:
    """The info lines sglang's server code logs, rendered (implicitly joined f-strings are one JoinedStr)."""
    lines = []
    for path in sorted((upstream_wheels.unpacked(wheels["sglang"]) / "sglang" / "srt").rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        if "logger.info" not in source or not any(word in source for word in KEYWORDS):
            continue
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "info" and node.args:
                line = rendered(node.args[0])
                if line and any(word in line for word in KEYWORDS):
                    lines.append(line)
    return lines


@pytest.mark.parametrize("stage", [stage for stage, _ in ENGINE.stages])
def test_each_stage_porter_waits_for_is_a_line_the_release_prints(logged_lines, stage):
    pattern = dict(ENGINE.stages)[stage]
    assert any(re.search(pattern, line) for line in logged_lines), f"{stage}: no sglang line matches {pattern!r}"
