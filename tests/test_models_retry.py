"""The retry table against the installed SDKs, Retry-After parsing, and the retry loop's decisions."""

from __future__ import annotations

import email.utils
import importlib
import inspect
import time
from types import SimpleNamespace

import pytest

from porter.models import ModelError
from porter.models.retry import (
    ERROR_TABLE,
    GENERIC_ENTRIES,
    RetryPolicy,
    call_with_retries,
    policy_for,
    retry_after_s,
)

SDKS = ["anthropic", "openai"]


def exported_api_errors(sdk) -> list[type]:
    return [
        value
        for value in list(vars(sdk).values())  # openai adds lazy attributes while we look
        if inspect.isclass(value) and issubclass(value, sdk.APIError) and value is not sdk.APIError
    ]


def all_api_errors(root: type) -> set[type]:
    found: set[type] = set()
    pending = [root]
    while pending:
        for subclass in pending.pop().__subclasses__():
            if subclass not in found:
                found.add(subclass)
                pending.append(subclass)
    return found


@pytest.mark.parametrize("sdk_name", SDKS)
def test_every_exported_sdk_error_is_in_the_table_by_name(sdk_name):
    sdk = importlib.import_module(sdk_name)
    missing = sorted(cls.__name__ for cls in exported_api_errors(sdk) if cls.__name__ not in ERROR_TABLE)
    assert missing == [], f"classify these {sdk_name} errors in porter/models/retry.py ERROR_TABLE: {missing}"


@pytest.mark.parametrize("sdk_name", SDKS)
def test_every_sdk_error_subclass_resolves_to_a_specific_policy(sdk_name):
    """Deep subclasses (organisation and beta endpoints) inherit a policy from a listed parent."""
    sdk = importlib.import_module(sdk_name)
    generic = []
    for cls in all_api_errors(sdk.APIError):
        if cls.__name__ in GENERIC_ENTRIES:
            continue
        nearest = next(base.__name__ for base in cls.__mro__ if base.__name__ in ERROR_TABLE)
        if nearest in GENERIC_ENTRIES:
            generic.append(cls.__name__)
    assert sorted(generic) == []


def status_error(sdk_name: str, class_name: str, status: int, headers: dict | None = None) -> Exception:
    sdk = importlib.import_module(sdk_name)
    httpx = importlib.import_module("httpx2")
    request = httpx.Request("POST", "http://127.0.0.1:9/v1/messages")
    response = httpx.Response(status, headers=headers or {}, request=request)
    return getattr(sdk, class_name)(f"HTTP {status}", response=response, body=None)


@pytest.mark.parametrize("sdk_name", SDKS)
@pytest.mark.parametrize(
    ("class_name", "status", "retry"),
    [
        ("RateLimitError", 429, True),
        ("InternalServerError", 500, True),
        ("InternalServerError", 502, True),
        ("ConflictError", 409, True),
        ("BadRequestError", 400, False),
        ("AuthenticationError", 401, False),
        ("PermissionDeniedError", 403, False),
        ("NotFoundError", 404, False),
        ("UnprocessableEntityError", 422, False),
        ("APIStatusError", 418, False),
        ("APIStatusError", 599, True),
    ],
)
def test_status_errors_are_classified(sdk_name, class_name, status, retry):
    policy = policy_for(status_error(sdk_name, class_name, status))
    assert policy is not None and policy.retry is retry


def test_errors_that_are_not_the_sdks_are_not_ours():
    assert policy_for(ValueError("bug in porter")) is None
    with pytest.raises(ValueError, match="bug in porter"):
        call_with_retries(lambda: (_ for _ in ()).throw(ValueError("bug in porter")), RetryPolicy(), {})


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "0.5"}, 0.5),
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),
        ({"retry-after": "soon"}, None),
        ({}, None),
    ],
)
def test_retry_after_header_forms(headers, expected):
    error = SimpleNamespace(response=SimpleNamespace(headers=headers))
    assert retry_after_s(error) == expected


def test_retry_after_http_date():
    moment = email.utils.formatdate(time.time() + 30, usegmt=True)
    waited = retry_after_s(SimpleNamespace(response=SimpleNamespace(headers={"retry-after": moment})))
    assert 25 <= waited <= 31


def test_context_fills_the_advice_of_a_non_retryable_error():
    error = status_error("openai", "NotFoundError", 404)
    calls = []

    def call():
        calls.append(1)
        raise error

    with pytest.raises(ModelError) as caught:
        call_with_retries(call, RetryPolicy(sleep=lambda s: None), {"provider": "openai", "model": "glm-5.2"})
    assert "model glm-5.2" in str(caught.value) and "agent.model" in str(caught.value)
    assert len(calls) == 1
