"""The learner's status: one typed record (:class:`LoopState`) that the learner writes to
``DIR/loop.json`` and every reader reads back as the same record, and ``GET /v1/loop``'s
view of it beside the registry and the shared store (:func:`loop_status`).

A reader never fails on the learner's file: a missing, torn or foreign ``loop.json``
reads as no learner (None); a field of the wrong type reads as its default.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tttembed.core.io import read_json, write_json
from tttembed.loop.store import Store
from tttembed.registry.versions import Registry, Version

STATUS_FILE = "loop.json"


@dataclass
class LoopState:
    """What ``DIR/loop.json`` holds (the learner writes it; every replica reads it).

    ``pairs_judged``: judge pairs this loop paid for (served pairs, validation, drift and
    audit re-scores; the budget's own count, from the store); ``spend``: the same by
    source; ``caches``: the learner's in-memory caches and their sizes."""

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
    pid: int = 0
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


def status_path(registry: str | Path) -> Path:
    return Path(registry) / STATUS_FILE


def read_status(registry: str | Path) -> LoopState | None:
    """The learner's record, or None when no learner has written one (or it is torn)."""
    path = status_path(registry)
    if not path.exists():
        return None
    try:
        got = read_json(path, what="loop status")
    except Exception:  # noqa: BLE001  (a reader never fails on the learner's file)
        return None
    return LoopState.from_dict(got) if isinstance(got, dict) else None


def write_status(registry: str | Path, state: LoopState, *, sync: bool = True) -> None:
    """Write the record whole (``sync=False``: without fsync, for a write that changes
    only counters: a power failure may lose it, a crash never tears it)."""
    write_json(status_path(registry), state.as_dict(), sync=sync)


def _version_row(v: Version, served: str | None, by_version: dict[str, int]) -> dict[str, Any]:
    m = v.manifest
    return {"version": v.name, "created": m.get("created"), "parent": m.get("parent"),
            "promoted": v.promoted, "served": v.name == served,
            "reason": m.get("reason", ""), "evidence": m.get("evidence"),
            "pairs": m.get("pairs", {}), "choice": m.get("choice", {}),
            "queries": m.get("queries"), "queries_served": by_version.get(v.name, 0),
            "promoted_at": v.promoted_at, "promoted_by": v.promoted_by}


def loop_status(registry: Registry, store: Store | None) -> dict[str, Any]:
    """The status JSON (fields named by the closed-loop issue: version, versions,
    learning, idle, pairs_judged, judge_budget_left, feedback_received, frozen, reason)."""
    found = read_status(registry.root)
    learner = found or LoopState()
    counts = store.counts() if store is not None else {"by_version": {}}
    served = registry.served()
    by_version = dict(counts.get("by_version", {}))
    return {
        "version": served,
        "versions": [_version_row(v, served, by_version) for v in registry.versions()],
        "learning": learner.learning,
        "idle": learner.idle and not learner.learning,
        "pending": learner.pending,
        "pairs_judged": learner.pairs_judged,
        "judge_budget": learner.judge_budget,
        "judge_budget_left": learner.judge_budget_left,
        "spend": learner.spend,
        "feedback_received": int(counts.get("feedback", 0)),
        "frozen": learner.frozen,
        "reason": learner.reason,
        "searches": int(counts.get("searches", 0)),
        "queries_served": by_version,
        "cycles": learner.cycles,
        "last_cycle": learner.last_cycle,
        "audits": learner.audits,
        "caches": learner.caches,
        "learner": {"running": found is not None, "pid": learner.pid or None,
                    "updated": learner.updated or None, "error": learner.error},
        "history": registry.served_record().get("history", [])[-20:],
        "updated": learner.updated or None,
    }


__all__ = ["STATUS_FILE", "LoopState", "loop_status", "read_status", "status_path",
           "write_status"]
