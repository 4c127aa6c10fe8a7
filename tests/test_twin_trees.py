"""The trees a model reads in the twin's images (the engine, the vLLM front, the ROCm toolchain) read like
upstream's: no docstring or comment names a defect, the bench they belong to or its design. A model that reads
"the day-0 defects" or "that repetition is deliberate" is told the answer; upstream's sglang and vLLM never say it.
The engine's environment switches are declared as sglang 0.5.20's srt/environ.py declares them (class Envs of
EnvBool / EnvInt / EnvFloat / EnvStr fields, read with .get())."""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TWIN = ROOT / "sandboxes" / "twin"
TREES = [TWIN / "engine", TWIN / "fronts", TWIN / "rocm"]
# What names the bench or what it plants: words upstream's trees have no reason to say about themselves.
REFUSED = re.compile(
    r"\bday[- ]?0\b|\bdefects?\b|\bdeliberate(?:ly)?\b|\bon purpose\b|\bsimulat\w*|\bstand(?:s|ing)? in for\b"
    r"|\bporter\b|\bscenarios?\b|\bbaked\b|\btrap\b|\bthe twin\b|\btwin's\b|\bROCm-like\b|\bknown answers?\b",
    re.IGNORECASE,
)


def python_prose(text: str) -> list[tuple[int, str]]:
    """(line, text) of each docstring and comment of a Python source."""
    found = [(token.start[0], token.string) for token in tokenize.generate_tokens(io.StringIO(text).readline)
             if token.type == tokenize.COMMENT]  # fmt: skip
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            if (docstring := ast.get_docstring(node, clean=False)) is not None:
                found.append((node.body[0].lineno, docstring))
    return found


def other_prose(text: str) -> list[tuple[int, str]]:
    """(line, text) of the comments of a C++ source, a header or a shell script."""
    comment = re.compile(r"//.*|/\*.*?\*/|^\s*#(?!include|define|pragma|if|endif|else|elif|undef|!).*", re.M | re.S)
    return [(text.count("\n", 0, match.start()) + 1, match.group(0)) for match in comment.finditer(text)]


def prose_of_trees() -> list[tuple[str, int, str]]:
    found = []
    for tree in TREES:
        for path in sorted(p for p in tree.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            if path.suffix == ".csv":
                continue
            text = path.read_text(encoding="utf-8")
            prose = python_prose(text) if path.suffix == ".py" else other_prose(text)
            found += [(str(path.relative_to(TWIN)), line, words) for line, words in prose]
    return found


def test_no_docstring_or_comment_names_the_bench_or_what_it_plants():
    refused = [f"{path}:{line}: {match.group(0)!r}" for path, line, words in prose_of_trees()
               for match in [REFUSED.search(words)] if match]  # fmt: skip
    assert not refused, "\n".join(refused)


@pytest.mark.parametrize(
    "prose",
    [
        '"""The engine runs the real code paths that carry the day-0 defects."""\n',
        "x = 1  # that repetition is deliberate\n",
        '"""The twin is one process standing in for eight ranks."""\n',
    ],
)
def test_the_scan_catches_what_the_trees_used_to_say(prose):
    assert any(REFUSED.search(words) for _, words in python_prose(prose))
    assert REFUSED.search("// There is deliberately no cuda_runtime.h in this tree.")


def test_the_switches_are_read_through_an_envs_registry_as_sglangs(monkeypatch):
    sys.path.insert(0, str(TWIN / "engine"))
    from twin.environ import EnvBool, envs

    assert isinstance(envs.__class__.__dict__["SGLANG_USE_AITER"], EnvBool)
    monkeypatch.delenv("SGLANG_USE_AITER", raising=False)
    assert envs.SGLANG_USE_AITER.get() is False and envs.SGLANG_OPT_USE_TOPK_V2.get() is True
    monkeypatch.setenv("SGLANG_USE_AITER", "Y")
    assert envs.SGLANG_USE_AITER.get() is True
    monkeypatch.setenv("SGLANG_OPT_USE_TOPK_V2", "maybe")
    with pytest.warns(UserWarning, match='"maybe" is not a valid boolean value, using default "True"'):
        assert envs.SGLANG_OPT_USE_TOPK_V2.get() is True
    names = [name for name in vars(type(envs)) if name.startswith("SGLANG_")]
    assert len(names) > 30 and sum("ROCM" in name or "AITER" in name for name in names) < len(names) / 2
