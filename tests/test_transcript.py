"""The transcript: append-only, flushed, redacted, readable after a kill mid-write."""

from __future__ import annotations

import json

import pytest

from porter.errors import RunDirError
from porter.ledger.transcript import Transcript, read_state, read_transcript, write_state


def mask(text: str) -> str:
    return text.replace("sk-secret-123", "[redacted]")


def test_records_are_numbered_flushed_and_redacted(tmp_path):
    path = tmp_path / "transcript.jsonl"
    transcript = Transcript(path, mask)
    transcript.record("note", text="key sk-secret-123 seen")
    transcript.record("tool_call", name="bash", arguments={"command": "true"})
    # readable before close: every record is on disk as soon as it is written
    records = read_transcript(path)
    assert [r["seq"] for r in records] == [1, 2]
    assert "sk-secret-123" not in path.read_text()
    transcript.close()
    reopened = Transcript(path, mask)
    assert reopened.record("note", text="resumed")["seq"] == 3


def test_torn_last_line_is_dropped_but_a_torn_middle_line_is_an_error(tmp_path):
    path = tmp_path / "transcript.jsonl"
    path.write_text(json.dumps({"seq": 1, "kind": "note"}) + "\n" + '{"seq": 2, "ki')
    assert [r["seq"] for r in read_transcript(path)] == [1]
    path.write_text('{"seq": 1, "ki\n' + json.dumps({"seq": 2, "kind": "note"}) + "\n")
    with pytest.raises(ValueError, match=":1: not a JSON record"):
        read_transcript(path)


def test_unknown_kind_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown transcript kind"):
        Transcript(tmp_path / "t.jsonl", mask).record("thought")


def test_state_is_replaced_atomically_and_redacted(tmp_path):
    write_state(tmp_path, {"run_id": "r", "step": 3, "note": "sk-secret-123"}, mask)
    assert read_state(tmp_path) == {"run_id": "r", "step": 3, "note": "[redacted]"}
    assert not (tmp_path / "state.json.tmp").exists()
    with pytest.raises(RunDirError, match="not a porter run directory"):
        read_state(tmp_path / "elsewhere")
