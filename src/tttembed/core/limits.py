"""How HTTP backends pace and retry: :class:`RetryPolicy` (backoff, Retry-After, total
deadline) and :class:`RateLimiter` (``rpm`` / ``tpm`` pacing and client-wide pauses).
Used by :class:`tttembed.core.http.JSONClient`."""

from __future__ import annotations

import email.utils
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tttembed.core.errors import ConfigError

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


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


def estimate_tokens(texts: Sequence[str]) -> int:
    """A rough token count for ``tpm`` pacing before the server reports usage: 1 token
    per 4 characters (at least 1 per text); corrected from ``usage.total_tokens``."""
    return sum(max(1, len(t) // 4) for t in texts)


class RateLimiter:
    """Paces request starts: at most ``rpm`` per minute, ``tpm`` tokens per minute.

    Starts are spaced evenly (``60 / rpm`` s apart; a request of ``n`` tokens holds the
    next one back by ``60 n / tpm`` s), so no window of 60 s holds more than ``rpm``
    starts; there is no initial burst. :meth:`pause` holds every start back (a 429 with
    ``Retry-After``). Thread-safe; ``clock`` / ``sleep`` are injectable for tests.
    """

    def __init__(self, rpm: float | None = None, tpm: float | None = None, *,
                 clock: Callable[[], float] | None = None,
                 sleep: Callable[[float], None] | None = None) -> None:
        for name, value in (("rpm", rpm), ("tpm", tpm)):
            if value is not None and not float(value) > 0:
                raise ConfigError(f"{name} must be > 0 (or unset for no limit), got {value}")
        self.rpm = None if rpm is None else float(rpm)
        self.tpm = None if tpm is None else float(tpm)
        self._clock = time.monotonic if clock is None else clock
        self._sleep = time.sleep if sleep is None else sleep
        self._lock = threading.Lock()
        self._next_request = float("-inf")
        self._next_tokens = float("-inf")
        self._paused_until = float("-inf")
        self.waited = 0.0  # seconds spent waiting here, all threads together

    def acquire(self, tokens: int = 0, *, slept_until: float = float("-inf")) -> float:
        """Wait for this request's turn; return the seconds waited. ``slept_until``: the
        end of the pause this caller asked for and already slept through (its own
        Retry-After); a pause that ends no later is not waited again."""
        with self._lock:
            now = self._clock()
            pause = self._paused_until if self._paused_until > slept_until else now
            start = max(now, self._next_request, self._next_tokens, pause)
            if self.rpm is not None:
                self._next_request = start + 60.0 / self.rpm
            if self.tpm is not None and tokens > 0:
                self._next_tokens = start + 60.0 * tokens / self.tpm
            wait_s = start - now
            self.waited += wait_s
        if wait_s > 0:
            self._sleep(wait_s)
        return wait_s

    def settle(self, extra_tokens: int) -> None:
        """Correct the token pacing once a server reported the real count."""
        if self.tpm is None or extra_tokens == 0:
            return
        with self._lock:
            self._next_tokens += 60.0 * extra_tokens / self.tpm

    def pause(self, seconds: float) -> float:
        """No request starts within ``seconds`` from now (a server said Retry-After);
        returns the clock time the pause ends (give it to :meth:`acquire` as
        ``slept_until`` once slept through)."""
        with self._lock:
            self._paused_until = max(self._paused_until, self._clock() + max(0.0, seconds))
            return self._paused_until


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
