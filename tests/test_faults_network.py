"""Fault injection on the network and the datasets: servers that hang, flood, stall, never end or lie.

Each row of #21's table that concerns a check ends here in a clear error or a correct result, within
the deadline the test sets (short ones, so the suite stays fast; the defaults are in loadgen.Deadlines).
The server is tests/sse_server.py with its fault knobs, in its own process on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from sse_server import SseServer

from porter.checks import loadgen, quality
from porter.checks.loadgen import CheckError, Deadlines
from porter.checks.quality import QualityCheckSpec
from porter.checks.throughput import completion_body

SHORT = Deadlines(connect_s=2, first_byte_s=1.0, idle_s=0.5, total_s=3.0, max_bytes=2 << 20)


@pytest.fixture(scope="module")
def server():
    running = SseServer()
    yield running
    running.stop()


def one_stream(server: SseServer, deadlines: Deadlines = SHORT, output_tokens: int = 8) -> loadgen.RequestRecord:
    body = json.dumps(completion_body("sse-test", "one two three", output_tokens)).encode()
    planned = [loadgen.Planned(0, 0.0, "/v1/completions", body)]

    async def go():
        async with loadgen.make_session(1, deadlines=deadlines) as session:
            return await loadgen.run_schedule(session, server.url, planned, 60.0, deadlines)

    return asyncio.run(go())[0][0]


def listing(server: SseServer, deadlines: Deadlines = SHORT) -> str:
    async def go():
        async with loadgen.make_session(1, deadlines=deadlines) as session:
            return await loadgen.resolve_model(session, server.url, None, deadlines)

    return asyncio.run(go())


def gsm8k_spec(path, samples: int = 6, few_shot: int = 2) -> QualityCheckSpec:
    return QualityCheckSpec(name="g", kind="gsm8k", dataset=str(path), samples=samples, few_shot=few_shot, minimum=0)


def write_rows(path, rows: list[dict]):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def arithmetic(count: int) -> list[dict]:
    return [{"question": f"What is {n} plus {n}?", "answer": f"#### {2 * n}"} for n in range(count)]


def test_a_models_listing_that_never_answers_fails_at_its_deadline(server):
    server.reset(hang=True)
    with pytest.raises(CheckError, match="did not answer within 1 s"):
        listing(server)


@pytest.mark.parametrize(
    "body",
    [{"data": {"id": "x"}}, {"data": "zzz"}, {"data": [1, 2]}, ["not", "an", "object"], {"object": "list"}],
)
def test_a_models_listing_of_the_wrong_shape_is_a_clear_error(server, body):
    server.reset(models_body=body)
    with pytest.raises(CheckError, match="lists no model"):
        listing(server)


def test_a_stream_with_no_first_byte_ends_at_the_first_byte_deadline(server):
    server.reset(hang=True)
    record = one_stream(server)
    assert record.timed_out and record.error == "deadline: no first byte within 1 s"


def test_a_stream_that_falls_silent_ends_at_the_idle_deadline(server):
    server.reset(stall_after=3, ttft_ms=5, itl_ms=5)
    record = one_stream(server)
    assert record.timed_out and record.error.startswith("deadline: the stream was silent for 0.5 s")
    assert len(record.token_times_s) == 3  # what arrived before the silence is kept


def test_a_stream_that_never_ends_stops_at_the_total_deadline(server):
    server.reset(endless=True, ttft_ms=5, itl_ms=20)
    record = one_stream(server)
    assert record.timed_out and "total deadline" in record.error


def test_a_flooding_stream_is_cut_at_the_byte_cap(server):
    server.reset(flood=True)
    record = one_stream(server)
    assert not record.ok and record.error == "response larger than 2097152 bytes: the stream was cut"
    assert record.token_times_s == []  # the flood was dropped, not parsed


@pytest.mark.parametrize(
    ("frames", "expected"),
    [
        ([{"choices": "zzz"}], "`choices` is a str"),
        ([{"choices": ["zzz"]}], "a choice is a str"),
        ([{"choices": [{"text": 7}]}], "token text is a int"),
        ([[1, 2]], "error frame in stream"),
    ],
)
def test_a_stream_that_lies_about_its_shape_is_that_requests_error(server, frames, expected):
    server.reset(frames=frames)
    record = one_stream(server)
    assert not record.ok and expected in record.error


def test_usage_that_lies_is_not_taken_as_a_count(server):
    server.reset(frames=[{"choices": [{"text": " a"}], "usage": {"prompt_tokens": "many", "completion_tokens": -4}}])
    record = one_stream(server)
    assert record.ok and record.prompt_tokens is None and record.output_tokens == 1


def test_a_quality_check_against_a_hung_server_stops_after_one_deadline(server, tmp_path):
    server.reset(hang=True)
    spec = gsm8k_spec(write_rows(tmp_path / "g.jsonl", arithmetic(10)))
    with pytest.raises(CheckError, match="(?s)failed 6 of 6 questions.*no answer within 1 s"):
        quality.run_quality(server.url, spec, model="sse-test", deadlines=Deadlines(first_byte_s=1, total_s=1))


@pytest.mark.parametrize(
    ("reply", "expected"),
    [({"choices": "zzz"}, "no list of choices"), ({"choices": [{"text": 3}]}, "text is a int"), ([], "no list")],
)
def test_a_quality_answer_of_the_wrong_shape_is_that_questions_error(server, tmp_path, reply, expected):
    server.reset(reply_body=reply)
    spec = gsm8k_spec(write_rows(tmp_path / "g.jsonl", arithmetic(10)))
    with pytest.raises(CheckError, match=expected):
        quality.run_quality(server.url, spec, model="sse-test")


def test_integer_answers_in_a_dataset_are_read_as_text(server, tmp_path):
    rows = [{"question": f"What is {n} plus {n}?", "answer": 2 * n} for n in range(10)]
    server.reset(answers={row["question"]: f" #### {row['answer']}" for row in rows})
    result = quality.run_quality(server.url, gsm8k_spec(write_rows(tmp_path / "g.jsonl", rows)), model="sse-test")
    assert result.n == 6 and result.score == 1.0


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"\xff\xfe\x00\x01binary\x00", "not UTF-8 text"),
        (b'{"question": ["a list"], "answer": "#### 1"}\n', "`question` is a list; expected text"),
        (b'{"question": "q", "answer": true}\n', "`answer` is a bool; expected text"),
        (b"[1, 2]\n", "expected a JSON object"),
        (b"", "the dataset is empty"),
    ],
)
def test_a_broken_dataset_is_one_clear_error(tmp_path, content, expected):
    path = tmp_path / "g.jsonl"
    path.write_bytes(content)
    with pytest.raises(CheckError, match=expected):
        quality.read_dataset(gsm8k_spec(path))


def test_fewer_rows_than_few_shot_examples_is_an_error_not_zero_questions(tmp_path):
    spec = gsm8k_spec(write_rows(tmp_path / "g.jsonl", arithmetic(3)), few_shot=5)
    with pytest.raises(CheckError, match="has 3 rows: its 5 few-shot examples leave no question"):
        quality.read_dataset(spec)


@pytest.mark.parametrize(
    ("command", "settings", "expected"),
    [
        (["bench", "--single-stream", "--input-len", "4", "--output-len", "4"], {"models_body": {"data": {}}}, 1),
        (["check", "quality", "--dataset", "gsm8k:{dataset}"], {"models_body": {"data": "zzz"}}, 1),
        (["check", "quality", "--dataset", "gsm8k:{binary}"], {}, 2),
    ],
)
def test_the_cli_answers_a_lie_or_a_broken_dataset_with_one_line(server, tmp_path, command, settings, expected):
    server.reset(**settings)
    write_rows(tmp_path / "g.jsonl", arithmetic(20))
    (tmp_path / "b.jsonl").write_bytes(b"\x00\xff" * 100)
    words = [word.format(dataset=tmp_path / "g.jsonl", binary=tmp_path / "b.jsonl") for word in command]
    done = subprocess.run(
        [sys.executable, "-m", "porter", *words[:2], server.url, *words[2:]],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == expected, done.stderr
    assert done.stderr.startswith("porter: ") and "Traceback" not in done.stderr


HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x1b[31m[/bold] \x07\x9b31m\u202eevil\x1bP1$r\x1b\\"


def no_controls(text: str) -> bool:
    return not any(ord(c) < 32 and c not in "\n\t" or 0x7F <= ord(c) <= 0x9F or c == "\u202e" for c in text)


def test_a_server_error_with_escape_sequences_and_markup_is_printed_inert(server):
    server.reset(frames=[{"error": HOSTILE}])
    done = subprocess.run(
        [sys.executable, "-m", "porter", "bench", server.url, "--single-stream", "--input-len", "4"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in done.stderr and "[/bold]" in done.stdout  # shown as written, not parsed as markup
    assert no_controls(done.stdout) and no_controls(done.stderr)
