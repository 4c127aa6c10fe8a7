"""A small OpenAI-compatible streaming server with injected, known timings and faults, for the checks' tests.

Run as a separate process (`python3 tests/sse_server.py --port 0` prints `PORT n`) so its event loop
does not share a core with the client under test. Behaviour is set at run time with POST /_control:
ttft_ms, itl_ms (the injected truth), fail_every (HTTP 500 on every Nth request), drop_after (close
the connection after N token frames), malformed_every (a broken JSON frame in every Nth stream),
answers (question -> reply text for the quality tests), block (prefix-cache block size in words).
Faults for the robustness tests: hang (no answer on /v1/models or a completion), stall_after (a
stream falls silent after N frames, connection open), endless (frames forever, never [DONE]), flood
(megabytes as fast as the socket takes them), models_body / reply_body (a JSON answer that lies about
its shape), reject_over (HTTP 400 in an engine's words for a prompt over N words, as an engine refuses a
request past its context length before scheduling it), frames (these payloads as the stream, verbatim),
exit_after (the process exits when streamed request N+1 arrives: an engine that dies mid-check).
Started with `--served-model-name`, `--ttft-ms`, `--itl-ms` it stands in for a served engine whose
flags set its speed (the fault tests launch it as a task's serve command).
GET /_arrivals lists the streamed requests as the server saw them (its monotonic arrival time, prompt).
Tokens are whitespace-separated words. Each frame carries `server_t`, the server's monotonic clock
when it was written, so a benchmark can split the client's error from the server's jitter.
Does not model performance: every request gets the same timings whatever the load.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

from aiohttp import web

DEFAULTS = {
    "ttft_ms": 50.0,
    "itl_ms": 10.0,
    "fail_every": 0,
    "drop_after": 0,
    "malformed_every": 0,
    "answers": {},
    "block": 16,
    "tokenize": True,
    "reasoning": False,
    "hang": False,
    "stall_after": 0,
    "endless": False,
    "flood": False,
    "models_body": None,
    "reply_body": None,
    "frames": None,
    "exit_after": 0,
    "reject_over": 0,
}
FOREVER_S = 3600


class State:
    def __init__(self) -> None:
        self.settings = dict(DEFAULTS)
        self.requests = 0
        self.cached_blocks: set[str] = set()
        self.arrivals: list[dict] = []  # streamed requests: {"t": server monotonic s, "prompt"}

    def cached_tokens(self, words: list[str]) -> int:
        """Words served from the prefix cache: leading full blocks seen before (then all blocks are stored)."""
        size = self.settings["block"]
        chain, cached, hit = hashlib.sha1(), 0, True
        for start in range(0, len(words) - len(words) % size, size):
            chain.update(" ".join(words[start : start + size]).encode() + b"|")
            key = chain.hexdigest()
            if hit and key in self.cached_blocks:
                cached += size
            else:
                hit = False
            self.cached_blocks.add(key)
        return cached


def frame(payload: dict) -> bytes:
    payload["server_t"] = time.monotonic()
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def reply_for(state: State, prompt: str) -> str:
    answers = state.settings["answers"]
    questions = re.findall(r"Question: (.*?)\nAnswer:", prompt, flags=re.S)
    if questions:
        return answers.get(questions[-1], " I cannot tell.")
    match = re.search(r"this question:(.*?)\nChoices:\n(.*?)\nLet's think", prompt, flags=re.S)
    if match:
        correct = answers.get(match.group(1))
        for line in match.group(2).split("\n"):
            if correct is not None and line[4:] == correct:
                return f"Let me think. The answer is {line[:3]}."
    return "No idea."


async def completions(request: web.Request) -> web.StreamResponse:
    state: State = request.app["state"]
    arrived = time.monotonic()
    state.requests += 1
    number = state.requests
    body = await request.json()
    if body.get("stream"):
        state.arrivals.append({"t": arrived, "prompt": body.get("prompt") or body.get("messages")})
    chat = "messages" in body
    prompt = body["messages"][-1]["content"] if chat else body["prompt"]
    settings = state.settings
    if settings["exit_after"] and len(state.arrivals) > settings["exit_after"]:
        os._exit(3)  # the engine dies mid-check
    if settings["fail_every"] and number % settings["fail_every"] == 0:
        return web.json_response({"error": {"message": "injected failure"}}, status=500)
    if settings["reject_over"] and len(prompt.split()) > settings["reject_over"]:
        message = (
            f"Requested token count exceeds the model's maximum context length of {settings['reject_over']} "
            f"tokens. You requested a total of {len(prompt.split()) + int(body.get('max_tokens') or 0)} tokens."
        )
        return web.json_response(
            {"object": "error", "message": message, "type": "BadRequestError", "code": 400}, status=400
        )
    if settings["hang"]:
        await asyncio.sleep(FOREVER_S)
    if settings["reply_body"] is not None:
        return web.json_response(settings["reply_body"])
    if not body.get("stream"):
        state.cached_tokens(prompt.split())
        text = reply_for(state, prompt)
        choice = {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": len(text.split())}
        return web.json_response({"choices": [{"index": 0, **choice, "finish_reason": "stop"}], "usage": usage})
    return await stream(request, state, number, prompt, body, chat)


async def stream(request, state: State, number: int, prompt: str, body: dict, chat: bool) -> web.StreamResponse:
    settings = state.settings
    arrived = time.monotonic()
    words = prompt.split()
    cached = state.cached_tokens(words)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    if settings["flood"] or settings["frames"] is not None:
        return await misbehave(response, settings)
    count = FOREVER_S * 1000 if settings["endless"] else int(body.get("max_tokens", 16))
    for index in range(count):
        due = arrived + (settings["ttft_ms"] + index * settings["itl_ms"]) / 1000
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        if settings["stall_after"] and index == settings["stall_after"]:
            await asyncio.sleep(FOREVER_S)
        if settings["drop_after"] and index == settings["drop_after"]:
            request.transport.close()
            return response
        if settings["malformed_every"] and number % settings["malformed_every"] == 0 and index == 1:
            await response.write(b'data: {"choices": [{"text": "broken\n\n')
            continue
        if chat and settings["reasoning"]:
            piece = {"delta": {"reasoning_content": " hmm", "content": None}}
        else:
            piece = {"delta": {"content": " word"}} if chat else {"text": " word"}
        await response.write(frame({"choices": [{"index": 0, **piece, "finish_reason": None}]}))
    usage = {
        "prompt_tokens": len(words),
        "completion_tokens": count,
        "prompt_tokens_details": {"cached_tokens": cached},
    }
    await response.write(frame({"choices": [], "usage": usage, "server_arrived_t": arrived}))
    await response.write(b"data: [DONE]\n\n")
    return response


async def misbehave(response: web.StreamResponse, settings: dict) -> web.StreamResponse:
    if settings["flood"]:
        block = frame({"choices": [{"index": 0, "text": "x" * (1 << 20), "finish_reason": None}]})
        try:
            for _ in range(FOREVER_S * 100):
                await response.write(block)
        except ConnectionError:  # the client cut the flood: what the tests want
            return response
    for payload in settings["frames"] or []:
        await response.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
    await response.write(b"data: [DONE]\n\n")
    return response


async def tokenize(request: web.Request) -> web.Response:
    if not request.app["state"].settings["tokenize"]:
        raise web.HTTPNotFound()
    words = (await request.json())["prompt"].split()
    return web.json_response({"tokens": list(range(len(words))), "count": len(words), "max_model_len": 1 << 20})


async def control(request: web.Request) -> web.Response:
    state: State = request.app["state"]
    update = await request.json()
    if update.pop("reset", False):
        state.settings, state.requests, state.cached_blocks, state.arrivals = dict(DEFAULTS), 0, set(), []
    state.settings.update(update)
    return web.json_response(state.settings)


async def arrivals(request: web.Request) -> web.Response:
    return web.json_response(request.app["state"].arrivals)


async def models(request: web.Request) -> web.Response:
    settings = request.app["state"].settings
    if settings["hang"]:
        await asyncio.sleep(FOREVER_S)
    if settings["models_body"] is not None:
        return web.json_response(settings["models_body"])
    name = request.app["served_model_name"]
    return web.json_response({"object": "list", "data": [{"id": name, "object": "model"}]})


async def health(_: web.Request) -> web.Response:
    return web.Response(text="ok")


def make_app(served_model_name: str = "sse-test", **settings) -> web.Application:
    app = web.Application()
    app["state"] = State()
    app["state"].settings.update(settings)
    app["served_model_name"] = served_model_name
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", completions)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/_control", control)
    app.router.add_get("/_arrivals", arrivals)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    return app


async def serve(port: int, served_model_name: str, **settings) -> None:
    runner = web.AppRunner(make_app(served_model_name, **settings), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, backlog=1024)
    await site.start()
    print(f"PORT {runner.addresses[0][1]}", flush=True)
    await asyncio.Event().wait()


class SseServer:
    """The server in a child process, for tests: `url`, `control(**settings)`, `stop()`."""

    def __init__(self) -> None:
        self.process = subprocess.Popen([sys.executable, __file__], stdout=subprocess.PIPE, text=True)
        line = self.process.stdout.readline()
        if not line.startswith("PORT "):
            self.process.kill()
            raise RuntimeError(f"the SSE test server did not start (printed {line!r})")
        self.url = f"http://127.0.0.1:{int(line.split()[1])}"

    def control(self, **settings) -> dict:
        request = urllib.request.Request(
            self.url + "/_control", data=json.dumps(settings).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.load(response)

    def reset(self, **settings) -> dict:
        return self.control(reset=True, **settings)

    def arrivals(self) -> list[dict]:
        with urllib.request.urlopen(self.url + "/_arrivals", timeout=10) as response:
            return json.load(response)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--served-model-name", default="sse-test")
    parser.add_argument("--ttft-ms", type=float, default=DEFAULTS["ttft_ms"])
    parser.add_argument("--itl-ms", type=float, default=DEFAULTS["itl_ms"])
    parser.add_argument("--exit-after", type=int, default=0, help="exit when streamed request N+1 arrives (0: never)")
    args = parser.parse_args()
    settings = {"ttft_ms": args.ttft_ms, "itl_ms": args.itl_ms, "exit_after": args.exit_after}
    asyncio.run(serve(args.port, args.served_model_name, **settings))
    sys.exit(0)
