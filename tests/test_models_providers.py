"""The Anthropic and OpenAI adapters with the REAL SDK clients over HTTP, against tests/fake_provider.py."""

from __future__ import annotations

import json
import logging

import pytest
from fake_provider import Action, FakeProvider

from porter.models import Message, ModelError, RetryPolicy, ToolCall, ToolSpec, make_model
from porter.models.anthropic import AnthropicModel
from porter.models.openai import OpenAIModel
from porter.task import AgentSpec, PriceSpec

PROVIDERS = ["anthropic", "openai"]
SECRET = "sk-test-Zq8xW2vN4mK7pL1rT5yU"
PRICE = PriceSpec(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)
TOOLS = [
    ToolSpec("bash", "Run a shell command.", {"type": "object", "properties": {"command": {"type": "string"}}}),
    ToolSpec("finish", "Stop.", {"type": "object", "properties": {"reason": {"type": "string"}}}),
]
FIRST_TURN = [Message("system", "You port models."), Message("user", "Serve GLM-5.2.")]


class RecordedSleeps(list):
    def __call__(self, seconds: float) -> None:
        self.append(round(seconds, 3))


@pytest.fixture
def fake():
    with FakeProvider() as server:
        yield server


@pytest.fixture
def sleeps() -> RecordedSleeps:
    return RecordedSleeps()


def build(provider: str, fake: FakeProvider, sleeps: RecordedSleeps, timeout_s: float = 5.0, attempts: int = 3):
    retry = RetryPolicy(
        max_attempts=attempts, initial_wait_s=0.01, max_wait_s=0.05, retry_after_cap_s=2.0, sleep=sleeps
    )
    common = {"api_key": SECRET, "price": PRICE, "timeout_s": timeout_s, "retry": retry}
    if provider == "anthropic":
        return AnthropicModel("claude-sonnet-4-5", base_url=fake.url, **common)
    return OpenAIModel("glm-5.2", base_url=fake.url + "/v1", key_env="GLM_API_KEY", **common)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_tool_call_round_trip_usage_and_cost(provider, fake, sleeps):
    model = build(provider, fake, sleeps)
    fake.reply("Looking.", [("bash", {"command": "ls /models"})], input=1000, output=200, cache_read=4000)
    reply = model.step(FIRST_TURN, TOOLS)
    assert reply.format_error is None
    assert reply.text == "Looking."
    assert [(call.name, call.arguments) for call in reply.tool_calls] == [("bash", {"command": "ls /models"})]
    assert (reply.usage.input_tokens, reply.usage.output_tokens, reply.usage.cache_read_tokens) == (1000, 200, 4000)
    assert reply.usage.cost_usd == pytest.approx((1000 * 3.0 + 200 * 15.0 + 4000 * 0.3) / 1e6)

    history = FIRST_TURN + [
        Message("assistant", reply.text, tool_calls=reply.tool_calls),
        Message("tool", "GLM-5.2-MXFP4", tool_call_id=reply.tool_calls[0].id, name="bash"),
    ]
    fake.reply("", [("finish", {"reason": "done"})], input=50, output=10)
    assert model.step(history, TOOLS).tool_calls[0].name == "finish"
    assert_wire_format(provider, fake.requests[-1].body, reply.tool_calls[0])


def assert_wire_format(provider: str, body: dict, call: ToolCall) -> None:
    messages = body["messages"]
    if provider == "anthropic":
        assert body["system"][0]["text"] == "You port models."
        assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
        assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
        assert [message["role"] for message in messages] == ["user", "assistant", "user"]
        tool_use = messages[1]["content"][-1]
        assert (tool_use["type"], tool_use["id"], tool_use["input"]) == ("tool_use", call.id, call.arguments)
        result = messages[2]["content"][0]
        assert (result["type"], result["tool_use_id"], result["content"]) == ("tool_result", call.id, "GLM-5.2-MXFP4")
        assert result["cache_control"] == {"type": "ephemeral"}  # the conversation so far is cached
        assert "temperature" not in body  # not set in the task: left to the model's default
    else:
        assert [message["role"] for message in messages] == ["system", "user", "assistant", "tool"]
        assert messages[2]["tool_calls"][0]["function"] == {"name": "bash", "arguments": '{"command": "ls /models"}'}
        assert (messages[3]["tool_call_id"], messages[3]["content"]) == (call.id, "GLM-5.2-MXFP4")
        assert body["tools"][0]["function"]["name"] == "bash"
        assert body["max_tokens"] == 4096  # a custom base_url gets the field every compatible server knows


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(("retry_after", "expected_wait"), [("0.25", 0.25), ("3600", 2.0)])
def test_429_honours_retry_after_with_a_cap(provider, retry_after, expected_wait, fake, sleeps):
    model = build(provider, fake, sleeps)
    fake.fail(429, "slow down", headers={"retry-after": retry_after}).reply("after the wait")
    assert model.step(FIRST_TURN, TOOLS).text == "after the wait"
    assert sleeps == [expected_wait]
    assert len(fake.requests) == 2


@pytest.mark.parametrize("provider", PROVIDERS)
def test_500_then_success_is_retried_with_backoff(provider, fake, sleeps):
    model = build(provider, fake, sleeps)
    fake.fail(500, "boom").fail(503, "busy").reply("recovered")
    assert model.step(FIRST_TURN, TOOLS).text == "recovered"
    assert sleeps == [0.01, 0.02]
    assert len(fake.requests) == 3


@pytest.mark.parametrize("provider", PROVIDERS)
def test_persistent_5xx_gives_up_with_a_model_error(provider, fake, sleeps):
    model = build(provider, fake, sleeps, attempts=3)
    fake.fail(500).fail(500).fail(500).reply("never reached")
    with pytest.raises(ModelError, match="gave up after 3 attempts"):
        model.step(FIRST_TURN, TOOLS)
    assert len(fake.requests) == 3


@pytest.mark.parametrize(("provider", "key_env"), [("anthropic", "ANTHROPIC_API_KEY"), ("openai", "GLM_API_KEY")])
def test_401_is_not_retried_and_names_the_variable(provider, key_env, fake, sleeps):
    model = build(provider, fake, sleeps)
    fake.fail(401, "invalid api key").reply("never reached")
    with pytest.raises(ModelError) as caught:
        model.step(FIRST_TURN, TOOLS)
    assert key_env in str(caught.value) and "rejected" in str(caught.value)
    assert len(fake.requests) == 1 and sleeps == []


def test_anthropic_spend_limit_429_is_not_retried(fake, sleeps):
    model = build("anthropic", fake, sleeps)
    fake.fail(429, "spend limit reached", code="enforced_spend_limit_reached").reply("never reached")
    with pytest.raises(ModelError, match="spend limit"):
        model.step(FIRST_TURN, TOOLS)
    assert len(fake.requests) == 1


@pytest.mark.parametrize("provider", PROVIDERS)
def test_slow_reply_times_out_and_is_retried(provider, fake, sleeps):
    model = build(provider, fake, sleeps, timeout_s=0.3)
    fake.push(Action(text="too late", delay_s=1.0)).reply("in time")
    assert model.step(FIRST_TURN, TOOLS).text == "in time"
    assert len(fake.requests) == 2


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(
    ("calls", "expected"),
    [
        ([("bash", '{"command": "ls",')], "not valid JSON"),
        ([("rm_rf", {"path": "/"})], "unknown tool `rm_rf`"),
        ([], "the reply was empty"),
    ],
)
def test_malformed_replies_become_format_errors(provider, calls, expected, fake, sleeps):
    model = build(provider, fake, sleeps)
    fake.push(Action(tool_calls=calls))
    reply = model.step(FIRST_TURN, TOOLS)
    assert reply.tool_calls == []
    assert expected in reply.format_error


@pytest.mark.parametrize("provider", PROVIDERS)
def test_truncated_reply_says_so(provider, fake, sleeps):
    model = build(provider, fake, sleeps)
    fake.push(Action(stop_reason="max_tokens" if provider == "anthropic" else "length"))
    assert "output token limit" in model.step(FIRST_TURN, TOOLS).format_error


@pytest.mark.parametrize("provider", PROVIDERS)
def test_api_key_reaches_the_server_and_nothing_else(provider, fake, sleeps, caplog):
    caplog.set_level(logging.DEBUG)
    model = build(provider, fake, sleeps)
    fake.fail(500, f"echoing your key {SECRET}").fail(401, f"bad key {SECRET}")
    with pytest.raises(ModelError) as caught:
        model.step(FIRST_TURN, TOOLS)
    sent = fake.requests[0].headers
    assert SECRET in (sent.get("x-api-key", "") + sent.get("authorization", ""))
    assert "retrying" in caplog.text
    assert SECRET not in caplog.text
    assert SECRET not in str(caught.value)


@pytest.mark.parametrize(
    ("provider", "path", "key_env"), [("anthropic", "", "PORTER_TEST_ANTHROPIC_KEY"), ("openai", "/v1", None)]
)
def test_make_model_reads_the_key_from_the_named_variable(provider, path, key_env, fake, monkeypatch):
    monkeypatch.setenv(key_env or "OPENAI_API_KEY", SECRET)
    spec = AgentSpec(provider=provider, model="claude-sonnet-4-5", base_url=fake.url + path, api_key_env=key_env)
    fake.reply("hello", input=10, output=5)
    reply = make_model(spec).step(FIRST_TURN, TOOLS)
    assert reply.text == "hello"
    assert reply.usage.cost_usd == pytest.approx((10 * 3.0 + 5 * 15.0) / 1e6)  # from prices.yaml
    assert SECRET in str(fake.requests[0].headers)


def test_explicit_temperature_is_sent(fake, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    spec = AgentSpec(provider="openai", model="glm-5.2", base_url=fake.url + "/v1", temperature=0.0)
    make_model(spec).step(FIRST_TURN, TOOLS)
    assert fake.requests[0].body["temperature"] == 0.0


def test_anthropic_thinking_blocks_go_back_with_their_turn(fake, sleeps):
    model = build("anthropic", fake, sleeps)
    fake.push(Action(thinking="The exclude list misses model.decoder.", tool_calls=[("bash", {"command": "ls"})]))
    reply = model.step(FIRST_TURN, TOOLS)
    assert [block["type"] for block in reply.thinking] == ["thinking"]
    history = FIRST_TURN + [reply.to_message(), Message("tool", "ok", tool_call_id=reply.tool_calls[0].id)]
    model.step(history, TOOLS)
    assistant_turn = fake.requests[-1].body["messages"][1]["content"]
    assert assistant_turn[0] == {
        "type": "thinking",
        "thinking": "The exclude list misses model.decoder.",
        "signature": "sig-0001",
    }
    assert assistant_turn[1]["type"] == "tool_use"


def test_openai_reasoning_content_is_kept_and_sent_back(fake, sleeps):
    model = build("openai", fake, sleeps)
    fake.push(Action(thinking="The shape is E=256, topk=8.", tool_calls=[("bash", {"command": "ls"})]))
    reply = model.step(FIRST_TURN, TOOLS)
    assert reply.reasoning == "The shape is E=256, topk=8."
    assert Message.from_dict(reply.to_message().to_dict()).reasoning == reply.reasoning  # survives state.json
    history = FIRST_TURN + [reply.to_message(), Message("tool", "ok", tool_call_id=reply.tool_calls[0].id)]
    model.step(history, TOOLS)
    assert fake.requests[-1].body["messages"][2]["reasoning_content"] == "The shape is E=256, topk=8."


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_truncated_reply_runs_none_of_its_calls(provider, fake, sleeps):
    model = build(provider, fake, sleeps)
    fake.push(
        Action(
            tool_calls=[("bash", {"command": "ls"})], stop_reason="max_tokens" if provider == "anthropic" else "length"
        )
    )
    reply = model.step(FIRST_TURN, TOOLS)
    assert reply.tool_calls == [] and reply.stop == "truncated"
    assert "none of its 1 tool call(s) ran. Make the next reply shorter" in reply.format_error


@pytest.mark.parametrize(("provider", "stop"), [("anthropic", "refusal"), ("openai", "content_filter")])
def test_a_refusal_is_a_stop(provider, stop, fake, sleeps):
    fake.push(Action(text="I can't help with that.", stop_reason=stop))
    assert build(provider, fake, sleeps).step(FIRST_TURN, TOOLS).stop == "refusal"


def test_anthropic_failed_tool_results_are_marked_as_errors(fake, sleeps):
    model = build("anthropic", fake, sleeps)
    calls = [ToolCall("t1", "bash", {"command": "ls"}), ToolCall("t2", "bash", {"command": "nope"})]
    history = FIRST_TURN + [
        Message("assistant", "", tool_calls=calls),
        Message("tool", "exit 0", tool_call_id="t1", facts={"ok": True}),
        Message("tool", "bash failed: no such command", tool_call_id="t2", facts={"ok": False}),
    ]
    fake.reply("done")
    model.step(history, TOOLS)
    results = fake.requests[-1].body["messages"][-1]["content"]
    assert [block.get("is_error") for block in results] == [None, True]
    assert "facts" not in json.dumps(fake.requests[-1].body)
