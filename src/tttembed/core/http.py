"""HTTP plumbing shared by the HTTP backends (``openai:`` embedder, ``llm:`` judge, ``rerank:``);
pacing and retries live in :mod:`tttembed.core.limits` (re-exported here).

* :class:`RetryPolicy`: exponential backoff with full jitter on 429, 500/502/503/504,
  timeouts and connection errors; ``Retry-After`` (seconds or HTTP date) is honoured,
  capped by ``max_delay``. Any other 4xx, and any redirect (3xx: never followed, so the
  key is never sent elsewhere), fails at once. A total ``deadline`` (default
  ``3 x timeout + max_delay``) bounds all attempts and waits of one request together.
* :class:`JSONClient`: POSTs JSON to one base URL under that policy. The API key is read
  from the environment variable *named* by ``api_key_env``; it is sent as a Bearer token
  and never appears in a repr, a log line or an exception (it is redacted from response
  bodies quoted in errors *before* they are cut to :data:`EXCERPT_CHARS`). No key set is fine for local servers: no Authorization header.
* :class:`RateLimiter`: ``rpm`` (requests per minute) and ``tpm`` (tokens per minute)
  pacing shared by every thread of one client, plus a client-wide pause when a server
  answers 429 with ``Retry-After`` (no thread starts a request before it has passed).
* :class:`JSONClient` also bounds the requests in flight (``concurrency``) with a
  semaphore held only while an attempt is on the wire (not during backoff waits).
* :func:`map_ordered`: bounded concurrency over a thread pool, results in input order;
  ``on_result`` sees each result as it arrives, and when a call fails the results that
  did arrive are attached to the raised exception as ``partial_results``.

Time accounting: the total deadline bounds one request's attempts and the waits between
them; the time a request queues for a free slot or for the rate limit is not counted (it
is not the server's fault, and a low ``rpm`` would otherwise fail every request).
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from tttembed.core.errors import BackendError, ConfigError
from tttembed.core.limits import (
    RETRY_STATUSES,
    RateLimiter,
    RetryPolicy,
    estimate_tokens,
    retry_after_seconds,
)

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_API_KEY_ENV", "DEFAULT_BASE_URL", "EXCERPT_CHARS", "HTTP_SCHEMES",
           "RETRY_STATUSES", "JSONClient", "RateLimiter", "RetryPolicy", "estimate_tokens",
           "HttpLimits", "excerpt", "map_ordered", "redact", "retry_after_seconds",
           "split_model_url"]

T = TypeVar("T")
R = TypeVar("R")

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"
EXCERPT_CHARS = 200


#: spec schemes of the HTTP backends, which take ``timeout``, ``max_retries``,
#: ``max_concurrency``, ``rpm`` and ``tpm``
HTTP_SCHEMES = ("openai", "llm", "rerank")


@dataclass(frozen=True)
class HttpLimits:
    """The settings of every HTTP backend that travel together (httpx ``Limits`` style):
    ``timeout`` seconds per request, ``max_retries`` per request, ``concurrency`` requests
    in flight, ``rpm`` requests per minute, ``tpm`` tokens per minute; None = the
    backend's default.

        >>> tt.learn(index, "data/scifact", scorer="rerank:MODEL@http://127.0.0.1:8000/v1",
        ...          limits=HttpLimits(timeout=30, concurrency=16))
    """

    timeout: float | None = None
    max_retries: int | None = None
    concurrency: int | None = None
    rpm: float | None = None
    tpm: float | None = None

    def options(self, spec: str) -> dict[str, Any]:
        """The backend options (``timeout`` / ``max_retries`` / ``max_concurrency`` /
        ``rpm`` / ``tpm``, given ones only) for ``spec``; nothing for a backend that makes
        no HTTP requests."""
        if spec.partition(":")[0] not in HTTP_SCHEMES:
            return {}
        given = (("timeout", self.timeout), ("max_retries", self.max_retries),
                 ("max_concurrency", self.concurrency), ("rpm", self.rpm), ("tpm", self.tpm))
        return {k: v for k, v in given if v is not None}


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


#: what the upstream is, per command whose HTTP limits are fixed (no --timeout there)
_UPSTREAM = {"serve": "the upstream embedder (the index's)", "loop": "the judge (--judge)"}


def for_command(exc: Exception, command: str, policy: RetryPolicy | None = None) -> Exception:
    """``exc`` with :data:`SLOW_HINT` (flags of the commands that have them) replaced by
    the hint true of ``command`` (``serve``: its ``--upstream-deadline``, ``policy`` the
    one its embedder runs; ``loop``: no option, the default :class:`RetryPolicy`); any
    other error is ``exc`` itself."""
    text = str(exc)
    if not isinstance(exc, BackendError) or SLOW_HINT not in text:
        return exc
    p = policy or RetryPolicy()
    bounds = (f"`tttembed {command}` waits at most {p.timeout:g} s an attempt and "
              f"{p.total_deadline:g} s a request with its {p.max_retries} retries")
    hint = (f"check that {_UPSTREAM[command]} at that URL is running and answers: {bounds}"
            + (" (--upstream-deadline sets the second)" if command == "serve"
               else ", bounds it has no option for"))
    return BackendError(text.replace(SLOW_HINT, hint))


def upstream_policy(deadline: float) -> RetryPolicy:
    """The retry policy of ``serve --upstream-deadline``: a search waits at most
    ``deadline`` s for the upstream embedder, all attempts and waits together (each
    attempt at most that too), instead of the default 210 s."""
    return RetryPolicy(timeout=min(RetryPolicy.timeout, deadline), deadline=deadline,
                       max_delay=min(RetryPolicy.max_delay, deadline / 4))


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
                 clock: Callable[[], float] | None = None,
                 concurrency: int | None = None, rpm: float | None = None,
                 tpm: float | None = None) -> None:
        if concurrency is not None and int(concurrency) < 1:
            raise ConfigError(f"concurrency must be >= 1, got {concurrency}")
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"base URL must start with http:// or https://, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.api_key_env = api_key_env
        self.policy = policy or RetryPolicy()
        self._sleep = time.sleep if sleep is None else sleep
        self._rng = random.Random() if rng is None else rng
        self._clock = time.monotonic if clock is None else clock
        self._key = os.environ.get(api_key_env) if api_key_env else None
        self.concurrency = None if concurrency is None else int(concurrency)
        # enough pooled connections for every request in flight (httpx keeps 100)
        pool = max(100, self.concurrency or 0)
        self._client = httpx.Client(timeout=self.policy.timeout, transport=transport,
                                    limits=httpx.Limits(max_connections=pool,
                                                        max_keepalive_connections=pool))
        self._slots = (None if self.concurrency is None
                       else threading.BoundedSemaphore(self.concurrency))
        self.limiter = RateLimiter(rpm, tpm, clock=clock, sleep=sleep)
        self._lock = threading.Lock()
        self.calls = 0
        self.tokens = 0  # usage.total_tokens reported by the server, summed

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

    def post(self, path: str, payload: dict[str, Any], *, tokens: int = 0) -> Any:
        """POST ``payload`` as JSON; return the decoded JSON body or raise BackendError.

        Time is accounted as the measured duration of each attempt plus the waits asked
        for between attempts; no attempt or wait goes past the policy's total deadline.
        ``tokens`` (an estimate) is charged to the ``tpm`` limit before each attempt and
        corrected from the answer's ``usage.total_tokens``.
        """
        url = self.base_url + "/" + path.lstrip("/")
        policy = self.policy
        deadline = policy.total_deadline
        spent = 0.0
        reason = ""
        attempts = 0
        slept_until = float("-inf")  # the end of the pauses this request asked for
        for attempt in range(policy.max_retries + 1):
            attempts += 1
            budget = min(policy.timeout, max(deadline - spent, 0.001))
            self.limiter.acquire(tokens, slept_until=slept_until)
            started = self._clock()
            response, reason = self._attempt(url, payload, budget)
            spent += self._clock() - started
            delay: float | None = None
            if response is not None:
                if response.status_code < 300:
                    return self._decode(url, response, tokens)
                reason, delay = self._failure(url, response)
            if delay is not None:  # the server asked everyone to wait, not only this request
                slept_until = max(slept_until, self.limiter.pause(delay))
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

    def _attempt(self, url: str, payload: dict[str, Any], budget: float
                 ) -> tuple[httpx.Response | None, str]:
        """One attempt, holding a concurrency slot while it is on the wire."""
        if self._slots is not None:
            self._slots.acquire()
        try:
            response = self._client.post(url, json=payload, headers=self._headers(),
                                         timeout=budget)
            response.read()
            return response, ""
        except httpx.TimeoutException:
            return None, f"timed out after {budget:g} s"
        except httpx.TransportError as exc:
            return None, "connection failed: " + self._excerpt(str(exc) or type(exc).__name__)
        finally:
            if self._slots is not None:
                self._slots.release()

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

    def _decode(self, url: str, response: httpx.Response, tokens: int = 0) -> Any:
        try:
            body = json.loads(response.content)
        except (ValueError, UnicodeDecodeError):
            raise BackendError(
                f"POST {url} returned malformed JSON (HTTP {response.status_code}): "
                f"{self._excerpt(response.text, 120)} "
                "(is the base URL an OpenAI-compatible endpoint?)"
            ) from None
        used = _usage_tokens(body)
        with self._lock:
            self.calls += 1
            self.tokens += used or 0
        if used is not None:
            self.limiter.settle(used - tokens)
        return body


def _usage_tokens(body: Any) -> int | None:
    """``usage.total_tokens`` of an answer when it reports one (OpenAI, vLLM)."""
    usage = body.get("usage") if isinstance(body, dict) else None
    total = usage.get("total_tokens") if isinstance(usage, dict) else None
    return total if isinstance(total, int) and total >= 0 else None


def map_ordered(fn: Callable[[T], R], items: Sequence[T], max_concurrency: int,
                on_result: Callable[[int, R], None] | None = None) -> list[R]:
    """``[fn(x) for x in items]`` with at most ``max_concurrency`` calls in flight.

    Results keep the input order; ``on_result(position, result)`` (when given) is called
    from the worker thread as each call ends. When a call fails, calls not yet started are
    cancelled, running ones end, and the first failure (in input order) is raised with the
    results that did arrive attached as ``exc.partial_results`` (``{position: result}``),
    so a caller can keep the answers it paid for.
    """
    if max_concurrency < 1:
        raise ConfigError(f"max_concurrency must be >= 1, got {max_concurrency}")
    items = list(items)
    done: dict[int, R] = {}

    def call(i: int) -> R:
        result = fn(items[i])
        done[i] = result
        if on_result is not None:
            on_result(i, result)
        return result

    if max_concurrency == 1 or len(items) <= 1:
        try:
            return [call(i) for i in range(len(items))]
        except Exception as exc:
            _with_partial(exc, done)
            raise
    pool = ThreadPoolExecutor(max_workers=min(max_concurrency, len(items)),
                              thread_name_prefix="tttembed-http")
    try:
        futures: list[Future[R]] = [pool.submit(call, i) for i in range(len(items))]
        wait(futures, return_when=FIRST_EXCEPTION)
        for f in futures:
            f.cancel()  # no effect on running or finished calls
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    for f in futures:
        failure = None if f.cancelled() else f.exception()
        if isinstance(failure, Exception):
            raise _with_partial(failure, done)
    return [f.result() for f in futures]


def _with_partial(exc: Exception, done: dict[int, Any]) -> Exception:
    """``exc`` with ``partial_results`` set (a copy of the results that arrived)."""
    try:
        exc.partial_results = dict(done)  # type: ignore[attr-defined]
    except AttributeError:  # an exception type with __slots__: nothing to attach
        pass
    return exc
