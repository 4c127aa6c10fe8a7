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
    STATUS_POLICY,
    RetryPolicy,
    call_with_retries,
    policy_for,
    policy_for_class,
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
def test_every_sdk_error_class_resolves_to_a_decision_through_its_hierarchy(sdk_name):
    """Every error class the installed SDK exports, and every subclass of APIError it defines, is
    decided by its kind or status, never left unclassified or falling to "unrecognised"."""
    sdk = importlib.import_module(sdk_name)
    classes = set(exported_api_errors(sdk)) | all_api_errors(sdk.APIError)
    unrecognised = policy_for_class(sdk.APIError)
    undecided = sorted(cls.__name__ for cls in classes if policy_for_class(cls) in (None, unrecognised))
    assert undecided == []


@pytest.mark.parametrize("sdk_name", SDKS)
def test_a_subclass_added_by_a_later_release_gets_its_kinds_policy(sdk_name):
    sdk = importlib.import_module(sdk_name)
    new_503 = type("StorageWarmingUpError", (sdk.InternalServerError,), {"status_code": 503})
    new_400 = type("SomeOrganisationSettingError", (sdk.BadRequestError,), {})
    new_timeout = type("SlowLinkError", (sdk.APITimeoutError,), {})
    assert policy_for_class(new_503).retry is True
    assert policy_for_class(new_400).retry is False
    assert policy_for_class(new_timeout).retry is True
    assert policy_for_class(new_timeout).advice.startswith("no answer")


def test_a_spend_limit_dressed_as_a_429_is_not_retried():
    anthropic = importlib.import_module("anthropic")
    assert policy_for_class(anthropic.RateLimitError).retry is True
    assert policy_for_class(anthropic.ContractSpendLimitReachedError).retry is False


@pytest.mark.parametrize("status", sorted(STATUS_POLICY))
def test_each_listed_status_decides_a_generic_status_error(status):
    assert policy_for(status_error("openai", "APIStatusError", status)) == STATUS_POLICY[status]


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
