"""Fault injection on the files porter reads: task YAML, state.json, metrics.jsonl, transcripts, run dirs.

Every broken file ends in one `porter:` line naming the file (and line), exit 2, never a traceback;
reading stays bounded in time and memory (alias bombs, 80k keys, huge files).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from porter.task import MAX_PROBLEMS, TaskError, load_task

ROOT = Path(__file__).resolve().parents[1]
BILLION_LAUGHS = "".join(
    f"{name}: &{name} [{', '.join([f'*{previous}'] * 9) if previous else ', '.join(['lol'] * 9)}]\n"
    for previous, name in zip([None, "a", "b", "c", "d", "e", "f", "g", "h"], "abcdefghi", strict=True)
)


def porter(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "porter.cli", *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def one_porter_line(done: subprocess.CompletedProcess, *expected: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("porter: "), done.stderr
    for text in expected:
        assert text in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (BILLION_LAUGHS, "more than 50000 values"),
        ("a: &a [1, *a]\n", "a recursive alias"),
        ("? [a, b]\n: 1\n", "a key must be a plain name"),
        ("name: !foo bar\n", "unsupported YAML tag !foo"),
        ("name: !!python/object:os.system x\n", "unsupported YAML tag"),
        ("name: !!set {a, b}\n", "unsupported YAML tag tag:yaml.org,2002:set"),
        ("x" * (2 << 20), "larger than 1048576 bytes"),
        ("- a\n- b\n", "expected a mapping of task fields"),
        ("name: [unclosed\n", "YAML syntax error"),
    ],
)
def test_a_hostile_task_file_is_one_clear_error(tmp_path, text, expected):
    path = tmp_path / "task.yaml"
    path.write_text(text)
    with pytest.raises(TaskError, match=expected.replace("[", r"\[")):
        load_task(path, environ={})
    one_porter_line(porter("validate", str(path)), expected)


def test_thousands_of_unknown_keys_are_counted_not_listed(tmp_path):
    path = tmp_path / "task.yaml"
    path.write_text((ROOT / "tasks" / "twin_glm52.yaml").read_text() + "".join(f"k{i}: 1\n" for i in range(40_000)))
    with pytest.raises(TaskError) as raised:
        load_task(path, environ={})
    lines = str(raised.value).splitlines()
    assert len(lines) == MAX_PROBLEMS + 1 and lines[-1].endswith(f"... and {40_000 - MAX_PROBLEMS} more problems")
    first_key_line = (ROOT / "tasks" / "twin_glm52.yaml").read_text().count("\n") + 1
    assert lines[0].startswith(f"{path}:{first_key_line}: k0: unknown field")  # the line index still points right
