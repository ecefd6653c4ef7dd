"""The learner's status: one typed record (:class:`LoopState`) that the learner writes to
``DIR/loop.json`` (a row, in a PostgreSQL registry: :mod:`tttembed.loop.coordination`) and
every reader reads back as the same record, and ``GET /v1/loop``'s view of it beside the
registry and the shared store (:func:`loop_status`).

A reader never fails on the learner's file: a missing ``loop.json`` reads as no learner
(None); a torn or foreign one too, and the status names it (``status_error``); a field of
the wrong type reads as its default.

Liveness is not what the file last said: the learner touches ``DIR/loop.heartbeat``
(its pid, host and the time) every :data:`HEARTBEAT_S` seconds from a thread of its own,
so a learner killed with ``kill -9`` (even mid-cycle) reads as not running, and not
learning, once its pid is gone (same host) or its heartbeat is older than
:data:`STALE_S`.

The budget words, once: ``pairs_judged`` (``budget.paid_by_this_loop``) is the judge
pairs this loop paid for (the store's spend account: served pairs, validation, drift and
audit re-scores; read from the store by every reader, so a learner killed between two
status writes is never under-counted); ``budget.rewards_in_ledger`` the judge rewards the store holds, paid now
or earlier (a version's ``pairs.judged`` counts those it learned from).
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Union

from tttembed.core.locks import pid_alive
from tttembed.loop.coordination import Coordination, open_coordination
from tttembed.loop.coordination.base import checked_candidate
from tttembed.loop.store import Store
from tttembed.registry.base import StateRegistry, Survey, Version

#: Seconds between the learner's heartbeats, and the age past which it is not running.
HEARTBEAT_S = 1.0
STALE_S = 15.0


@dataclass
class LoopState:
    """What ``DIR/loop.json`` holds (the learner writes it; every replica reads it).

    ``pairs_judged``: judge pairs this loop paid for (served pairs, validation, drift and
    audit re-scores; the budget's own count, from the store); ``spend``: the same by
    source; ``caches``: the learner's in-memory caches and their sizes; ``clicks``: the
    click feed (clicks read, the propensities with their intervals and interventions, the
    click-rewarded pairs of the last cycle); ``online``: the candidate's interleaving
    test (empty without one)."""

    learning: bool = False
    idle: bool = False
    pending: int = 0
    pairs_judged: int = 0
    drift_pairs: int = 0
    judge_budget: int = 0
    judge_budget_left: int = 0
    spend: dict[str, int] = field(default_factory=dict)
    frozen: bool = False
    reason: str = ""
    frozen_at: float = 0.0
    last_ok_audit: float = 0.0
    audited_at: float = 0.0
    audits: list[dict[str, Any]] = field(default_factory=list)
    cycles: int = 0
    rewards_at_cycle: int = 0
    last_cycle: dict[str, Any] = field(default_factory=dict)
    caches: dict[str, int] = field(default_factory=dict)
    clicks: dict[str, Any] = field(default_factory=dict)
    online: dict[str, Any] = field(default_factory=dict)
    #: what the store and the registry keep (``--retain``, ``--keep-versions``) and the
    #: learner's prunes so far (:class:`tttembed.loop.pruner.Pruner`)
    retention: dict[str, Any] = field(default_factory=dict)
    #: False under ``--judge none`` (clicks and labels only: nothing to audit)
    has_judge: bool = True
    #: ``--click-settle-s`` (-1: the learner reads no clicks, ``--clicks off``)
    click_settle_s: float = -1.0
    pid: int = 0
    host: str = ""
    judge_audited: bool = False
    audit: str = ""
    #: the share of the judge budget all audits together may pay (``--audit-share``)
    audit_share: float = 0.0
    #: what the promotion test lacks to decide (empty: nothing), said once in the log
    promotion_waiting: dict[str, Any] = field(default_factory=dict)
    min_queries: int = 0
    #: where this learner's rewards are (a chain learner's: its --store, or its
    #: --registry's store; a password masked), for ``states list`` of a chain registry
    store: str = ""
    updated: str = ""
    error: str = ""

    @classmethod
    def from_dict(cls, record: Any) -> LoopState:
        """The record of a parsed ``loop.json`` (unknown keys ignored, a value of the
        wrong type replaced by the field's default)."""
        if not isinstance(record, dict):
            return cls()
        defaults = cls()
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name not in record:
                continue
            value, default = record[f.name], getattr(defaults, f.name)
            values[f.name] = _coerce(value, default)
        return cls(**values)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _coerce(value: Any, default: Any) -> Any:
    if isinstance(default, bool):
        return value if isinstance(value, bool) else default
    if isinstance(default, (int, float)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return default
        return type(default)(value)
    return value if isinstance(value, type(default)) else default


#: Where the learner's record is: the registry's coordination, or its folder or URL.
CoordinationRef = Union[str, Path, Coordination]


def _coordination(where: CoordinationRef) -> Coordination:
    """The coordination of a registry's folder (its files only), its URL, or itself."""
    return open_coordination(where) if isinstance(where, (str, Path)) else where


def read_status(where: CoordinationRef) -> LoopState | None:
    """The learner's record, or None when no learner has written one (or it is torn)."""
    return read_status_checked(where)[0]


def read_status_checked(where: CoordinationRef) -> tuple[LoopState | None, str]:
    """The learner's record (None: none, or unreadable) and why it could not be read
    ("" when it could or there is none): a broken record is reported, never read as
    empty."""
    got, error = _coordination(where).read_status()
    return (None if got is None else LoopState.from_dict(got)), error


def beat(where: CoordinationRef) -> None:
    """One heartbeat of the learner (this process): pid, host and time."""
    _coordination(where).beat({"pid": os.getpid(), "host": socket.gethostname(),
                              "time": time.time()})


def alive(where: CoordinationRef, state: LoopState | None) -> tuple[bool, str]:
    """Whether the learner runs, and why not: a fresh heartbeat and, on this host, a live
    pid (a learner from before heartbeats: its pid alone)."""
    hb = _coordination(where).heartbeat()
    if not isinstance(hb, dict):
        if state is None or not state.pid:
            return False, "no learner has run here" if state is None else "no heartbeat"
        if state.host and state.host != socket.gethostname():
            return False, "no heartbeat"
        return (True, "") if pid_alive(state.pid) else (False, f"pid {state.pid} is gone")
    pid, host, at = hb.get("pid"), hb.get("host"), hb.get("time")
    age = time.time() - at if isinstance(at, (int, float)) else float("inf")
    if isinstance(pid, int) and host == socket.gethostname() and not pid_alive(pid):
        return False, f"pid {pid} is gone"
    if age > STALE_S:
        return False, f"no heartbeat for {age:.0f} s"
    return True, ""


def write_status(where: CoordinationRef, state: LoopState, *, sync: bool = True) -> None:
    """Write the record whole (``sync=False``: without fsync, for a write that changes
    only counters: a power failure may lose it, a crash never tears it)."""
    _coordination(where).write_status(state.as_dict(), sync=sync)


def _version_row(v: Version, served: str | None, by_version: dict[str, int],
                 history: list[dict[str, Any]]) -> dict[str, Any]:
    m = v.manifest
    reason = m.get("reason", "")
    last = next((h for h in reversed(history) if h.get("version") == v.name
                 and h.get("action") == "promote"), None)
    if last is not None and last.get("by") != "learner":  # a hand promotion: its own why
        reason = (f"promoted by {last.get('by') or 'user'} at {last.get('at')}"
                  + (f" ({reason})" if reason else ""))
    return {"version": v.name, "created": m.get("created"), "parent": m.get("parent"),
            "promoted": v.promoted, "served": v.name == served,
            "reason": reason, "learner_reason": m.get("reason", ""),
            "evidence": m.get("evidence"),
            "pairs": m.get("pairs", {}), "choice": m.get("choice", {}),
            "queries": m.get("queries"), "queries_served": by_version.get(v.name, 0),
            "promoted_at": v.promoted_at, "promoted_by": v.promoted_by,
            **({"broken": v.broken} if v.broken else {})}


def _candidate(coordination: Coordination, survey: Survey) -> dict[str, Any]:
    """``candidate``: its name (None: none, or a record that is not a version), and
    ``candidate_error``: why not, when there is a reason."""
    try:
        record, why = checked_candidate(coordination, {v.name for v in survey.versions})
    except Exception as exc:  # noqa: BLE001  (a status page shows what it can)
        record, why = None, " ".join(str(exc).split())
    return {"candidate": None if record is None else str(record["version"]),
            **({"candidate_error": why} if why else {})}


def _replicas(coordination: Coordination) -> list[dict[str, Any]]:
    """What each replica reported serving in the last 30 s (a version it refused
    included), never failing."""
    try:
        return coordination.replicas()
    except Exception:  # noqa: BLE001  (a status page shows what it can)
        return []


def clicks_waiting(store: Store | None, settle_s: float) -> dict[str, Any] | None:
    """The searches whose clicks the learner has not read yet (served less than
    ``settle_s`` ago) and when the next settles; None when it reads no clicks."""
    if store is None or settle_s < 0:
        return None
    now = time.time()
    n, oldest = store.unsettled(now - settle_s)
    at = None if oldest is None else oldest + settle_s
    return {"searches": n, "settle_s": settle_s, "next_settles_at": at,
            "next_settles_in_s": None if at is None else round(max(at - now, 0.0), 1)}


def spend_from(store: Store | None, learner: LoopState) -> None:
    """The store's spend account into ``learner`` (not the learner's last write: a
    learner killed between two writes is never under-counted)."""
    if store is not None:
        learner.spend = store.spent()
        learner.pairs_judged = sum(learner.spend.values())
        learner.drift_pairs = learner.spend.get("drift", 0) + learner.spend.get("audit", 0)
        learner.judge_budget_left = max(learner.judge_budget - learner.pairs_judged, 0)


def _audit_budget(learner: LoopState) -> dict[str, Any]:
    """What audits may cost and have cost: ``audit_share`` of the budget, ``audit_cap``
    pairs, ``audit_pairs`` paid for audits so far (drift re-scores and the audit set)."""
    return {"audit_share": learner.audit_share,
            "audit_cap": int(learner.audit_share * learner.judge_budget),
            "audit_pairs": learner.spend.get("audit", 0) + learner.spend.get("drift", 0)}


def _retention(learner: LoopState, store: Store | None) -> dict[str, Any]:
    """What is kept (the learner's ``--retain``, ``--keep-versions``), and the rows
    pruned and forgotten so far by every pruner (the store's tallies)."""
    out: dict[str, Any] = dict(learner.retention)
    if store is not None:
        from tttembed.loop.forget import FORGOTTEN_KIND
        from tttembed.loop.prune import PRUNED_KIND

        out["store_pruned"] = store.tally(PRUNED_KIND)
        out["store_forgotten"] = store.tally(FORGOTTEN_KIND)
    return out


def _budget(learner: LoopState, counts: dict[str, Any]) -> dict[str, Any]:
    """``/v1/loop``'s ``budget``: the spend, the ledger and what is left."""
    return {"paid_by_this_loop": learner.pairs_judged,
            "rewards_in_ledger": int(counts.get("rewards", 0)),
            "judge_budget": learner.judge_budget, "left": learner.judge_budget_left,
            # pairs a kill lost the answer of: the judge was asked them again, not
            # charged again (the spend counts each pair once)
            "reasked_after_kill": int(counts.get("reasked", 0)),
            **_audit_budget(learner)}


def loop_status(registry: StateRegistry, store: Store | None) -> dict[str, Any]:
    """The status JSON (fields named by the closed-loop issue: version, versions,
    learning, idle, pairs_judged, judge_budget_left, feedback_received, frozen, reason).
    A broken registry file is named in ``registry_error``, never a failure."""
    coordination = open_coordination(registry)
    found, status_error = read_status_checked(coordination)
    learner = found or LoopState()
    running, why = alive(coordination, found)
    counts = store.counts() if store is not None else {"by_version": {}}
    spend_from(store, learner)
    survey = registry.survey()
    by_version = dict(counts.get("by_version", {}))
    out = {
        "version": survey.served,
        "versions": [_version_row(v, survey.served, by_version, survey.history)
                     for v in survey.versions],
        "learning": learner.learning and running,
        "idle": learner.idle and not learner.learning and running,
        "pending": learner.pending,
        "pairs_judged": learner.pairs_judged,
        "judge_budget": learner.judge_budget,
        "judge_budget_left": learner.judge_budget_left,
        "budget": _budget(learner, counts),
        "rewards_in_ledger": int(counts.get("rewards", 0)),
        "spend": learner.spend,
        "feedback_received": int(counts.get("feedback", 0)),
        "frozen": learner.frozen,
        "reason": learner.reason,
        "judge_audited": learner.judge_audited, "has_judge": learner.has_judge,
        "audit": learner.audit or None,
        "min_queries": learner.min_queries or None,
        "promotion_waiting": learner.promotion_waiting or None,
        "searches": int(counts.get("searches", 0)),
        "queries_served": by_version,
        "cycles": learner.cycles,
        "last_cycle": learner.last_cycle,
        "audits": learner.audits,
        "caches": learner.caches,
        "learner_clicks": learner.clicks,
        "clicks_waiting": clicks_waiting(store, learner.click_settle_s),
        "propensities": learner.clicks.get("propensities"),
        "online_test": learner.online or None,
        "retention": _retention(learner, store),
        **_candidate(coordination, survey),
        "learner": {"running": running, "pid": learner.pid or None,
                    "updated": learner.updated or None, "error": learner.error,
                    **({"stopped": why} if not running and found is not None else {})},
        "history": survey.history[-20:],
        "replicas": _replicas(coordination),
        "updated": learner.updated or None,
    }
    if status_error:
        out["status_error"] = status_error
    if survey.problems:
        out["registry_error"] = "; ".join(survey.problems)
    return out


def chain_learner(registry: StateRegistry) -> dict[str, Any] | None:
    """What the chain learner (``loop --chain``) last recorded beside its chain
    ``registry``: whether promotions are frozen and why, its cycles, last cycle and last
    audit, the spend; None when none has run there (a record that cannot be read: its
    ``status_error``)."""
    try:
        coordination = open_coordination(registry)
        found, error = read_status_checked(coordination)
        running, why = alive(coordination, found)
    except Exception as exc:  # noqa: BLE001  (a status page shows what it can)
        return {"status_error": " ".join(str(exc).split())}
    if found is None:
        return {"status_error": error} if error else None
    return {"frozen": found.frozen, "reason": found.reason, "cycles": found.cycles,
            "last_cycle": found.last_cycle, "last_audit": found.audits[-1] if found.audits
            else None, "pairs_judged": found.pairs_judged, "spend": found.spend,
            "judge_budget": found.judge_budget, "running": running,
            **({"stopped": why} if not running else {}), "updated": found.updated or None}


__all__ = ["HEARTBEAT_S", "STALE_S", "CoordinationRef", "LoopState", "alive", "beat",
           "chain_learner", "clicks_waiting",
           "loop_status", "read_status", "read_status_checked", "spend_from", "write_status"]
