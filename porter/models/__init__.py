"""The agent's brain, behind one protocol: pick a model by short name, get `step(messages, tools) -> Reply`.

Covers the registry (`MODELS`: short name -> factory) and `make_model(agent_spec, run_dir, task)`, which
reads the API key from the environment variable the task names and wires prices and options into the
adapter. Provider strings: `anthropic`, `openai` (any OpenAI-compatible `base_url`), `playbook` (rules,
no network; `playbook+PROVIDER` hands over to PROVIDER where no rule applies), `replay:PATH` (a
transcript or run directory), `scripted:PATH` (a YAML/JSON list of replies), `file:DIR` and `human`
(another program or a person answers each request). Does not cover the loop or the transcript.
A factory is `factory(spec, argument, run_dir, task) -> Model`, `argument` being what follows the
first `:` of the provider string (or None).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from porter.models.base import (
    Message,
    Model,
    ModelError,
    RawToolCall,
    Reply,
    ToolCall,
    ToolSpec,
    Usage,
    validate_reply,
)
from porter.models.prices import cost_usd, price_for
from porter.models.replay import (
    ReplayDivergence,
    ReplayModel,
    messages_since_last_reply,
    observation_digest,
    observation_excerpt,
)
from porter.models.retry import RetryPolicy
from porter.models.scripted import ScriptedModel
from porter.task import AgentSpec, Task

__all__ = [
    "MODELS",
    "Message",
    "Model",
    "ModelError",
    "RawToolCall",
    "ReplayDivergence",
    "ReplayModel",
    "Reply",
    "RetryPolicy",
    "ScriptedModel",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "cost_usd",
    "make_model",
    "messages_since_last_reply",
    "observation_digest",
    "observation_excerpt",
    "price_for",
    "validate_reply",
]

DEFAULT_KEY_ENV = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
NO_KEY_NEEDED = "porter-no-key"  # sent to a base_url when no key is configured: local servers do not check


def api_key(spec: AgentSpec, provider: str) -> tuple[str, str]:
    """(variable name, key) for `provider`; a missing key is a ModelError naming the variable."""
    env_name = spec.api_key_env or DEFAULT_KEY_ENV[provider]
    value = os.environ.get(env_name, "")
    if value:
        return env_name, value
    if spec.api_key_env is None and spec.base_url:
        return env_name, NO_KEY_NEEDED
    raise ModelError(
        f"provider {provider!r} needs an API key: set the environment variable {env_name}"
        f"{'' if spec.api_key_env else ' (or name another variable in agent.api_key_env)'}"
    )


def _adapter_options(spec: AgentSpec, provider: str) -> dict:
    if not spec.model:
        example = "claude-sonnet-4-5" if provider == "anthropic" else "gpt-5.5, or glm-5.2 with a base_url"
        raise ModelError(f"agent.model is required for provider {provider!r} (e.g. {example})")
    key_env, key = api_key(spec, provider)
    # Sent only when the task sets it: recent models reject any temperature but their default.
    temperature = spec.temperature if "temperature" in spec.model_fields_set else None
    return {
        "model": spec.model,
        "api_key": key,
        "base_url": spec.base_url,
        "key_env": key_env,
        "temperature": temperature,
        "max_output_tokens": spec.max_output_tokens,
        "price": price_for(spec),
        "timeout_s": spec.request_timeout_s,
    }


def _sdk(spec: AgentSpec, argument: str | None, run_dir: Path | None, task: Task | None) -> Model:
    provider = spec.provider.partition(":")[0]  # anthropic or openai (make_model's name)
    if provider == "anthropic":  # an SDK's import is slow; pay it only when used
        from porter.models.anthropic import AnthropicModel as Adapter
    else:
        from porter.models.openai import OpenAIModel as Adapter
    return Adapter(**_adapter_options(spec, provider))


def _replay(spec: AgentSpec, argument: str | None, run_dir: Path | None, task: Task | None) -> Model:
    if not argument:
        raise ModelError(
            "provider replay needs a transcript: write `replay:PATH` (a transcript.jsonl or run directory)"
        )
    return ReplayModel(argument)


def _scripted(spec: AgentSpec, argument: str | None, run_dir: Path | None, task: Task | None) -> Model:
    if not argument:
        raise ModelError("provider scripted needs a script: write `scripted:PATH` (a YAML or JSON list of replies)")
    return ScriptedModel(argument)


def _file(spec: AgentSpec, argument: str | None, run_dir: Path | None, task: Task | None) -> Model:
    from porter.models.file import FileModel

    if not argument:
        raise ModelError("provider file needs a directory: write `file:DIR` (requests and replies go there)")
    return FileModel(argument, timeout_s=spec.request_timeout_s)


def _human(spec: AgentSpec, argument: str | None, run_dir: Path | None, task: Task | None) -> Model:
    from porter.models.file import HumanModel

    return HumanModel()


def _playbook(spec: AgentSpec, argument: str | None, run_dir: Path | None, task: Task | None) -> Model:
    from porter.models.playbook import PlaybookModel

    if task is None:
        raise ModelError("the playbook reads the task: pass it to make_model")
    handover = spec.provider.partition("+")[2]
    llm = make_model(spec.model_copy(update={"provider": handover}), run_dir, task) if handover else None
    return PlaybookModel(task, llm)


Factory = Callable[[AgentSpec, str | None, Path | None, Task | None], Model]
MODELS: dict[str, Factory] = {
    "anthropic": _sdk,
    "openai": _sdk,
    "playbook": _playbook,
    "replay": _replay,
    "scripted": _scripted,
    "file": _file,
    "human": _human,
}


def make_model(spec: AgentSpec, run_dir: Path | None = None, task: Task | None = None) -> Model:
    """The model `spec.provider` names; unknown names fail with the list of valid ones."""
    first = spec.provider.partition("+")[0]
    name, _, argument = first.partition(":")
    factory = MODELS.get(name)
    if factory is None:
        raise ValueError(f"unknown agent.provider {spec.provider!r}; valid providers: {', '.join(sorted(MODELS))}")
    if first != spec.provider and name != "playbook":
        raise ValueError(f"agent.provider {spec.provider!r}: only the playbook hands over (playbook+PROVIDER)")
    return factory(spec, argument or None, run_dir, task)
