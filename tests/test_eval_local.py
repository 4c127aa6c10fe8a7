"""`porter eval` on a corpus holding a recorded run, in the local sandbox: a recording is replayed by default and
reported by the model that recorded it, "reproduced" apart from "solved"; `--models` runs the recording's task
live with each named model, `replay` among them re-drives it. The recording is a real run of the loop (a
scripted model in the seat, named as its recorder would name it)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import yaml
from local_tasks import open_local_run, run_local

from porter.evaluate import corpus_eval

SCRIPT = [
    {"text": "look first", "tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}]},
    {"tool_calls": [{"name": "finish", "arguments": {"reason": "nothing to fix here"}}]},
]


def recorded_corpus(tmp_path):
    """A corpus with one recording: two turns by 'human:tester', ended unsolved (the task has no target met)."""
    (tmp_path / "recorder").mkdir()
    ctx = open_local_run(tmp_path / "recorder", model="human:tester")
    run_local(ctx, SCRIPT)
    corpus = tmp_path / "corpus"
    (corpus / "seat-run").mkdir(parents=True)
    for name in ("task.yaml", "transcript.jsonl"):
        shutil.copy(ctx.run_dir / name, corpus / "seat-run" / name)
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump(SCRIPT))
    return corpus, script


def test_a_recording_that_ended_unsolved_replays_as_reproduced_not_solved(tmp_path, monkeypatch):
    corpus, _ = recorded_corpus(tmp_path)
    monkeypatch.chdir(tmp_path)
    out_dir = corpus_eval.evaluate(corpus, None, trusted=True)  # the recording is the test's own, in a local sandbox
    board = json.loads((out_dir / "leaderboard.json").read_text())
    [entry] = board["entries"]
    assert (entry["agent"], entry["recorded_by"], entry["outcome"]) == (
        "replay",
        "human:tester",
        "reproduced, not solved",
    )
    assert (entry["solved"], entry["reproduced"], entry["steps"], entry["relaunches"]) == (False, True, 2, 0)
    assert entry["tokens_estimated"] and entry["tokens"] > 0  # the seat reported no tokens: porter's estimate
    assert board["totals"]["human:tester (replayed)"]["solved"] == 0
    assert board["totals"]["human:tester (replayed)"]["reproduced"] == 1
    board_md = (out_dir / "leaderboard.md").read_text()
    assert "| human:tester (replayed) | 0/1 | 1/1 |" in board_md and "| reproduced, not solved |" in board_md


def test_models_run_a_recordings_task_live_and_replay_only_when_named(tmp_path, monkeypatch):
    corpus, script = recorded_corpus(tmp_path)
    monkeypatch.chdir(tmp_path)
    scripted = f"scripted:{script}"
    out_dir = corpus_eval.evaluate(corpus, [scripted], trusted=True)
    [entry] = json.loads((out_dir / "leaderboard.json").read_text())["entries"]
    assert (entry["agent"], entry["reproduced"], entry["outcome"]) == (scripted, None, "not solved")
    out_dir = corpus_eval.evaluate(corpus, ["replay", scripted], trusted=True)
    agents = sorted(entry["agent"] for entry in json.loads((out_dir / "leaderboard.json").read_text())["entries"])
    assert agents == sorted(["replay", scripted])


def test_models_naming_nothing_is_one_line(tmp_path):
    corpus, _ = recorded_corpus(tmp_path)
    command = [
        sys.executable,
        "-m",
        "porter.commands.cli",
        "eval",
        str(corpus),
        "--models",
        ",",
        "--trust-recorded-tasks",
        "--out",
        str(tmp_path),
    ]
    result = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode != 0 and "--models names no model" in result.stderr
