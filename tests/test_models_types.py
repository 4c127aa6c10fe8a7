"""Conversation types, reply validation, prices and make_model's choices and errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from porter.ledger.records import StartUp
from porter.models import (
    MODELS,
    Message,
    ModelError,
    RawToolCall,
    Reply,
    ScriptedModel,
    ToolCall,
    ToolSpec,
    Usage,
    cost_usd,
    make_model,
    price_for,
    validate_reply,
)
from porter.models.prices import load_price_table, price_entry
from porter.task import AgentSpec, PriceSpec

TOOLS = [ToolSpec("bash", "Run.", {"type": "object"}), ToolSpec("finish", "Stop.", {"type": "object"})]


@pytest.mark.parametrize(
    "item",
    [
        Message("user", "hello"),
        Message("assistant", "", tool_calls=[ToolCall("c1", "bash", {"command": "ls"})]),
        Message("tool", "out", tool_call_id="c1", name="bash"),
        ToolCall("c2", "finish", {"reason": "done"}),
        Usage(1, 2, 3, 4, 0.5),
        Usage(cost_usd=None),
        Reply("text", [ToolCall("c3", "bash", {})], Usage(10, 1), format_error="bad"),
        Reply("", [], Usage(), thinking=[{"type": "thinking", "thinking": "hm", "signature": "s"}]),
        Message("assistant", "a", thinking=[{"type": "redacted_thinking", "data": "xyz"}]),
        ToolSpec("bash", "Run.", {"type": "object"}),
    ],
)
def test_to_dict_from_dict_round_trip_through_json(item):
    assert type(item).from_dict(json.loads(json.dumps(item.to_dict()))) == item


def test_a_record_reads_a_null_as_its_default_and_skips_keys_it_does_not_know():
    start = StartUp.from_dict({"healthy": False, "seconds": 3.0, "log": "serve-001.log", "stages": None, "later": 1})
    assert (start.stages, start.fingerprint, start.crash_class) == ([], None, None)
    assert Reply.from_dict({"text": None, "tool_calls": None, "usage": None}) == Reply("", [], Usage())
    with pytest.raises(TypeError):  # a field with no default must be there: each reader names the file
        StartUp.from_dict({"healthy": True, "seconds": None, "log": "serve-001.log"})


def test_message_rejects_unknown_roles():
    with pytest.raises(ValueError, match="role must be one of"):
        Message("robot", "hi")


@pytest.mark.parametrize(
    ("text", "calls", "truncated", "kept", "expected"),
    [
        ("ok", [RawToolCall("a", "bash", '{"command": "ls"}')], False, ["bash"], None),
        ("", [RawToolCall("a", "finish", "")], False, ["finish"], None),
        ("", [RawToolCall("a", "bash", "{oops")], False, [], "not valid JSON"),
        ("", [RawToolCall("a", "bash", "[1, 2]")], False, [], "must be a JSON object"),
        ("", [RawToolCall("a", "deploy", {})], False, [], "unknown tool `deploy`"),
        ("  ", [], False, [], "the reply was empty"),
        ("", [], True, [], "output token limit"),
        ("", [RawToolCall("a", "bash", {}), RawToolCall("b", "nope", {})], False, ["bash"], "do not resend them"),
    ],
)
def test_validate_reply(text, calls, truncated, kept, expected):
    reply = validate_reply(text, calls, TOOLS, Usage(), truncated)
    assert [call.name for call in reply.tool_calls] == kept
    if expected is None:
        assert reply.format_error is None
    else:
        assert expected in reply.format_error


def test_price_table_entries_all_name_a_date_and_a_source():
    table = load_price_table()
    assert {"anthropic", "openai"} <= set(table)
    for models in table.values():
        for entry in models.values():
            assert entry["as_of"] and entry["source"].strip()
            assert entry["input"] >= 0 and entry["output"] >= 0


@pytest.mark.parametrize(
    ("provider", "model", "expected_input"),
    [
        ("anthropic", "claude-sonnet-4-5", 3.0),
        ("anthropic", "claude-sonnet-4-5-20250929", 3.0),  # dated snapshot -> base name
        ("openai", "gpt-5.5", 5.0),
        ("openai", "glm-5.2", 1.4),  # GLM behind an OpenAI-compatible endpoint, priced under zai
        ("openai", "my-local-sglang-model", None),
    ],
)
def test_price_lookup(provider, model, expected_input):
    price = price_for(AgentSpec(provider=provider, model=model))
    assert (price.input if price else None) == expected_input


def test_task_price_overrides_the_table():
    override = PriceSpec(input=0.1, output=0.2)
    assert price_for(AgentSpec(provider="anthropic", model="claude-sonnet-4-5", price=override)) == override


def test_prefix_lookup_prefers_the_longest_name():
    table = {"x": {"gpt-5": {"input": 1}, "gpt-5.4-mini": {"input": 2}, "gpt-5.4": {"input": 3}}}
    assert price_entry("x", "gpt-5.4-mini-2026-03-01", table) == {"input": 2}


def test_cost_arithmetic_and_unknown_price():
    usage = Usage(input_tokens=1_000_000, output_tokens=100_000, cache_read_tokens=2_000_000, cache_write_tokens=10)
    price = PriceSpec(input=2.0, output=10.0, cache_read=0.2)  # no cache_write rate: billed as input
    assert cost_usd(usage, price) == pytest.approx(2.0 + 1.0 + 0.4 + 10 * 2.0 / 1e6)
    assert cost_usd(usage, None) is None


def test_unknown_provider_lists_the_valid_ones():
    with pytest.raises(ValueError) as caught:
        make_model(AgentSpec(provider="gemini", model="x"))
    for name in MODELS:
        assert name in str(caught.value)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (AgentSpec(provider="anthropic", model="claude-sonnet-4-5"), "ANTHROPIC_API_KEY"),
        (AgentSpec(provider="openai", model="gpt-5.5"), "OPENAI_API_KEY"),
        (AgentSpec(provider="openai", model="glm-5.2", api_key_env="ZAI_API_KEY", base_url="http://x"), "ZAI_API_KEY"),
        (AgentSpec(provider="anthropic"), "agent.model is required"),
        (AgentSpec(provider="replay"), "replay:PATH"),
        (AgentSpec(provider="scripted"), "scripted:PATH"),
    ],
)
def test_make_model_errors_name_what_to_fix(spec, expected, monkeypatch):
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "ZAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ModelError, match=expected):
        make_model(spec)


def test_a_local_endpoint_needs_no_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    model = make_model(AgentSpec(provider="openai", model="default", base_url="http://127.0.0.1:30000/v1"))
    assert model.name == "openai:default"


def test_make_model_scripted_from_a_file(tmp_path: Path):
    script = tmp_path / "script.yaml"
    script.write_text("- text: hi\n")
    model = make_model(AgentSpec(provider=f"scripted:{script}"))
    assert isinstance(model, ScriptedModel)
    assert model.step([Message("user", "go")], TOOLS).text == "hi"
