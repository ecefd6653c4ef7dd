"""The closed loop's rows and the store's role: what serve replicas and the learner
share (:class:`Store`, implemented in SQL by :mod:`tttembed.loop.store` for SQLite and
:mod:`tttembed.loop.postgres`), the records they pass, and the incremental reads' cursor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

#: Sources of judge spend (``spend.source``): a served pair, a validation pair, a
#: drift re-score, an audit re-score, and what a store held before it kept an account.
SPEND_SOURCES = ("judge", "validation", "drift", "audit", "opening")


@dataclass(frozen=True)
class SearchLog:
    """One served query."""

    search_id: str
    task: str
    query: str
    created: float
    version: str | None
    ids: tuple[str, ...]
    kind: str = "search"
    replica: str = ""


@dataclass(frozen=True)
class Feedback:
    """One explicit label for a served document (``search_id`` "" when given by query)."""

    task: str
    query: str
    doc_id: str
    label: float
    search_id: str = ""
    created: float = 0.0

    @property
    def key(self) -> str:
        return self.search_id or f"q\x1f{self.task}\x1f{self.query}"


@dataclass(frozen=True)
class Reward:
    """One judged pair as the loop sees it."""

    task: str
    query: str
    doc_id: str
    reward: float
    created: float
    source: str = "judge"
    paid: bool = True
    trusted: bool = True


class Store(Protocol):
    """What serve replicas and the learner share (SQLite or PostgreSQL)."""

    url: str

    def log_searches(self, rows: Sequence[SearchLog]) -> None: ...
    def get_search(self, search_id: str) -> SearchLog | None: ...
    def searches(self, since: float = 0.0) -> list[SearchLog]: ...
    def add_feedback(self, rows: Sequence[Feedback]) -> int: ...
    def feedback(self) -> list[Feedback]: ...
    def add_rewards(self, rows: Sequence[Reward]) -> None: ...
    def rewards(self, trusted_only: bool = True) -> list[Reward]: ...
    def distrust(self, since: float) -> int: ...
    def counts(self) -> dict[str, Any]: ...
    def searches_after(self, cursor: Cursor, limit: int = ...) -> list[SearchLog]: ...
    def feedback_after(self, cursor: Cursor, limit: int = ...) -> list[Feedback]: ...
    def rewards_after(self, cursor: Cursor, limit: int = ...) -> list[Reward]: ...
    def reserve(self, source: str, want: int, budget: int, *,
                partial: bool = True) -> int: ...
    def spent(self) -> dict[str, int]: ...
    def open_account(self, paid_before: int) -> None: ...
    def close(self) -> None: ...


#: Where an incremental read resumes: rows strictly after (created, key).
Cursor = tuple[float, str]
START: Cursor = (float("-inf"), "")
#: Rows read per incremental call at most (the caller loops while it gets a full page).
PAGE = 5000


__all__ = ["PAGE", "SPEND_SOURCES", "START", "Cursor", "Feedback", "Reward", "SearchLog",
           "Store"]
