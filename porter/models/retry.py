"""Retries for provider calls: errors classified by kind, one tenacity helper.

Covers which errors of the `anthropic` and `openai` SDKs are worth retrying (rate limits, 5xx,
connection errors, timeouts) and which are not (bad request, auth, permissions, not found, spend
limits, context too long), what to tell the user about each, the backoff (Retry-After honoured,
capped) and the ModelError raised when a call cannot succeed, and `SdkModel`, what both adapters share: their
options, the SDK client, created with `max_retries=0` so this is the only retry layer, and the step that sends a
request through it and prices the reply's usage. Does not cover building the requests or reading the replies
(anthropic.py, openai.py).

An error is classified by what it is, not by what it is called: its class hierarchy gives its kind
(connection, timeout, response validation, HTTP status) and a status error is decided by its HTTP
status code. Both SDKs share the base names, so a subclass an SDK adds in a later release (a new 503
flavour, a new 400 for some organisation setting) gets its kind's policy with no change here. Only
classes whose status misleads (spend limits dressed as a 429) are named.
"""

from __future__ import annotations

import email.utils
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from porter.models.base import Message, ModelError, Reply, ToolSpec
from porter.models.prices import cost_usd
from porter.redaction import redact
from porter.task import PriceSpec

log = logging.getLogger("porter.models")
T = TypeVar("T")


@dataclass(frozen=True)
class ErrorPolicy:
    retry: bool
    advice: str  # may name {model}, {key_env}, {base_url}


_retry = functools.partial(ErrorPolicy, True)  # _retry(advice)
_stop = functools.partial(ErrorPolicy, False)

_AUTH = "the API key in {key_env} was rejected: check the variable holds a valid key for {base_url}"
_BILLING = "the account cannot pay for more requests: add credit or raise its spend limit in the provider console"
_TOO_LARGE = "the request is too large for the provider: the conversation outgrew its limit; start a new run"
_TRANSIENT = "the provider had a transient failure"
_BAD_REQUEST = (
    "the provider rejected the request; the message names the field. If it says the prompt is too long, "
    "the conversation outgrew {model}'s context window: use a model with a larger one or fewer max_steps; "
    "if it names temperature, remove agent.temperature from the task"
)

# Non-status kinds, by the SDKs' shared base-class names (nearest on the MRO wins).
KIND_POLICY: dict[str, ErrorPolicy] = {
    "APITimeoutError": _retry("no answer within the request timeout"),
    "APIConnectionError": _retry("could not connect to {base_url}: check the URL and that the server is up"),
    "APIResponseValidationError": _stop(
        "the reply does not follow the API schema: is {base_url} really an endpoint of this API?"
    ),
    "APIWebhookValidationError": _stop("a webhook payload failed validation (porter does not use webhooks)"),
    "APIError": _stop("the provider returned an error porter does not recognise"),
}
# HTTP status -> policy for every APIStatusError; 5xx not listed are transient, other 4xx are final.
STATUS_POLICY: dict[int, ErrorPolicy] = {
    400: _stop(_BAD_REQUEST),
    401: _stop(_AUTH),
    402: _stop(_BILLING),
    403: _stop("the key in {key_env} has no access to model {model}: check agent.model"),
    404: _stop("model {model} or the endpoint {base_url} does not exist: check agent.model and base_url"),
    408: _retry(_TRANSIENT),
    409: _retry(_TRANSIENT),
    412: _stop(_BAD_REQUEST),
    413: _stop(_TOO_LARGE),
    422: _stop(_BAD_REQUEST),
    429: _retry("rate limited by the provider"),
    431: _stop(_TOO_LARGE),
    499: _retry(_TRANSIENT),
    501: _stop("the endpoint does not implement this API call (501): check {base_url}"),
    529: _retry("the provider is overloaded"),
}
# The only names: classes whose status misleads. A spend limit answers 429 but waiting will not lift it.
MISLEADING_STATUS: dict[str, ErrorPolicy] = {
    "ContractSpendLimitReachedError": _stop(_BILLING),
    "EnforcedSpendLimitReachedError": _stop(_BILLING),
}


def status_policy(status: int | None) -> ErrorPolicy:
    if status in STATUS_POLICY:
        return STATUS_POLICY[status]
    if status is not None and status >= 500:
        return _retry(_TRANSIENT)
    return _stop(f"the provider answered with an unexpected HTTP status ({status or 'none'})")


def policy_for_class(cls: type, status: int | None = None) -> ErrorPolicy | None:
    """The policy of an error class (and, for status errors, the HTTP status it carried), or None
    for classes that are not the SDKs' API errors."""
    for base in cls.__mro__:
        name = base.__name__
        if name in MISLEADING_STATUS:
            return MISLEADING_STATUS[name]
        if name == "APIStatusError":
            class_status = getattr(cls, "status_code", None)
            return status_policy(status or (class_status if isinstance(class_status, int) else None))
        if name in KIND_POLICY:
            return KIND_POLICY[name]
    return None


def policy_for(error: BaseException) -> ErrorPolicy | None:
    """The policy of `error` by its kind and HTTP status, or None for errors that are not the SDKs'."""
    status = getattr(error, "status_code", None)
    return policy_for_class(type(error), status if isinstance(status, int) else None)


def is_retryable(error: BaseException) -> bool:
    policy = policy_for(error)
    return bool(policy and policy.retry)


@dataclass(frozen=True)
class RetryPolicy:
    """How hard to try. Tests shrink the waits; nothing else should need to."""

    max_attempts: int = 6
    initial_wait_s: float = 2.0
    max_wait_s: float = 60.0
    retry_after_cap_s: float = 120.0  # a server asking for longer than this gets this
    sleep: Callable[[float], None] = time.sleep  # tests record the waits instead of sleeping them


DEFAULT_RETRY = RetryPolicy()


def retry_after_s(error: BaseException) -> float | None:
    """Seconds the server asked us to wait (retry-after-ms, Retry-After seconds or HTTP date)."""
    response = getattr(error, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    milliseconds = headers.get("retry-after-ms")
    if milliseconds:
        try:
            return max(0.0, float(milliseconds) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        moment = email.utils.parsedate_to_datetime(value) if email.utils.parsedate_tz(value) else None
        return max(0.0, moment.timestamp() - time.time()) if moment else None


def _wait(policy: RetryPolicy) -> Callable[[RetryCallState], float]:
    def wait(state: RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome else None
        asked = retry_after_s(error) if error else None
        if asked is not None:
            return min(asked, policy.retry_after_cap_s)
        return min(policy.initial_wait_s * 2 ** (state.attempt_number - 1), policy.max_wait_s)

    return wait


def call_with_retries(call: Callable[[], T], policy: RetryPolicy, context: dict[str, str]) -> T:
    """Run `call`, retrying what the table says is transient; anything else becomes a ModelError.

    `context` fills the advice: provider, model, key_env, base_url.
    """

    def before_sleep(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0
        log.warning(
            "%s attempt %d failed (%s); retrying in %.1f s",
            context.get("provider", "model"),
            state.attempt_number,
            redact(_describe(error)),
            wait,
        )

    retrying = Retrying(
        stop=stop_after_attempt(policy.max_attempts),
        wait=_wait(policy),
        retry=retry_if_exception(is_retryable),
        before_sleep=before_sleep,
        sleep=policy.sleep,
        reraise=True,
    )
    try:
        return retrying(call)
    except Exception as error:
        known = policy_for(error)
        if known is None:
            raise
        raise model_error(error, known, context, policy.max_attempts if known.retry else 1) from None


def model_error(error: BaseException, policy: ErrorPolicy, context: dict[str, str], attempts: int) -> ModelError:
    fields = {"model": "?", "key_env": "?", "base_url": "?", **context}
    advice = policy.advice.format(**fields)
    gave_up = f" (gave up after {attempts} attempts)" if policy.retry else ""
    provider = context.get("provider", "model")
    return ModelError(redact(f"{provider}: {advice}{gave_up}. {_describe(error)}"))


def _describe(error: BaseException | None) -> str:
    if error is None:
        return "no error"
    status = getattr(error, "status_code", None)
    detail = " ".join(str(error).split())[:400]
    return f"{type(error).__name__}{f' (HTTP {status})' if status else ''}: {detail}"


class SdkModel:
    """The Model protocol over a provider's SDK: a subclass builds the request (`request(messages, tools)`), sends
    it with the SDK's call (`_create(request)`) and reads the response (`reply(response, tools)`)."""

    def __init__(
        self,
        sdk: Any,  # the `anthropic` or `openai` module
        client_class: type,
        model: str,
        api_key: str,
        *,
        base_url: str | None = None,
        key_env: str,
        temperature: float | None = None,
        max_output_tokens: int = 4096,
        price: PriceSpec | None = None,
        timeout_s: float = 600.0,
        retry: RetryPolicy = DEFAULT_RETRY,
    ):
        provider = sdk.__name__
        self.name = f"{provider}:{model}"
        self.model = model
        self.temperature = temperature
        self.max_output_tokens = max_output_tokens
        self.price = price
        self.retry = retry
        self._client = client_class(
            api_key=api_key,
            base_url=base_url,
            max_retries=0,
            timeout=timeout_s,
            http_client=sdk.DefaultHttpxClient(follow_redirects=False),  # the SDK's default follows them
        )
        self._context = dict(provider=provider, model=model, key_env=key_env, base_url=str(self._client.base_url))

    def step(self, messages: list[Message], tools: list[ToolSpec]) -> Reply:
        request = self.request(messages, tools)
        if self.temperature is not None:  # sent only when the task sets it: recent models reject any but their default
            request["temperature"] = self.temperature
        response = call_with_retries(lambda: self._create(request), self.retry, self._context)
        reply = self.reply(response, tools)
        reply.usage.cost_usd = cost_usd(reply.usage, self.price)
        return reply
