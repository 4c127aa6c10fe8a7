"""A minimal HTTP/1.1 server on asyncio streams: keep-alive, Content-Length bodies, chunked responses.

Enough for OpenAI clients (httpx, aiohttp, openai) and curl. Handlers get (method, path, body bytes) and
return either (status, json-able object) or an async iterator of SSE payload strings. Does not cover TLS,
request bodies sent chunked, or HTTP/2.
"""

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable

Handler = Callable[[str, str, bytes], Awaitable[tuple[int, object] | AsyncIterator[str]]]
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 500: "Internal Server Error"}


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str], bytes] | None:
    line = await reader.readline()
    if not line:
        return None
    method, path, _ = line.decode("latin-1").split(" ", 2)
    headers = {}
    while True:
        header = await reader.readline()
        if header in (b"\r\n", b"\n", b""):
            break
        name, _, value = header.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
    return method, path.split("?", 1)[0], headers, body


async def _write_json(writer: asyncio.StreamWriter, status: int, payload: object) -> None:
    body = json.dumps(payload).encode()
    head = (
        f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    writer.write(head.encode() + body)
    await writer.drain()


async def _write_stream(writer: asyncio.StreamWriter, events: AsyncIterator[str]) -> None:
    head = (
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    )
    writer.write(head.encode())
    async for event in events:
        data = f"data: {event}\n\n".encode()
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        await writer.drain()
    writer.write(b"0\r\n\r\n")
    await writer.drain()


def make_connection_handler(handler: Handler) -> Callable:
    async def serve_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    break
                method, path, headers, body = request
                result = await handler(method, path, body)
                if isinstance(result, tuple):
                    await _write_json(writer, *result)
                else:
                    await _write_stream(writer, result)
                if headers.get("connection", "").lower() == "close":
                    break
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()

    return serve_connection
