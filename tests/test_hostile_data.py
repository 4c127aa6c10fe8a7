"""What a run reads and writes, attacked as a hostile server, model or recording would (issue #41's data side).

A server answering 302 to a second 127.0.0.1 port (standing in for an address only the host can reach) never gets
that address's answer to porter's probes or checks; text from the model lands escaped in what reviewers read; a
recording is data (never a command run on the host) and a malformed one ends in one line; a task's timeout that
is not a finite positive number is refused with its field path.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import threading

import pytest

from porter.checks import loadgen, quality
from porter.engines import serve

HOST_ONLY_SECRET = "host-only-7f3c9a1b2d4e"


class _Handler(http.server.BaseHTTPRequestHandler):
    """One behaviour per server: `redirect_to` set answers 302 there (same path); unset answers the secret."""

    redirect_to: str | None = None

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        moved = self.path.removeprefix("/moved")  # /moved/X: a redirect to X within the server's own origin
        target = moved if moved != self.path else self.redirect_to and self.redirect_to + self.path
        if target:
            self.send_response(302)
            self.send_header("Location", target)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = json.dumps({"data": [{"id": HOST_ONLY_SECRET}], "choices": [{"text": HOST_ONLY_SECRET}]}).encode()
        if self.path.endswith("/completions"):
            body = b"data: " + json.dumps({"choices": [{"text": HOST_ONLY_SECRET}]}).encode() + b"\n\ndata: [DONE]\n\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


def _start(redirect_to: str | None) -> http.server.ThreadingHTTPServer:
    handler = type("Handler", (_Handler,), {"redirect_to": redirect_to})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def redirecting():
    """The server porter talks to (answering 302 to the other) and the host-only one; yields their URLs."""
    host_only = _start(None)
    host_only_url = f"http://127.0.0.1:{host_only.server_address[1]}"
    server = _start(host_only_url)
    yield f"http://127.0.0.1:{server.server_address[1]}", host_only_url
    for running in (server, host_only):
        running.shutdown()
        running.server_close()


def _loadgen(call):
    async def go():
        async with loadgen.make_session(2) as session:
            return await call(session)

    return asyncio.run(go())


def test_the_serve_probe_does_not_follow_a_redirect_off_the_servers_origin(redirecting):
    url, host_only_url = redirecting
    assert serve.served_ids(host_only_url) == [HOST_ONLY_SECRET]  # the stand-in answers whoever asks directly
    assert serve.served_ids(url) is None


def test_the_checks_do_not_follow_a_redirect_off_the_servers_origin(redirecting):
    url, _ = redirecting
    with pytest.raises(loadgen.CheckError) as refused:
        _loadgen(lambda session: loadgen.resolve_model(session, url, None))
    assert HOST_ONLY_SECRET not in str(refused.value)
    planned = loadgen.Planned(0, 0.0, "/v1/completions", json.dumps({"prompt": "hi", "stream": True}).encode())
    record = _loadgen(lambda session: loadgen.send_one(session, url, planned, 0.0))
    assert not record.ok and "redirect off the server's origin" in record.error
    assert HOST_ONLY_SECRET not in json.dumps(record.__dict__, default=str)
    with pytest.raises(loadgen.CheckError) as refused:
        _loadgen(lambda session: quality.ask(session, url + "/v1/completions", {"prompt": "hi"}, False))
    assert HOST_ONLY_SECRET not in str(refused.value)


def test_a_redirect_within_the_servers_origin_is_still_followed(redirecting):
    _, host_only_url = redirecting
    assert _loadgen(lambda session: loadgen.resolve_model(session, host_only_url + "/moved", None)) == HOST_ONLY_SECRET
    assert serve.served_ids(host_only_url + "/moved") == [HOST_ONLY_SECRET]
