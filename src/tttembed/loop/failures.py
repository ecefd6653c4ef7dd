"""The learner's log: one line each, with the time, on stderr; a failing step logged once
per kind of failure with its backoff (:class:`Failures`), never a traceback for a user's
error; the warning of a judge nobody audits (:data:`UNAUDITED`)."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger("tttembed.loop")
T = TypeVar("T")

#: The warning of a loop started without ``--audit``.
UNAUDITED = ("the judge is not audited (no --audit qrels:PATH): nothing checks its rewards "
             "against people's judgments, so a wrong judge can promote worse versions; "
             "/v1/loop says judge_audited: false")
#: Longest wait between failing steps (seconds).
MAX_BACKOFF_S = 60.0


class Failures:
    """Failing steps, one log line per kind (exception type and message) with the time
    (the log's) and the backoff: the wait doubles while steps keep failing, up to
    :data:`MAX_BACKOFF_S`; a user's error (TTTEmbedError) is one line, never a traceback."""

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}
        self.streak = 0

    def ok(self) -> None:
        self.streak = 0

    def failed(self, exc: Exception, poll_s: float) -> float:
        from tttembed.core.errors import TTTEmbedError

        self.streak += 1
        wait = min(max(poll_s, 0.5) * 2 ** min(self.streak - 1, 16), MAX_BACKOFF_S)
        kind = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        n = self.seen.get(kind, 0) + 1
        self.seen[kind] = n
        if n == 1:
            log.error("loop step failed (%s); retrying in %.1f s, backing off to %.0f s "
                      "while it fails", kind, wait, MAX_BACKOFF_S,
                      exc_info=None if isinstance(exc, TTTEmbedError) else exc)
        elif n & (n - 1) == 0:  # 2, 4, 8, ...: a line now and then, not every step
            log.error("loop step failed again (%s; %d times); retrying in %.1f s", kind, n,
                      wait)
        return wait


class OncePerKind:
    """A recurring failure (``what``: its log line's start) logged once per kind
    (exception type and message) until :meth:`ok` says it stopped: a database restart
    is a few lines, not one a second."""

    def __init__(self, what: str) -> None:
        self.what, self.said = what, set[str]()

    def failed(self, exc: BaseException) -> None:
        kind = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        if kind not in self.said:
            self.said.add(kind)
            log.warning("%s: %s (said once until it works again)", self.what, exc)

    def ok(self) -> None:
        if self.said:
            log.info("%s: the failure has stopped", self.what)
            self.said.clear()


def through_outage(call: Callable[[], T], what: str) -> T:
    """``call()``, called again while the store is unavailable (``StoreUnavailable``: the
    database restarting, or a connection it closed meanwhile, which the next call opens
    anew; nothing of a failed call was kept), waiting 0.5 s doubling to
    :data:`MAX_BACKOFF_S`, a line per kind of failure: for the learner's start-up, whose
    steps are not yet retried by the loop."""
    from tttembed.core.errors import StoreUnavailable

    said, wait = OncePerKind(what), 0.5
    while True:
        try:
            got = call()
        except StoreUnavailable as exc:
            said.failed(exc)
            time.sleep(wait)
            wait = min(wait * 2, MAX_BACKOFF_S)
            continue
        said.ok()
        return got


def configure_log() -> None:
    """The learner's log: one line each, with the time, on stderr."""
    logger = logging.getLogger("tttembed.loop")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


__all__ = ["MAX_BACKOFF_S", "UNAUDITED", "Failures", "OncePerKind", "configure_log",
           "through_outage"]
