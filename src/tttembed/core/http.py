"""HTTP plumbing shared by the OpenAI-compatible backends (``openai:`` embedder, ``llm:`` judge).

* :class:`RetryPolicy`: exponential backoff with full jitter on 429, 500/502/503/504,
  timeouts and connection errors; ``Retry-After`` (seconds or HTTP date) is honoured,
  capped by ``max_delay``. Any other 4xx, and any redirect (3xx: never followed, so the
  key is never sent elsewhere), fails at once. A total ``deadline`` (default
  ``3 x timeout + max_delay``) bounds all attempts and waits of one request together.
* :class:`JSONClient`: POSTs JSON to one base URL under that policy. The API key is read
  from the environment variable *named* by ``api_key_env``; it is sent as a Bearer token
  and never appears in a repr, a log line or an exception (it is redacted from response
  bodies quoted in errors *before* they are cut to :data:`EXCERPT_CHARS`). No key set is fine for local servers: no Authorization header.
* :func:`map_ordered`: bounded concurrency over a thread pool, results in input order.
"""

from __future__ import annotations

import email.utils
import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from tttembed.core.errors import BackendError, ConfigError

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
EXCERPT_CHARS = 200


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry a transient failure.

    ``max_retries`` retries follow the first attempt (``max_retries + 1`` attempts in all).
    Attempt ``a`` (0-based) waits ``uniform(0, min(max_delay, base_delay * 2**a))``
    unless the server sent ``Retry-After``. ``timeout`` (seconds) bounds each attempt;
    ``deadline`` (seconds, default ``3 * timeout + max_delay``: 210 s with the defaults)
    bounds one request with all its attempts and waits: a hung server fails within it.
    """

    max_retries: int = 5
    base_delay: float = 0.5
    max_delay: float = 30.0
    timeout: float = 60.0
    deadline: float | None = None

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ConfigError(f"max_retries must be >= 0, got {self.max_retries}")
        if self.base_delay < 0 or self.max_delay < 0:
            raise ConfigError("base_delay and max_delay must be >= 0")
        if self.timeout <= 0:
            raise ConfigError(f"timeout must be > 0 seconds, got {self.timeout}")
        if self.deadline is not None and self.deadline <= 0:
            raise ConfigError(f"deadline must be > 0 seconds, got {self.deadline}")

    @property
    def total_deadline(self) -> float:
        """Seconds one request may take with all its attempts and waits."""
        if self.deadline is not None:
            return float(self.deadline)
        return 3.0 * self.timeout + self.max_delay

    def backoff(self, attempt: int, rng: random.Random | None = None) -> float:
        """Full-jitter delay before retry number ``attempt + 1``."""
        cap = min(self.max_delay, self.base_delay * (2.0 ** attempt))
        return (random if rng is None else rng).uniform(0.0, cap)

    def with_overrides(self, *, max_retries: int | None = None, timeout: float | None = None,
                       deadline: float | None = None) -> RetryPolicy:
        return RetryPolicy(
            max_retries=self.max_retries if max_retries is None else int(max_retries),
            base_delay=self.base_delay,
            max_delay=self.max_delay,
            timeout=self.timeout if timeout is None else float(timeout),
            deadline=self.deadline if deadline is None else float(deadline),
        )


#: spec schemes of the HTTP backends, which take ``timeout`` and ``max_retries``
HTTP_SCHEMES = ("openai", "llm")


def http_options(spec: str, timeout: float | None = None,
                 max_retries: int | None = None) -> dict[str, Any]:
    """``timeout`` / ``max_retries`` options for an HTTP backend spec (given ones only);
    nothing for the other backends, which make no HTTP requests."""
    if spec.partition(":")[0] not in HTTP_SCHEMES:
        return {}
    return {k: v for k, v in (("timeout", timeout), ("max_retries", max_retries))
            if v is not None}


def retry_after_seconds(value: str | None, *, now: float | None = None) -> float | None:
    """Parse a ``Retry-After`` header (delta seconds or HTTP date); None when absent/bad."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


def split_model_url(rest: str, scheme: str) -> tuple[str, str]:
    """``MODEL[@BASE_URL]`` -> (model, base_url), split on the last '@' before http(s)://."""
    cut = max(rest.rfind("@http://"), rest.rfind("@https://"))
    model, base_url = (rest[:cut], rest[cut + 1:]) if cut >= 0 else (rest, DEFAULT_BASE_URL)
    if not model.strip():
        raise ConfigError(
            f"{scheme}: spec needs a model name, e.g. '{scheme}:MODEL@http://127.0.0.1:8000/v1'"
        )
    return model, base_url.rstrip("/")


#: the hint every "too slow / unreachable" error gives: flags of the CLI, options of the API
SLOW_HINT = ("is the server running at that URL? if it is slow, raise --timeout or "
             "--max-retries (API options timeout, max_retries, deadline)")


def _one_line(text: str, limit: int = EXCERPT_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + "..."


def redact(text: str, secrets: Sequence[str | None]) -> str:
    """``text`` with every non-empty secret replaced by ``***`` (call before truncating)."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def excerpt(text: str, secrets: Sequence[str | None], limit: int = EXCERPT_CHARS) -> str:
    """A one-line excerpt of a server's answer: secrets redacted first, then cut."""
    return _one_line(redact(text, secrets), limit)


class JSONClient:
    """POST JSON to ``base_url + path`` with retries; thread-safe; counts successes."""

    def __init__(self, base_url: str, *, api_key_env: str | None = DEFAULT_API_KEY_ENV,
                 policy: RetryPolicy | None = None,
                 sleep: Callable[[float], None] | None = None,
                 rng: random.Random | None = None,
                 transport: httpx.BaseTransport | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"base URL must start with http:// or https://, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.api_key_env = api_key_env
        self.policy = policy or RetryPolicy()
        self._sleep = time.sleep if sleep is None else sleep
        self._rng = random.Random() if rng is None else rng
        self._clock = time.monotonic if clock is None else clock
        self._key = os.environ.get(api_key_env) if api_key_env else None
        self._client = httpx.Client(timeout=self.policy.timeout, transport=transport)
        self._lock = threading.Lock()
        self.calls = 0

    def __repr__(self) -> str:
        key = "set" if self._key else "unset"
        return (f"JSONClient(base_url={self.base_url!r}, api_key_env={self.api_key_env!r} "
                f"[{key}], policy={self.policy!r})")

    def close(self) -> None:
        self._client.close()

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        return headers

    def redact(self, text: str) -> str:
        """``text`` with the API key replaced by ``***`` (before any truncation)."""
        return redact(text, [self._key])

    def _excerpt(self, text: str, limit: int = EXCERPT_CHARS) -> str:
        return excerpt(text, [self._key], limit) or "(empty body)"

    def post(self, path: str, payload: dict[str, Any]) -> Any:
        """POST ``payload`` as JSON; return the decoded JSON body or raise BackendError.

        Time is accounted as the measured duration of each attempt plus the waits asked
        for between attempts; no attempt or wait goes past the policy's total deadline.
        """
        url = self.base_url + "/" + path.lstrip("/")
        policy = self.policy
        deadline = policy.total_deadline
        spent = 0.0
        reason = ""
        attempts = 0
        for attempt in range(policy.max_retries + 1):
            attempts += 1
            budget = min(policy.timeout, max(deadline - spent, 0.001))
            started = self._clock()
            try:
                response = self._client.post(url, json=payload, headers=self._headers(),
                                             timeout=budget)
            except httpx.TimeoutException:
                reason = f"timed out after {budget:g} s"
                response = None
            except httpx.TransportError as exc:
                reason = "connection failed: " + self._excerpt(str(exc) or type(exc).__name__)
                response = None
            spent += self._clock() - started
            delay: float | None = None
            if response is not None:
                if response.status_code < 300:
                    return self._decode(url, response)
                reason, delay = self._failure(url, response)
            if attempt == policy.max_retries:
                break
            if delay is None:
                delay = policy.backoff(attempt, self._rng)
            if spent + delay >= deadline:
                reason += f"; the total deadline of {deadline:g} s is spent"
                break
            log.warning("POST %s failed (%s); retry %d/%d in %.2f s", url, reason,
                        attempt + 1, policy.max_retries, delay)
            self._sleep(delay)
            spent += delay
        raise BackendError(
            f"POST {url} failed after {attempts} attempt{'s' if attempts > 1 else ''}; "
            f"last error: {reason} ({SLOW_HINT})"
        )

    def _failure(self, url: str, response: httpx.Response) -> tuple[str, float | None]:
        """(reason, Retry-After delay) of a retryable answer; raise for the others."""
        status = response.status_code
        if status < 400:
            where = self.redact(response.headers.get("Location", "") or "(no Location)")
            raise BackendError(
                f"POST {url} answered with a redirect (HTTP {status}) to {_one_line(where)}; "
                "redirects are not followed (the API key would go along): use the final "
                "URL as the base URL")
        text = self._excerpt(response.text)
        if status not in RETRY_STATUSES:
            fix = "check the model name and the request"
            if status in (401, 403):
                fix = (f"check the API key in ${self.api_key_env}" if self.api_key_env
                       else "set api_key_env to the variable that holds the API key")
            raise BackendError(f"POST {url} returned HTTP {status}: {text} "
                               f"(not retried; {fix})")
        hint = retry_after_seconds(response.headers.get("Retry-After"))
        return f"HTTP {status}: {text}", (None if hint is None
                                          else min(hint, self.policy.max_delay))

    def _decode(self, url: str, response: httpx.Response) -> Any:
        try:
            body = json.loads(response.content)
        except (ValueError, UnicodeDecodeError):
            raise BackendError(
                f"POST {url} returned malformed JSON (HTTP {response.status_code}): "
                f"{self._excerpt(response.text, 120)} "
                "(is the base URL an OpenAI-compatible endpoint?)"
            ) from None
        with self._lock:
            self.calls += 1
        return body


def map_ordered(fn: Callable[[T], R], items: Sequence[T], max_concurrency: int) -> list[R]:
    """``[fn(x) for x in items]`` with at most ``max_concurrency`` calls in flight.

    Results keep the input order. The first exception is raised once running calls end;
    calls not yet started are cancelled.
    """
    if max_concurrency < 1:
        raise ConfigError(f"max_concurrency must be >= 1, got {max_concurrency}")
    items = list(items)
    if max_concurrency == 1 or len(items) <= 1:
        return [fn(x) for x in items]
    pool = ThreadPoolExecutor(max_workers=min(max_concurrency, len(items)),
                              thread_name_prefix="tttembed-http")
    try:
        futures = [pool.submit(fn, x) for x in items]
        return [f.result() for f in futures]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
