"""``POST /v1/events``: what users did with served results (clicks, dwell, any other action),
the raw material of click rewards (METHOD.md Part 4).

A body is one event, a list of events, or ``{"events": [...], "impressions": {SEARCH_ID:
[DOC_ID, ...]}}``. An event is either in OpenSearch User Behavior Insights' event schema::

    {"action_name": "click", "query_id": SEARCH_ID, "session_id": "s1", "client_id": "c1",
     "timestamp": "2026-01-02T03:04:05Z",
     "event_attributes": {"object": {"object_id": DOC_ID}, "position": {"ordinal": 2},
                          "dwell_ms": 1200}}

(``query_id`` is the ``search_id`` a search returned; ``event_attributes.dwell_time`` in
seconds is read too), or the short form ``{"search_id", "doc_id", "type": "click" |
"dwell", "dwell_ms", "session_id"?, "timestamp"?}``. Timestamps are ISO 8601 (no zone:
UTC) or epoch numbers (seconds; above 1e11, milliseconds), from 2000-01-01 to a day after
the server's clock (else a 400). An event names its session: ``session_id``, else its
``client_id`` (then its session); an event with neither is a 400.

Actions: ``click`` (and UBI's ``click_through``, stored as ``click``) are clicks; ``dwell``
needs ``dwell_ms``; any other action name (``add_to_cart``, ``purchase``, ...) is stored
under its name and counts as no click. Every event, whatever its action, names a search
and a document.

The impression (what was shown, in order) is the list the server served for that search,
unless the body gives ``impressions`` for it (a client that re-ranks or shows fewer): it
must come with or before the search's first events, and is kept once.

Validation is that of ``/v1/feedback``: the whole body is checked before anything is
stored (malformed: 400; an unknown search id: 404; a document not in that search's
impression, or an impression naming a document the index does not hold: 422; nothing of
that body is kept). Each (search, doc, session, action) is stored once, so a retry stores
nothing twice; events past the per-session caps (``ServeConfig.clicks``, a
:class:`~tttembed.loop.rows.ClickCaps`: the keywords ``max_clicks_per_search``,
``max_clicks_per_query``, ``max_events_per_search``) are dropped and counted. 202 says
``{"object": "events", "received", "stored", "duplicates", "capped", "impressions"}``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from tttembed.loop.rows import CLICK, CTR_WINDOW, ClickCaps, Event, Impression, RankClicks
from tttembed.serve.routes import json_response, read_body
from tttembed.serve.wire import ApiError

if TYPE_CHECKING:
    from tttembed.loop.rows import SearchLog, Store
    from tttembed.serve.service import Service

#: Action names read as a click (UBI's defaults include ``click_through``).
CLICK_NAMES = frozenset({"click", "click_through"})
#: The short form's ``type`` values.
SHORT_TYPES = ("click", "dwell")
DWELL = "dwell"
#: Longest action name kept (UBI's ``maxLength``), and longest id of any kind.
MAX_NAME = 100
MAX_TEXT = 1000
#: Largest position a client may report.
MAX_ORDINAL = 1_000_000
#: Epoch numbers above this are milliseconds (JavaScript's ``Date.now()``).
EPOCH_MS_ABOVE = 1e11
#: Ranks the click-through-by-position status reports.
CTR_RANKS = 10
#: Event times accepted: from 2000-01-01 (UTC) to a day after the server's clock.
EARLIEST_EVENT = 946_684_800.0
FUTURE_SLACK_S = 86_400.0


@dataclass(frozen=True)
class RawEvent:
    """One event as the body gave it, before it is checked against the traffic log."""

    search_id: str
    doc_id: str
    action: str
    session: str = ""
    client: str = ""
    ordinal: int = 0
    dwell_ms: float = 0.0
    at: float = 0.0


def _bad(where: str, what: str) -> ApiError:
    return ApiError(400, f"{where} {what}", code="invalid_events")


def _text(value: Any, where: str, *, required: bool = True) -> str:
    if value is None and not required:
        return ""
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        raise _bad(where, f"must be a non-empty string, got {value!r}")
    text = str(value)
    if len(text) > MAX_TEXT:
        raise _bad(where, f"is longer than {MAX_TEXT} characters")
    return _unicode(text, where)


def _unicode(text: str, where: str) -> str:
    """``text``, refused (400) when it holds a lone surrogate (valid JSON, no UTF-8)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise _bad(where, "holds a lone surrogate (not valid Unicode)") from None
    return text


def _number(value: Any, where: str) -> float:
    number = math.nan
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # an integer past any float
            pass
    if not math.isfinite(number) or number < 0:
        raise _bad(where, f"must be a finite number >= 0, got {str(value)[:40]}")
    return number


def parse_time(value: Any, where: str) -> float:
    """An event time: ISO 8601 (no zone: UTC) or epoch seconds (milliseconds above 1e11);
    None: now."""
    if value is None:
        return time.time()
    if isinstance(value, str):
        try:
            when = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ApiError(400, f"{where} {value!r} is not an ISO 8601 time (write e.g. "
                           "2026-01-02T03:04:05Z) or epoch seconds", param="timestamp",
                           code="invalid_timestamp") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        return _in_window(when.timestamp(), value, where)
    seconds = _number(value, where)
    return _in_window(seconds / 1000.0 if seconds > EPOCH_MS_ABOVE else seconds, value, where)


def _in_window(at: float, value: Any, where: str) -> float:
    """``at``, refused (400) before 2000 or more than a day after the server's clock."""
    if not EARLIEST_EVENT <= at <= time.time() + FUTURE_SLACK_S:
        raise ApiError(400, f"{where} {value!r} is outside 2000-01-01 .. one day after the "
                       "server's clock: send when the event happened (ISO 8601 or epoch "
                       "seconds), or leave it out for now", param="timestamp",
                       code="invalid_timestamp")
    return at


def _part(item: dict[str, Any], name: str) -> dict[str, Any]:
    value = item.get(name)
    return value if isinstance(value, dict) else {}


def _ubi(item: dict[str, Any], where: str) -> RawEvent:
    action = _text(item.get("action_name"), f"{where}.action_name")
    if len(action) > MAX_NAME:
        raise _bad(f"{where}.action_name", f"is longer than {MAX_NAME} characters")
    attrs, obj, pos = _part(item, "event_attributes"), {}, {}
    if attrs:
        obj, pos = _part(attrs, "object"), _part(attrs, "position")
    ordinal = pos.get("ordinal", 0)
    if isinstance(ordinal, bool) or not isinstance(ordinal, int) \
            or not 0 <= ordinal <= MAX_ORDINAL:
        raise _bad(f"{where}.event_attributes.position.ordinal",
                   f"must be an integer in 0..{MAX_ORDINAL}, got {ordinal!r}")
    if "dwell_ms" in attrs:
        dwell = _number(attrs["dwell_ms"], f"{where}.event_attributes.dwell_ms")
    elif "dwell_time" in attrs:
        dwell = 1000.0 * _number(attrs["dwell_time"], f"{where}.event_attributes.dwell_time")
    elif action == DWELL:
        raise _bad(where, "is a dwell without event_attributes.dwell_ms (milliseconds)")
    else:
        dwell = 0.0
    session = item.get("session_id", attrs.get("session_id"))
    return RawEvent(_text(item.get("query_id"), f"{where}.query_id"),
                    _text(obj.get("object_id"), f"{where}.event_attributes.object.object_id"),
                    CLICK if action in CLICK_NAMES else action,
                    _text(session, f"{where}.session_id", required=False),
                    _text(item.get("client_id"), f"{where}.client_id", required=False),
                    ordinal, dwell, parse_time(item.get("timestamp"), f"{where}.timestamp"))


def _short(item: dict[str, Any], where: str) -> RawEvent:
    kind = item.get("type")
    if kind not in SHORT_TYPES:
        raise _bad(f"{where}.type", f"must be one of {', '.join(SHORT_TYPES)}, got {kind!r} "
                   "(other actions: use the UBI form with action_name)")
    if kind == DWELL and "dwell_ms" not in item:
        raise _bad(where, "is a dwell without dwell_ms (milliseconds)")
    dwell = _number(item.get("dwell_ms", 0), f"{where}.dwell_ms")
    return RawEvent(_text(item.get("search_id"), f"{where}.search_id"),
                    _text(item.get("doc_id"), f"{where}.doc_id"), str(kind),
                    _text(item.get("session_id"), f"{where}.session_id", required=False),
                    _text(item.get("client_id"), f"{where}.client_id", required=False),
                    0, dwell, parse_time(item.get("timestamp"), f"{where}.timestamp"))


def parse_event(item: Any, i: int) -> RawEvent:
    """Event ``i`` of a body, UBI or short form (400 when it is neither)."""
    where = f"events[{i}]"
    if not isinstance(item, dict):
        raise _bad(where, "must be an object")
    if "action_name" in item:
        raw = _ubi(item, where)
    elif "type" in item:
        raw = _short(item, where)
    else:
        raise _bad(where, "needs action_name (UBI: query_id, event_attributes.object."
                   "object_id) or type (short form: search_id, doc_id)")
    if not raw.session and not raw.client:  # anonymous events would share one cap
        raise _bad(where, "needs a session_id (or a client_id, then read as its session): "
                   "the click caps count per session")
    return replace(raw, session=raw.session or raw.client)


def parse_body(body: Any, max_inputs: int) -> tuple[list[RawEvent], dict[str, list[str]]]:
    """A body's events and explicit impressions (by search id), checked for shape."""
    shown: Any = {}
    if isinstance(body, dict) and ("events" in body or "impressions" in body):
        items, shown = body.get("events", []), body.get("impressions", {})
    else:
        items = body if isinstance(body, list) else [body]
    if not isinstance(items, list) or not isinstance(shown, dict):
        raise _bad("the body", "must be events, or {\"events\": [...], \"impressions\": "
                   "{search_id: [doc_id, ...]}}")
    if not 0 < len(items) + len(shown) <= max_inputs:
        raise _bad("the body", f"must hold 1 to {max_inputs} events and impressions")
    for sid, ids in shown.items():
        where = f"impressions[{ascii(sid)}]"
        if not isinstance(ids, list) or not ids or not all(
                isinstance(d, str) and d for d in ids) or len(set(ids)) != len(ids):
            raise _bad(where, "must be a non-empty list of distinct doc ids")
        _text(sid, where)
        for d in ids:
            _unicode(d, where)
    return [parse_event(item, i) for i, item in enumerate(items)], shown


class _Checker:
    """Checks a body's events against the traffic log, reading each search once."""

    def __init__(self, store: Store, doc_ids: frozenset[str], shown: dict[str, list[str]],
                 find: Callable[[str], SearchLog | None] | None = None):
        self.store, self.doc_ids = store, doc_ids
        self.find = find or store.get_search
        self.searches: dict[str, SearchLog] = {}
        self.lists: dict[str, tuple[str, ...]] = {}
        self.impressions = [self._impression(sid, ids) for sid, ids in shown.items()]

    def search(self, sid: str, where: str) -> SearchLog:
        if sid not in self.searches:
            logged = self.find(sid)
            if logged is None:
                raise ApiError(404, f"{where} {sid!r} is not a search this loop logged (send "
                               "the search_id a /v1/search result carries)",
                               param="search_id", code="unknown_search_id")
            self.searches[sid] = logged
        return self.searches[sid]

    def _impression(self, sid: str, ids: list[str]) -> Impression:
        self.search(sid, "impressions: search")
        unknown = [d for d in ids if d not in self.doc_ids]
        if unknown:
            raise ApiError(422, f"impressions[{sid!r}] names {unknown[0]!r}, not a document of "
                           "this index", param="impressions", code="unknown_doc_id")
        kept = self.store.get_impression(sid)
        if kept is not None and list(kept.ids) != ids:
            raise ApiError(422, f"impressions[{sid!r}] differs from the impression stored for "
                           "that search (an impression is kept once)", param="impressions",
                           code="impression_conflict")
        if kept is None and self.store.has_events(sid):
            raise ApiError(422, f"impressions[{sid!r}] comes after events of that search were "
                           "stored against the served list (send it with the first events)",
                           param="impressions", code="impression_conflict")
        self.lists[sid] = tuple(ids)
        return Impression(sid, tuple(ids), time.time())

    def event(self, raw: RawEvent, i: int) -> Event:
        logged = self.search(raw.search_id, f"events[{i}]: search")
        if raw.search_id not in self.lists:
            kept = self.store.get_impression(raw.search_id)
            self.lists[raw.search_id] = kept.ids if kept is not None else logged.ids
        shown = self.lists[raw.search_id]
        if raw.doc_id not in shown:
            raise ApiError(422, f"events[{i}]: document {raw.doc_id!r} was not shown for "
                           f"search {raw.search_id!r} (its impression has {len(shown)} "
                           "documents; post impressions for a list you re-ranked)",
                           param="doc_id", code="doc_not_shown")
        return Event(raw.search_id, raw.doc_id, raw.action, raw.session or raw.client,
                     raw.client, logged.task, logged.query, shown.index(raw.doc_id) + 1,
                     raw.ordinal, raw.dwell_ms, raw.at)


def caps_of(svc: Service) -> ClickCaps:
    return svc.config.clicks


async def events_route(svc: Service, request: Request, info: dict[str, Any]) -> Response:
    if svc.store is None:
        raise ApiError(404, "this server keeps no events (start it with --registry DIR)",
                       code="loop_disabled")
    body = await read_body(request, svc.config.limits.max_body_bytes)
    raw, shown = parse_body(body, svc.config.limits.max_inputs)

    def work() -> dict[str, Any]:
        check = _Checker(svc.store, svc.doc_ids, shown, svc.find_search)
        rows = [check.event(r, i) for i, r in enumerate(raw)]
        kept = svc.store.add_events(rows, check.impressions, caps_of(svc))
        return {"object": "events", "received": len(rows), "stored": kept.stored,
                "duplicates": kept.duplicates, "capped": kept.capped,
                "impressions": kept.impressions}

    out = await run_in_threadpool(work)
    info.update(inputs=out["received"], stored=out["stored"], capped=out["capped"])
    return json_response(out, 202)


def click_status(store: Store, k: int = CTR_RANKS) -> dict[str, Any]:
    """The ``clicks`` object of ``GET /v1/loop``: events by action, clicks (all kept),
    and click-through by rank 1..``k`` over the newest ``ctr_window_searches`` searches
    (``ctr`` null where nothing was shown)."""
    by_rank: list[RankClicks] = store.click_counts_by_rank(k, CTR_WINDOW)
    actions = store.event_counts()
    return {"events": sum(actions.values()), "clicks": actions.get(CLICK, 0),
            "actions": actions, "ctr_window_searches": CTR_WINDOW,
            "ctr_by_rank": [{"rank": r.rank, "impressions": r.impressions,
                             "clicks": r.clicks, "ctr": r.ctr} for r in by_rank]}


__all__ = ["CLICK_NAMES", "RawEvent", "click_status", "events_route", "parse_body",
           "parse_event", "parse_time"]
