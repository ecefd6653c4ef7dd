"""The closed loop's rows and the store's role: what serve replicas and the learner
share (:class:`Store`, implemented in SQL by :mod:`tttembed.loop.store` for SQLite and
:mod:`tttembed.loop.postgres`), the records they pass, and the incremental reads' cursor.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tttembed.core.serial import text_hash
from tttembed.types import Triple

#: Sources of judge spend (``spend.source``): a served pair, a validation pair, a
#: drift re-score, an audit re-score, and what a store held before it kept an account.
SPEND_SOURCES = ("judge", "validation", "drift", "audit", "opening")
#: A cap within the budget on some sources together: (pairs, sources), e.g. the audits'.
Share = tuple[int, tuple[str, ...]]
#: The task and kind chain searches (``POST /v1/chain/search``) are logged under. No
#: single-search task has this name (a task name holds no '/'), and the state learner
#: skips it: its judge, click rewards and labels serve the single-search states only.
CHAIN_TASK = "/chain"
CHAIN_KIND = "chain"


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
    #: how the served list was changed on purpose, "" when it was not: ``randpair:R``
    #: (ranks R and R+1, 1-based, swapped by ``--explore``) or ``interleave:V:TEAMS``
    #: (:class:`tttembed.loop.clicks.intervention.Intervention` writes and reads both);
    #: stored in ``interventions``
    intervention: str = ""
    #: who asked (``/v1/search``'s ``session_id`` and ``client_id``; "" when not given):
    #: what ``tttembed store forget`` finds a user's searches by
    session: str = ""
    client: str = ""


@dataclass(frozen=True, slots=True)
class Shown:
    """Document ``doc_id`` shown at 1-based ``rank`` for ``query`` (of ``task``) in search
    ``search_id``, served by ranker ``ranker`` (the registry version, "raw", or an
    interleaving's team: "A"/"B"); ``clicked`` whether the session clicked it; ``explored``
    whether the list was randomised (RandPair swap) or interleaved, so its ranks are an
    intervention; ``dwell_ms`` the longest dwell reported (0 when none); ``test`` the
    candidate version an interleaved search tested ("" otherwise; ``ranker`` is then the
    team, "A" served or "B" candidate, that contributed the document)."""

    search_id: str
    task: str
    query: str
    doc_id: str
    rank: int
    clicked: bool
    ranker: str = ""
    session: str = ""
    explored: bool = False
    dwell_ms: float = 0.0
    created: float = 0.0
    test: str = ""


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
        """Its identity: the search id, else the task and the query text's digest (never
        the text itself: a store indexes this key)."""
        return self.search_id or f"q\x1f{self.task}\x1f#{query_hash(self.query)}"


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


@dataclass(frozen=True)
class Claimed:
    """What one reservation claimed (:meth:`tttembed.loop.spend.SpendSQL.claim`): the
    pairs it may pay (``mine``), those another live reservation holds (``taken``:
    skipped this time) and those the ledger holds by now (``held``: free to read)."""

    mine: list[Triple]
    taken: list[Triple]
    held: list[Triple]


@dataclass(frozen=True)
class ClickReward:
    """One (task, query text, doc)'s click reward as a learning cycle estimated it (the
    ``click_rewards`` table, ``source`` "clicks"): ``reward`` in [0, 1] (the doubly robust
    estimate where ``judge``, the judge's reward the clicks corrected, is not None; else
    the clipped inverse-propensity rate shrunk toward the task's mean), from ``clicks`` in
    ``impressions`` (``exposure`` = Σ max(θ_rank, clip)); ``raw`` the unshrunk rate and
    ``variance`` its variance; ``mode`` ``ips`` or ``naive``; ``basis`` the propensities'
    method (``harvest``, ``em``, ``none``: θ = 1) resting on ``interventions`` (query, doc)
    pairs seen at two ranks; ``created`` the cycle's time; ``trusted`` as for judge
    rewards (False while promotions are frozen, or after a drift audit distrusted it)."""

    task: str
    query: str
    doc_id: str
    reward: float
    clicks: int
    impressions: int
    exposure: float = 0.0
    variance: float = 0.0
    raw: float = 0.0
    mode: str = "ips"
    basis: str = "none"
    interventions: int = 0
    judge: float | None = None
    created: float = 0.0
    trusted: bool = True
    source: str = "clicks"


@dataclass(frozen=True)
class Event:
    """One user action on a served document: ``action`` ``click``, ``dwell`` or any other
    name a client sends (``add_to_cart``, ...; only ``click`` counts as a click), by
    ``session`` (the client's session id, else its client id, else ""), on ``doc_id`` at
    1-based ``rank`` of the search's impression; ``ordinal`` the position the client
    reported (0: none); ``at`` the client's time of the event, ``created`` when the
    server stored it (incremental reads go by ``created``: a client's clock never hides
    an event from them)."""

    search_id: str
    doc_id: str
    action: str
    session: str = ""
    client: str = ""
    task: str = ""
    query: str = ""
    rank: int = 0
    ordinal: int = 0
    dwell_ms: float = 0.0
    at: float = 0.0
    created: float = 0.0

    @property
    def key(self) -> str:
        """The row's identity: one event per (search, doc, session, action)."""
        return "\x1e".join((self.search_id, self.doc_id, self.session, self.action))


@dataclass(frozen=True)
class Impression:
    """What a client showed for a search, in order, when it is not the served list (it
    re-ranked, or showed fewer)."""

    search_id: str
    ids: tuple[str, ...]
    created: float = 0.0


@dataclass(frozen=True)
class ClickCaps:
    """Per-session limits on stored events, so one client cannot flood a query: clicks per
    (search, session), clicks per (task, query text, session) across searches (named
    sessions only: anonymous events are capped per search), and events of any action
    per (search, session). Events past a cap are dropped (counted as ``capped``)."""

    per_search: int = 5
    per_query: int = 20
    events_per_search: int = 100


@dataclass(frozen=True)
class EventsStored:
    """What one :meth:`Store.add_events` call kept: ``stored`` new events, ``duplicates``
    (already stored: a retry), ``capped`` (past a :class:`ClickCaps` limit), and
    ``impressions`` new explicit impressions."""

    stored: int = 0
    duplicates: int = 0
    capped: int = 0
    impressions: int = 0


@dataclass(frozen=True)
class RankClicks:
    """Clicks and impressions at one 1-based rank (every searched list counts as an
    impression at each of its ranks once per session that acted on it, once when none
    did; its explicit impression replaces it)."""

    rank: int
    impressions: int
    clicks: int

    @property
    def ctr(self) -> float | None:
        return self.clicks / self.impressions if self.impressions else None


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
    def add_click_rewards(self, rows: Sequence[ClickReward]) -> int: ...
    def click_rewards(self, trusted: bool | None = None) -> list[ClickReward]: ...
    def click_reward_counts(self) -> dict[str, int]: ...
    def counts(self) -> dict[str, Any]: ...
    def searches_after(self, cursor: Cursor, limit: int = ...) -> list[SearchLog]: ...
    def feedback_after(self, cursor: Cursor, limit: int = ...) -> list[Feedback]: ...
    def rewards_after(self, cursor: Cursor, limit: int = ...) -> list[Reward]: ...
    def reserve(self, source: str, want: int, budget: int, *,
                partial: bool = True, share: Share | None = None,
                pairs: Sequence[Triple] = ...) -> int: ...
    def claim(self, source: str, budget: int, pairs: Sequence[Triple], keys: Sequence[str],
              *, prepaid: Collection[Triple] = ...,
              new: Callable[[list[Triple]], list[bool]] | None = ...) -> Claimed | None: ...
    def unclaim(self, pairs: Sequence[Triple]) -> None: ...
    def release(self, source: str, pairs: int) -> None: ...
    def mark_sent(self, pairs: Sequence[Triple]) -> None: ...
    def settle(self, pairs: Sequence[Triple]) -> None: ...
    def prepaid(self, pairs: Sequence[Triple]) -> set[Triple]: ...
    def recover(self, held: Callable[[Triple], bool]) -> dict[str, int]: ...
    def spent(self) -> dict[str, int]: ...
    def open_account(self, paid_before: int) -> None: ...
    def add_events(self, rows: Sequence[Event], impressions: Sequence[Impression] = ...,
                   caps: ClickCaps = ...) -> EventsStored: ...
    def get_impression(self, search_id: str) -> Impression | None: ...
    def has_events(self, search_id: str) -> bool: ...
    def events_after(self, cursor: Cursor, limit: int = ...) -> list[Event]: ...
    def shown_after(self, cursor: Cursor, limit: int = ...,
                    before: float | None = ...) -> list[Shown]: ...
    def click_counts_by_rank(self, k: int = ..., window: int = ...) -> list[RankClicks]: ...
    def event_counts(self) -> dict[str, int]: ...
    def unsettled(self, after: float) -> tuple[int, float | None]: ...
    def prune(self, cutoff: float, *, batch: int = ..., dry_run: bool = ...,
              max_batches: int | None = ...) -> Any: ...
    def pruned(self) -> dict[str, int]: ...
    def tally(self, kind: str) -> dict[str, int]: ...
    def stats(self, now: float | None = ...) -> Any: ...
    def forget(self, *, session: str | None = ..., client: str | None = ...,
               dry_run: bool = ...) -> Any: ...
    def forgotten_after(self, cursor: Cursor, limit: int = ...) -> list[Any]: ...
    def close(self) -> None: ...


#: Where an incremental read resumes: rows strictly after (created, key).
Cursor = tuple[float, str]
START: Cursor = (float("-inf"), "")


def query_hash(text: str) -> str:
    """What the store keys a query by (never its text, which can be longer than an index
    row allows): :func:`~tttembed.core.serial.text_hash` of the text as stored (NUL as
    U+FFFD, as PostgreSQL holds it, so both backends and a migrated row agree)."""
    return text_hash(text.replace("\x00", "\ufffd") if "\x00" in text else text)


def cursor_floor(cursor: Cursor) -> float:
    """The cursor's time as SQL can compare it (-inf: before everything)."""
    return cursor[0] if cursor[0] != float("-inf") else -1e300

#: Rows read per incremental call at most (the caller loops while it gets a full page).
PAGE = 5000
#: Seconds after a search before its clicks are read as settled (``shown_after``'s
#: ``before = now - CLICK_SETTLE_S``); later events are still in ``events_after``.
CLICK_SETTLE_S = 300.0
#: The action that counts as a click (UBI's ``click_through`` is read as one too).
CLICK = "click"
#: The newest searches click-through by rank is read over (``GET /v1/loop``): a status
#: read that costs the same however much traffic the store keeps.
CTR_WINDOW = 10_000


__all__ = ["CLICK", "CLICK_SETTLE_S", "CTR_WINDOW", "PAGE", "SPEND_SOURCES", "START", "Claimed",
           "ClickCaps", "Share", "ClickReward", "Cursor",
           "Event", "EventsStored", "Feedback", "Impression", "RankClicks", "Reward",
           "SearchLog", "Shown", "Store", "cursor_floor", "query_hash"]
