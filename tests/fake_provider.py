"""A local HTTP server that speaks the Anthropic Messages API and OpenAI Chat Completions, for tests.

Covers POST /v1/messages (Anthropic) and POST /v1/chat/completions (OpenAI) on 127.0.0.1, answering
from a queue of scripted actions: a reply (text, tool calls, usage), an HTTP error with any status,
body and headers (429 + Retry-After, 500, 401), a delay before answering (to trip client timeouts),
or tool arguments that are not JSON. Every request is recorded (path, headers, JSON body) so tests
can check what the real SDK clients sent, including that the API key reached the server and
nowhere else. Does not cover streaming. With an empty queue it answers with the text "ok".
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ANTHROPIC_PATH = "/v1/messages"
OPENAI_PATH = "/v1/chat/completions"
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


@dataclass
class Action:
    """One scripted answer. `tool_calls` are (name, arguments); a str `arguments` is sent verbatim."""

    status: int = 200
    text: str = ""
    tool_calls: list[tuple[str, Any]] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)  # input, output, cache_read, cache_write
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    error_message: str = "scripted error"
    error_code: str | None = None  # anthropic's error.details.error_code (picks e.g. a spend-limit 429 class)
    stop_reason: str | None = None  # anthropic stop_reason / openai finish_reason; inferred when None
    thinking: str = ""  # anthropic: a signed thinking block before the answer; openai: reasoning_content


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: dict


class FakeProvider:
    def __init__(self) -> None:
        self.actions: deque[Action] = deque()
        self.requests: list[RecordedRequest] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-provider", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def push(self, *actions: Action) -> FakeProvider:
        self.actions.extend(actions)
        return self

    def reply(self, text: str = "", tool_calls: list[tuple[str, Any]] | None = None, **usage: int) -> FakeProvider:
        return self.push(Action(text=text, tool_calls=tool_calls or [], usage=usage))

    def fail(
        self,
        status: int,
        message: str = "scripted error",
        headers: dict[str, str] | None = None,
        code: str | None = None,
    ) -> FakeProvider:
        return self.push(Action(status=status, error_message=message, headers=headers or {}, error_code=code))

    def next_action(self) -> Action:
        with self._lock:
            return self.actions.popleft() if self.actions else Action(text="ok")

    def next_id(self) -> int:
        with self._lock:
            return next(self._ids)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeProvider:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _handler_for(provider: FakeProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server naming
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b"{}"
            body = json.loads(raw or b"{}")
            provider.requests.append(RecordedRequest(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            action = provider.next_action()
            if action.delay_s:
                time.sleep(action.delay_s)
            if self.path not in (ANTHROPIC_PATH, OPENAI_PATH):
                return self._send(404, {"error": {"type": "not_found_error", "message": f"no route {self.path}"}})
            anthropic = self.path == ANTHROPIC_PATH
            if action.status != 200:
                return self._send(action.status, _error_body(action, anthropic), action.headers)
            number = provider.next_id()
            payload = _anthropic_body(action, body, number) if anthropic else _openai_body(action, body, number)
            return self._send(200, payload, action.headers)

        def _send(self, status: int, payload: dict, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client timed out and hung up: that is the point of a slow action

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the http.server signature
            pass

    return Handler


def _error_body(action: Action, anthropic: bool) -> dict:
    kind = ERROR_TYPES.get(action.status, "api_error")
    if anthropic:
        error: dict[str, Any] = {"type": kind, "message": action.error_message}
        if action.error_code:
            error["details"] = {"error_code": action.error_code}
        return {"type": "error", "error": error}
    return {"error": {"message": action.error_message, "type": kind, "code": None}}


def _anthropic_body(action: Action, request: dict, number: int) -> dict:
    content: list[dict] = []
    if action.thinking:
        content.append({"type": "thinking", "thinking": action.thinking, "signature": f"sig-{number:04d}"})
    if action.text:
        content.append({"type": "text", "text": action.text})
    for index, (name, arguments) in enumerate(action.tool_calls):
        content.append({"type": "tool_use", "id": f"toolu_{number:04d}_{index}", "name": name, "input": arguments})
    usage = action.usage
    return {
        "id": f"msg_{number:04d}",
        "type": "message",
        "role": "assistant",
        "model": request.get("model", "?"),
        "content": content,
        "stop_reason": action.stop_reason or ("tool_use" if action.tool_calls else "end_turn"),
        "stop_sequence": None,
        "usage": {
            "input_tokens": usage.get("input", 0),
            "output_tokens": usage.get("output", 0),
            "cache_read_input_tokens": usage.get("cache_read", 0),
            "cache_creation_input_tokens": usage.get("cache_write", 0),
        },
    }


def _openai_body(action: Action, request: dict, number: int) -> dict:
    calls = [
        {
            "id": f"call_{number:04d}_{index}",
            "type": "function",
            "function": {"name": name, "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)},
        }
        for index, (name, arguments) in enumerate(action.tool_calls)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": action.text or None}
    if action.thinking:
        message["reasoning_content"] = action.thinking
    if calls:
        message["tool_calls"] = calls
    usage = action.usage
    prompt = usage.get("input", 0) + usage.get("cache_read", 0)
    return {
        "id": f"chatcmpl-{number:04d}",
        "object": "chat.completion",
        "created": 0,
        "model": request.get("model", "?"),
        "choices": [
            {"index": 0, "message": message, "finish_reason": action.stop_reason or ("tool_calls" if calls else "stop")}
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": usage.get("output", 0),
            "total_tokens": prompt + usage.get("output", 0),
            "prompt_tokens_details": {"cached_tokens": usage.get("cache_read", 0)},
        },
    }
