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
from dataclasses import asdict, dataclass

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


@dataclass
class Failure:
    """One distinct way requests failed: how many did, the HTTP status (None: no answer), what failed in porter's
    words and the first one's answer (None: none kept, as on the entry that counts the rest)."""

    count: int = 1
    status: int | None = None
    error: str | None = None
    body: str | None = None

    def to_dict(self) -> dict:
        """As a result keeps it: the entry counting the rest has no answer at all."""
        return {name: value for name, value in asdict(self).items() if name != "body" or value is not None}


def distinct(failed: Iterable[tuple[str, int | None, str]]) -> list[dict]:
    """(what failed, HTTP status or None, the answer) of each failed request -> the distinct failures, most
    frequent first: {"count", "status", "error", "body"} with the first request's answer; at most MAX_DISTINCT,
    and one more entry counting the rest."""
    ranked = _grouped(Failure(1, status, error, body) for error, status, body in failed)
    rest = ranked[MAX_DISTINCT:]
    if rest:
        other = Failure(sum(failure.count for failure in rest), None, f"{len(rest)} other distinct failures")
        ranked = [*ranked[:MAX_DISTINCT], other]
    return [failure.to_dict() for failure in ranked]


def of_records(records: Iterable) -> list[dict]:
    """The distinct failures of a load client's records (loadgen.RequestRecord)."""
    return distinct(
        (f"HTTP {record.status}" if record.status else record.error, record.status, record.body)
        for record in records
        if record.error
    )


def merge(lists: Iterable[list[dict]]) -> list[dict]:
    """Distinct failures of several runs (the levels of a sweep) as one list, counts added."""
    kept = (Failure(**failure) for failures in lists for failure in failures or [])
    return [failure.to_dict() for failure in _grouped(kept)]


def _grouped(failures: Iterable[Failure]) -> list[Failure]:
    """The failures of one kind as one, the first with the counts added (each made for this); most frequent first."""
    found: dict[tuple, Failure] = {}
    for failure in failures:
        kind = (failure.status, _NUMBER.sub("N", failure.body or failure.error or ""))  # numbers taken out
        if kind in found:
            found[kind].count += failure.count
        else:
            found[kind] = failure
    return sorted(found.values(), key=lambda failure: -failure.count)


def lines(failures: list[dict] | None) -> list[str]:
    """One line per distinct failure, as the model and a person read it."""
    shown = []
    for failure in (Failure(**failure) for failure in failures or []):
        body = f": {failure.body}" if failure.body else ""
        shown.append(f"{failure.count} request{'s' if failure.count != 1 else ''} failed with {failure.error}{body}")
    return shown
