"""Evidence of failed requests: each distinct failure once, counted, with the server's first answer bounded,
redacted and printable."""

from __future__ import annotations

from porter.checks import request_failures
from porter.redaction import collect


def test_failures_differing_only_in_numbers_are_one_with_the_first_answer():
    refused = "Requested token count exceeds the model's maximum context length of 8192 tokens. You requested {}."
    failed = [("HTTP 400", 400, refused.format(n)) for n in (10043, 10051, 9999)]
    failed += [("HTTP 500", 500, "internal error"), ("stream broken after 3 reads: ClientPayloadError", None, "")]
    found = request_failures.distinct(failed)
    assert found[0] == {"count": 3, "status": 400, "error": "HTTP 400", "body": refused.format(10043)}
    assert [failure["count"] for failure in found] == [3, 1, 1]
    assert request_failures.lines(found)[2] == "1 request failed with stream broken after 3 reads: ClientPayloadError"


def test_an_answer_is_bounded_printable_and_redacted(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789abcdef")
    collect()  # the secrets of this process, as porter gathers them at start
    raw = b"\x1b]0;owned\x07bad key sk-test-0123456789abcdef " + b"x" * 5000
    text = request_failures.answer_text(raw)
    assert "\x1b" not in text and "sk-test-0123456789abcdef" not in text
    assert len(text) < request_failures.MAX_BODY_CHARS + 40 and text.endswith("more]")
    monkeypatch.undo()
    collect()


def test_many_kinds_of_failure_keep_the_most_frequent_and_count_the_rest():
    failed = [(f"HTTP {status}", status, f"answer {chr(97 + status % 26)}") for status in range(400, 410)]
    found = request_failures.distinct(failed + failed[:1])
    assert len(found) == request_failures.MAX_DISTINCT + 1 and found[0]["count"] == 2
    assert found[-1] == {"count": 5, "status": None, "error": "5 other distinct failures"}


def test_the_levels_of_a_sweep_merge_by_kind():
    level = [{"count": 2, "status": 400, "error": "HTTP 400", "body": "too long: 10043"}]
    other = [{"count": 5, "status": 400, "error": "HTTP 400", "body": "too long: 10051"}]
    assert request_failures.merge([level, other, []]) == [{**level[0], "count": 7}]
