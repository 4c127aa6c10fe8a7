"""Fault injection on the files porter reads: task YAML, state.json, metrics.jsonl, transcripts, run dirs.

Every broken file ends in one `porter:` line naming the file (and line), exit 2, never a traceback;
reading stays bounded in time and memory (alias bombs, 80k keys, huge files).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from porter.errors import RunDirError
from porter.evaluate.replay_run import replay
from porter.ledger.state import RunState
from porter.ledger.transcript import read_transcript
from porter.task import MAX_PROBLEMS, TaskError, load_task

ROOT = Path(__file__).resolve().parents[1]
BILLION_LAUGHS = "".join(
    f"{name}: &{name} [{', '.join([f'*{previous}'] * 9) if previous else ', '.join(['lol'] * 9)}]\n"
    for previous, name in zip([None, "a", "b", "c", "d", "e", "f", "g", "h"], "abcdefghi", strict=True)
)


def porter(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "porter", *args], capture_output=True, text=True, timeout=120, cwd=cwd)


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


def run_dir_with(tmp_path: Path, state: str | None = None, metrics: str | None = None) -> Path:
    """A run directory as porter leaves one (task.yaml, state.json, metrics.jsonl), with the given contents."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "task.yaml").write_text((ROOT / "tasks" / "twin_glm52.yaml").read_text())
    flags = load_task(run_dir / "task.yaml", environ={}).serve.flags
    good = json.dumps(RunState("twin-run", "task.yaml", dict(flags), dict(flags)).to_dict())
    (run_dir / "state.json").write_text(good if state is None else state)
    if metrics is not None:
        (run_dir / "metrics.jsonl").write_text(metrics)
    return run_dir


MEASUREMENT = json.dumps({"step": 1, "check": "single_stream", "pending": False, "result": {"output_tok_s": 9.0}})


@pytest.mark.parametrize("command", ["report", "pr"])
@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (None, "has no state.json"),
        ('{"run_id": "twin-run", "fla', "not valid JSON"),
        ("\x00\xff garbage", "not valid JSON"),
        ("[1, 2]", "not a porter run state"),
        ('{"run_id": "twin-run", "bogus": 1}', "does not match this porter's run state"),
    ],
)
def test_report_and_pr_on_a_broken_or_empty_run_dir_print_one_line(tmp_path, command, state, expected):
    if state is None:
        run_dir = tmp_path / "empty"
        run_dir.mkdir()
    else:
        run_dir = run_dir_with(tmp_path, state=state)
    one_porter_line(porter(command, str(run_dir)), expected)


def test_a_torn_middle_line_of_metrics_is_named(tmp_path):
    run_dir = run_dir_with(tmp_path, metrics=f'{MEASUREMENT}\n{{"step": 2, "che\n{MEASUREMENT}\n')
    one_porter_line(porter("report", str(run_dir)), f"{run_dir / 'metrics.jsonl'}:2: not a JSON record")


def test_a_torn_last_line_of_metrics_is_skipped_with_a_warning(tmp_path):
    run_dir = run_dir_with(tmp_path, metrics=f'{MEASUREMENT}\n{{"step": 2, "che')
    done = porter("report", str(run_dir))
    assert done.returncode == 0, done.stderr
    assert "skipped a torn last line" in done.stderr and (run_dir / "report.md").is_file()


def test_a_measurement_of_the_wrong_shape_is_named(tmp_path):
    run_dir = run_dir_with(tmp_path, metrics=f'{MEASUREMENT}\n{{"step": "2", "check": "x", "result": {{}}}}\n')
    one_porter_line(porter("report", str(run_dir)), "record 2 lacks its step, check or result")


def test_resume_of_a_broken_run_is_one_line(tmp_path):
    run_dir = run_dir_with(tmp_path, state='{"run_id": ')
    done = porter("run", str(run_dir / "task.yaml"), "--resume", str(run_dir), "--skip-preflight")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "not valid JSON" in done.stderr and done.stderr.count("porter: ") == 1


def test_a_transcript_torn_in_the_middle_is_named_before_any_sandbox_starts(tmp_path):
    recording = tmp_path / "recording"
    recording.mkdir()
    source = ROOT / "transcripts" / "glm52-day0"
    (recording / "task.yaml").write_text((source / "task.yaml").read_text())
    lines = (source / "transcript.jsonl").read_text().splitlines()
    lines[3] = lines[3][: len(lines[3]) // 2]
    (recording / "transcript.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(RunDirError, match=r"transcript.jsonl:4: not a JSON record"):
        replay(recording, runs_dir=str(tmp_path / "runs"))
    assert not (tmp_path / "runs").exists()  # no run directory, so no sandbox was made for it
    one_porter_line(porter("replay", str(recording)), "transcript.jsonl:4: not a JSON record")


def test_a_transcript_torn_at_the_end_loses_only_that_line(tmp_path, caplog):
    path = tmp_path / "transcript.jsonl"
    path.write_text('{"seq": 1, "kind": "note"}\n{"seq": 2, "kind": "no')
    assert [record["seq"] for record in read_transcript(path)] == [1]
    assert "skipped a torn last line" in caplog.text
    path.write_text('{"seq": 1, "kind": "note"}\n[1, 2]\n{"seq": 3}\n')
    with pytest.raises(RunDirError, match=r":2: a record is a JSON object, this is a list"):
        read_transcript(path)


@pytest.mark.parametrize(
    ("layout", "expected"),
    [
        ({}, "no task files and no recorded runs"),
        ({"rec/task.yaml": "twin", "rec/transcript.jsonl": '{"seq": 1, "ki\n{"seq": 2}\n'}, "transcript.jsonl:1"),
        ({"rec/task.yaml": "name: [", "rec/transcript.jsonl": '{"seq": 1}\n'}, "YAML syntax error"),
        ({"t.yaml": "twin", "corpus.yaml": "engines: [unclosed"}, "not a readable corpus.yaml"),
    ],
)
def test_eval_of_a_broken_or_empty_corpus_is_one_line_before_any_sandbox(tmp_path, layout, expected):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, text in layout.items():
        (corpus / name).parent.mkdir(parents=True, exist_ok=True)
        (corpus / name).write_text((ROOT / "tasks" / "twin_glm52.yaml").read_text() if text == "twin" else text)
    one_porter_line(porter("eval", str(corpus), "--out", str(tmp_path / "evals")), expected)
    assert not (tmp_path / "evals").exists()


def test_triage_of_a_log_full_of_escape_sequences_prints_none_of_them(tmp_path):
    log = tmp_path / "serve.log"
    log.write_bytes(
        b"loading\r 10%\r 50%\r\n\x1b]0;pwned\x07\x1b[2J"
        b"RuntimeError: shape mismatch \x1b[31m[256, 6144]\x1b[0m vs [256, 3072] \x07\x9b\xe2\x80\xae\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "porter", "triage", str(log)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and "shape mismatch" in done.stdout
    assert not any(ord(c) < 32 and c not in "\n\t" or 0x7F <= ord(c) <= 0x9F or c == "\u202e" for c in done.stdout)
