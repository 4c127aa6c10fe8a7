"""The Anthropic Messages API adapter, on the official `anthropic` client.

Covers turning porter's messages into Messages API requests (system prompt apart, tool_use and
tool_result blocks, is_error on failed calls, consecutive same-role turns merged), prompt caching
(cache_control on the tools, the system prompt and the last message, so each step re-reads the
conversation so far from the cache and only pays full price for what is new) and turning the reply
into a `Reply` with usage and the stop reasons the loop acts on (cut off, refusal, paused turn).
Does not cover retries and pricing (retry.py SdkModel) or choosing the model (__init__.py).
"""

from __future__ import annotations

from typing import Any

import anthropic

from porter.models.base import Message, RawToolCall, Reply, ToolSpec, Usage, validate_reply
from porter.models.retry import SdkModel

CACHE = {"type": "ephemeral"}
THINKING_BLOCKS = ("thinking", "redacted_thinking")  # sent back verbatim, signature intact
EMPTY_TURN = "(empty)"  # the API rejects empty text blocks; a turn must still say something
# Stop reasons the loop must act on: a refusal ends the run; a paused long turn is sent back to continue.
STOPS = {"refusal": "refusal", "pause_turn": "pause"}


class AnthropicModel(SdkModel):
    def __init__(self, model: str, api_key: str, *, key_env: str = "ANTHROPIC_API_KEY", **options: Any):
        super().__init__(anthropic, anthropic.Anthropic, model, api_key, key_env=key_env, **options)

    def _create(self, request: dict[str, Any]) -> Any:
        return self._client.messages.create(**request)

    def request(self, messages: list[Message], tools: list[ToolSpec]) -> dict[str, Any]:
        system = "\n\n".join(message.content for message in messages if message.role == "system" and message.content)
        request: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_output_tokens,
            "messages": to_anthropic_messages(messages),
        }
        if system:
            request["system"] = [{"type": "text", "text": system, "cache_control": CACHE}]
        if tools:
            request["tools"] = to_anthropic_tools(tools)
        return request

    def reply(self, response: Any, tools: list[ToolSpec]) -> Reply:
        texts, raw_calls, thinking = [], [], []
        for block in response.content or []:
            if block.type == "text":
                texts.append(block.text)
            elif block.type == "tool_use":
                raw_calls.append(RawToolCall(id=block.id, name=block.name, arguments=block.input))
            elif block.type in THINKING_BLOCKS:
                thinking.append(block.model_dump(mode="json", exclude_none=True))
        truncated = response.stop_reason == "max_tokens"
        reply = validate_reply("\n".join(texts), raw_calls, tools, usage_of(response.usage), truncated, thinking)
        reply.stop = STOPS.get(response.stop_reason, reply.stop)
        if reply.stop == "pause":
            reply.format_error = None  # a paused turn is continued by sending it back as it is, not corrected
        return reply


def usage_of(wire: Any) -> Usage:
    if wire is None:
        return Usage()
    return Usage(
        input_tokens=wire.input_tokens or 0,
        output_tokens=wire.output_tokens or 0,
        cache_read_tokens=getattr(wire, "cache_read_input_tokens", None) or 0,
        cache_write_tokens=getattr(wire, "cache_creation_input_tokens", None) or 0,
    )


def to_anthropic_tools(tools: list[ToolSpec]) -> list[dict]:
    wire = [{"name": tool.name, "description": tool.description, "input_schema": tool.parameters} for tool in tools]
    wire[-1]["cache_control"] = CACHE  # one breakpoint after the last tool caches them all
    return wire


def to_anthropic_messages(messages: list[Message]) -> list[dict]:
    """User/assistant turns of content blocks; tool results ride in user turns; the last block is cached."""
    turns: list[dict] = []
    for message in messages:
        if message.role == "system":
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message)
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)  # the API wants alternating turns
        else:
            turns.append({"role": role, "content": blocks})
    if turns:
        last_block = turns[-1]["content"][-1]
        last_block["cache_control"] = CACHE
    return turns


def _blocks(message: Message) -> list[dict]:
    if message.role == "tool":
        block = {
            "type": "tool_result",
            "tool_use_id": message.tool_call_id or "",
            "content": message.content or EMPTY_TURN,
        }
        if message.facts and message.facts.get("ok") is False:
            block["is_error"] = True  # the model weighs a failed call differently from a result
        return [block]
    blocks: list[dict] = [dict(block) for block in message.thinking]  # thinking comes first in its turn
    if message.content.strip():
        blocks.append({"type": "text", "text": message.content})
    for call in message.tool_calls:
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments})
    return blocks or [{"type": "text", "text": EMPTY_TURN}]
