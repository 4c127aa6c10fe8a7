"""OpenAI-compatible endpoints on top of the scheduler, with sglang's extras when the front is sglang's.

/v1/completions and /v1/chat/completions (SSE streaming or not, `usage` with
`prompt_tokens_details.cached_tokens`, `stream_options.include_usage`, `ignore_eos`, `stop`), /health,
/v1/models, /tokenize; sglang's /health_generate, /get_server_info, /flush_cache, or vLLM's /version. Chat
messages are rendered with a GLM-style template before tokenizing, so chat prompt counts include the template
tokens.
Does not cover tools, logprobs or n > 1 (rejected with 400).
"""

import json
import time
import uuid
from collections.abc import AsyncIterator

from twin import solver, tokenizer
from twin.scheduler import Request, Router


class Api:
    def __init__(
        self,
        router: Router,
        served_model_name: str,
        server_info: dict,
        numerics: solver.Numerics,
        owned_by: str = "sglang",
        sglang_routes: bool = True,
    ):
        self.router = router
        self.owned_by = owned_by
        self.sglang_routes = sglang_routes
        self.model_name = served_model_name
        self.server_info = server_info
        self.numerics = numerics
        self.max_model_len = server_info["context_length"]

    async def handle(self, method: str, path: str, body: bytes) -> tuple[int, object] | AsyncIterator[str]:
        routes = {
            "/health": self._health,
            "/v1/models": self._models,
            "/tokenize": self._tokenize,
            "/v1/completions": self._completions,
            "/v1/chat/completions": self._chat,
        }
        if self.sglang_routes:
            extras = {"/health_generate": self._health_generate, "/get_server_info": self._server_info}
            routes |= extras | {"/flush_cache": self._flush_cache}
        else:
            routes["/version"] = self._version
        route = routes.get(path)
        if route is None:
            return 404, {"object": "error", "message": f"no route {path}", "type": "NotFoundError", "code": 404}
        try:
            payload = json.loads(body) if body else {}
            return await route(payload)
        except (ValueError, TypeError, KeyError) as exc:
            return 400, {"object": "error", "message": str(exc), "type": "BadRequestError", "code": 400}

    async def _health(self, payload: dict) -> tuple[int, object]:
        return 200, {}

    async def _health_generate(self, payload: dict) -> tuple[int, object]:
        request = Request(tokenizer.token_ids("health check"), tokenizer.pieces(" ok"))
        self.router.submit(request)
        await request.queue.get()
        return 200, {}

    async def _models(self, payload: dict) -> tuple[int, object]:
        card = {
            "id": self.model_name,
            "object": "model",
            "created": 0,
            "owned_by": self.owned_by,
            "root": self.model_name,
            "max_model_len": self.max_model_len,
        }
        return 200, {"object": "list", "data": [card]}

    async def _server_info(self, payload: dict) -> tuple[int, object]:
        return 200, {**self.server_info, "load": self.router.load()}

    async def _version(self, payload: dict) -> tuple[int, object]:
        return 200, {"version": self.server_info.get("version")}

    async def _flush_cache(self, payload: dict) -> tuple[int, object]:
        self.router.flush_cache()
        return 200, {"message": "Cache flushed."}

    async def _tokenize(self, payload: dict) -> tuple[int, object]:
        ids = tokenizer.token_ids(payload["prompt"])
        return 200, {"tokens": ids, "count": len(ids), "max_model_len": self.max_model_len}

    async def _completions(self, payload: dict) -> tuple[int, object] | AsyncIterator[str]:
        prompt = payload["prompt"]
        if isinstance(prompt, list):
            if len(prompt) != 1 and not all(isinstance(item, int) for item in prompt):
                raise ValueError("batched prompts are not supported by the twin; send one prompt per request")
            prompt = prompt[0] if isinstance(prompt[0], str) else prompt
        if isinstance(prompt, list):
            return await self._generate(payload, list(prompt), "", chat=False)
        return await self._generate(payload, tokenizer.token_ids(prompt), prompt, chat=False)

    async def _chat(self, payload: dict) -> tuple[int, object] | AsyncIterator[str]:
        text = "[gMASK]<sop>"
        for message in payload["messages"]:
            content = message["content"]
            if isinstance(content, list):
                content = "".join(part.get("text", "") for part in content)
            text += f"<|{message['role']}|>\n{content}"
        text += "<|assistant|>\n"
        return await self._generate(payload, tokenizer.token_ids(text), text, chat=True)

    def _output_pieces(self, payload: dict, prompt_text: str, prompt_length: int) -> tuple[list[str], str]:
        max_tokens = payload.get("max_tokens") or payload.get("max_completion_tokens") or 128
        max_tokens = min(int(max_tokens), self.max_model_len - prompt_length)
        if max_tokens < 1:
            raise ValueError(
                f"Requested token count exceeds the model's maximum context length of {self.max_model_len} "
                f"tokens. You requested a total of {prompt_length + int(payload.get('max_tokens') or 0)} tokens."
            )
        answer = solver.reply(prompt_text, self.numerics)
        if answer is None:
            answer = solver.filler(16 + len(prompt_text) % 48, prompt_text[-200:])
        pieces = tokenizer.pieces(answer)
        finish = "stop"
        text = "".join(pieces)
        stops = payload.get("stop") or []
        for stop in [stops] if isinstance(stops, str) else stops:
            if stop and stop in text:
                text = text[: text.index(stop)]
                pieces = tokenizer.pieces(text) or [""]
        if payload.get("ignore_eos") or int(payload.get("min_tokens") or 0) > len(pieces):
            wanted = max_tokens if payload.get("ignore_eos") else int(payload["min_tokens"])
            pieces = pieces + tokenizer.pieces(solver.filler(max(wanted - len(pieces), 0), text))
        if len(pieces) >= max_tokens:
            pieces, finish = pieces[:max_tokens], "length"
        return pieces or [""], finish

    async def _generate(self, payload: dict, ids: list[int], text: str, chat: bool):
        if int(payload.get("n") or 1) != 1:
            raise ValueError("n > 1 is not supported by the twin")
        pieces, finish = self._output_pieces(payload, text, len(ids))
        request = Request(ids, pieces)
        self.router.submit(request)
        meta = {
            "id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}",
            "created": int(time.time()),
            "model": self.model_name,
            "chat": chat,
            "finish": finish,
            "prompt_tokens": len(ids),
        }
        if payload.get("stream"):
            include_usage = bool((payload.get("stream_options") or {}).get("include_usage"))
            return self._stream(request, meta, include_usage)
        text_out, count = "", 0
        while not request.done or not request.queue.empty():
            piece, pieces_count, _ = await request.queue.get()
            text_out, count = text_out + piece, count + pieces_count
        choice = {"index": 0, "finish_reason": finish, "logprobs": None}
        if chat:
            choice["message"] = {"role": "assistant", "content": text_out}
        else:
            choice["text"] = text_out
        body = {**self._envelope(meta), "choices": [choice], "usage": self._usage(meta, request, count)}
        return 200, body

    def _envelope(self, meta: dict) -> dict:
        kind = "chat.completion" if meta["chat"] else "text_completion"
        return {"id": meta["id"], "object": kind, "created": meta["created"], "model": meta["model"]}

    @staticmethod
    def _usage(meta: dict, request: Request, completion_tokens: int) -> dict:
        return {
            "prompt_tokens": meta["prompt_tokens"],
            "completion_tokens": completion_tokens,
            "total_tokens": meta["prompt_tokens"] + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": request.cached_tokens},
        }

    async def _stream(self, request: Request, meta: dict, include_usage: bool) -> AsyncIterator[str]:
        envelope = self._envelope(meta)
        envelope["object"] = "chat.completion.chunk" if meta["chat"] else "text_completion"
        count, first = 0, True
        while True:
            piece, pieces_count, done = await request.queue.get()
            count += pieces_count
            if meta["chat"]:
                delta = {"role": "assistant", "content": piece} if first else {"content": piece}
                choice = {"index": 0, "delta": delta, "finish_reason": meta["finish"] if done else None}
            else:
                choice = {"index": 0, "text": piece, "finish_reason": meta["finish"] if done else None}
            first = False
            yield json.dumps({**envelope, "choices": [choice], "usage": None})
            if done:
                break
        if include_usage:
            yield json.dumps({**envelope, "choices": [], "usage": self._usage(meta, request, count)})
        yield "[DONE]"
