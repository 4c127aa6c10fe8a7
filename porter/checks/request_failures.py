"""Evidence of failed requests: each distinct way a check's requests failed, in the server's own words.

A failed request leaves what failed in porter's words (`HTTP 400`, a broken stream, a malformed frame, a
missed deadline), the HTTP status when there was one, and the first bytes of the server's answer (bounded,
redacted, printable: the server is the engine the agent patched, and its answer reaches the model and the
report). A check's result keeps each distinct failure once, with how many requests failed that way and the
first one's answer: failures are the same when their status and their answer agree once numbers are taken
out ("Requested token count (10043) exceeds ..." and "(10051)" are one failure). A server rejecting a
request before scheduling writes no log line, so this answer is often the only evidence. Does not judge a
level (throughput.py) nor count errors for the statistics (metrics.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from porter.redaction import redact
from porter.terminal import printable

MAX_BODY_BYTES = 4096  # read of an error answer: an engine's JSON error with its message fits
MAX_BODY_CHARS = 600  # kept of it in a result
MAX_DISTINCT = 5  # distinct failures a result keeps; the rest are counted
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def answer_text(raw: bytes | str) -> str:
    """A server's answer as evidence: decoded, secrets redacted, terminal controls removed, bounded."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    text = printable(redact(text)).strip()
    return text if len(text) <= MAX_BODY_CHARS else f"{text[:MAX_BODY_CHARS]} [... {len(text) - MAX_BODY_CHARS} more]"


def distinct(failed: Iterable[tuple[str, int | None, str]]) -> list[dict]:
    """(what failed, HTTP status or None, the answer) of each failed request -> the distinct failures, most
    frequent first: {"count", "status", "error", "body"} with the first request's answer; at most MAX_DISTINCT,
    and one more entry counting the rest."""
    found: dict[tuple, dict] = {}
    for error, status, body in failed:
        key = (status, _NUMBER.sub("N", body or error))
        if key in found:
            found[key]["count"] += 1
        else:
            found[key] = {"count": 1, "status": status, "error": error, "body": body}
    ranked = sorted(found.values(), key=lambda failure: -failure["count"])
    rest = ranked[MAX_DISTINCT:]
    if rest:
        other = f"{len(rest)} other distinct failures"
        ranked = [*ranked[:MAX_DISTINCT], {"count": sum(f["count"] for f in rest), "status": None, "error": other}]
    return ranked


def of_records(records: Iterable) -> list[dict]:
    """The distinct failures of a load client's records (loadgen.RequestRecord)."""
    return distinct(
        (f"HTTP {record.status}" if record.status else record.error, record.status, record.body)
        for record in records
        if record.error
    )


def merge(lists: Iterable[list[dict]]) -> list[dict]:
    """Distinct failures of several runs (the levels of a sweep) as one list, counts added."""
    found: dict[tuple, dict] = {}
    for failures in lists:
        for failure in failures or []:
            key = (failure.get("status"), _NUMBER.sub("N", failure.get("body") or failure.get("error") or ""))
            if key in found:
                found[key]["count"] += failure.get("count", 1)
            else:
                found[key] = dict(failure)
    return sorted(found.values(), key=lambda failure: -failure["count"])


def lines(failures: list[dict] | None) -> list[str]:
    """One line per distinct failure, as the model and a person read it."""
    shown = []
    for failure in failures or []:
        count = failure.get("count", 1)
        body = f": {failure['body']}" if failure.get("body") else ""
        shown.append(f"{count} request{'s' if count != 1 else ''} failed with {failure.get('error')}{body}")
    return shown
