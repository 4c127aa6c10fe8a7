"""The OpenAI Chat Completions adapter, on the official `openai` client, for any compatible endpoint.

Covers OpenAI itself and anything speaking Chat Completions at a `base_url` (GLM or Kimi through a
provider, a local sglang or vLLM): tools as functions, tool results as `tool` messages, usage with
cached prompt tokens, reasoning_content kept and sent back, a refusal or content filter as a stop, and
the reply as a `Reply`. Does not cover retries and pricing (retry.py SdkModel) or the Responses API.
"""

from __future__ import annotations

import json
from typing import Any

import openai

from porter.models.base import Message, RawToolCall, Reply, ToolSpec, Usage, validate_reply
from porter.models.retry import SdkModel


class OpenAIModel(SdkModel):
    def __init__(
        self, model: str, api_key: str, *, base_url: str | None = None, key_env: str = "OPENAI_API_KEY", **options: Any
    ):
        super().__init__(openai, openai.OpenAI, model, api_key, base_url=base_url, key_env=key_env, **options)
        # OpenAI's own models reject `max_tokens`; sglang, vLLM and most providers accept only it reliably.
        self._limit_field = "max_tokens" if base_url else "max_completion_tokens"

    def _create(self, request: dict[str, Any]) -> Any:
        return self._client.chat.completions.create(**request)

    def request(self, messages: list[Message], tools: list[ToolSpec]) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self.model,
            "messages": [to_openai_message(message) for message in messages],
            self._limit_field: self.max_output_tokens,
        }
        if tools:
            request["tools"] = [to_openai_tool(tool) for tool in tools]
        return request

    def reply(self, response: Any, tools: list[ToolSpec]) -> Reply:
        usage = usage_of(response.usage)
        if not response.choices:
            return validate_reply("", [], tools, usage)
        choice = response.choices[0]
        raw_calls = []
        for call in choice.message.tool_calls or []:
            function = getattr(call, "function", None)
            name = function.name if function else getattr(call, "type", "?")
            arguments = function.arguments if function else getattr(call, "custom", None)
            raw_calls.append(RawToolCall(id=call.id, name=name, arguments=arguments))
        truncated = choice.finish_reason == "length"
        reasoning = _extra(choice.message, "reasoning_content")
        reply = validate_reply(choice.message.content or "", raw_calls, tools, usage, truncated, reasoning=reasoning)
        refusal = getattr(choice.message, "refusal", None)
        if refusal or choice.finish_reason == "content_filter":
            reply.stop, reply.text = "refusal", reply.text or refusal or "(stopped by the provider's content filter)"
        return reply


def _extra(message: Any, name: str) -> str:
    """A field the OpenAI SDK does not declare (reasoning_content of GLM, Kimi, DeepSeek); the SDK keeps extras."""
    value = getattr(message, name, None) or (getattr(message, "model_extra", None) or {}).get(name)
    return value if isinstance(value, str) else ""


def usage_of(wire: Any) -> Usage:
    if wire is None:
        return Usage()
    details = getattr(wire, "prompt_tokens_details", None)
    cached = (getattr(details, "cached_tokens", None) or 0) if details else 0
    prompt = wire.prompt_tokens or 0
    return Usage(
        input_tokens=max(prompt - cached, 0), output_tokens=wire.completion_tokens or 0, cache_read_tokens=cached
    )


def to_openai_tool(tool: ToolSpec) -> dict:
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
    }


def to_openai_message(message: Message) -> dict:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": message.content}
    if message.role != "assistant":
        return {"role": message.role, "content": message.content}
    # Providers with interleaved thinking (Kimi, DeepSeek, GLM) want reasoning_content back on the turns
    # that called tools; others ignore the field.
    reasoning = {"reasoning_content": message.reasoning} if message.reasoning else {}
    if not message.tool_calls:
        return {"role": "assistant", "content": message.content, **reasoning}
    return {
        "role": "assistant",
        "content": message.content or None,
        **reasoning,
        "tool_calls": [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
            }
            for call in message.tool_calls
        ],
    }
