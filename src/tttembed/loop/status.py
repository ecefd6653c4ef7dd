"""``GET /v1/loop``: the closed loop's status, as any replica sees it (the registry, the
learner's ``loop.json`` and the shared store)."""

from __future__ import annotations

from typing import Any

from tttembed.loop.run import read_status
from tttembed.loop.store import Store
from tttembed.registry.versions import Registry, Version


def _version_row(v: Version, served: str | None, by_version: dict[str, int]) -> dict[str, Any]:
    m = v.manifest
    return {"version": v.name, "created": m.get("created"), "parent": m.get("parent"),
            "promoted": bool(m.get("promoted")), "served": v.name == served,
            "reason": m.get("reason", ""), "evidence": m.get("evidence"),
            "pairs": m.get("pairs", {}), "choice": m.get("choice", {}),
            "queries": m.get("queries"), "queries_served": by_version.get(v.name, 0),
            "promoted_at": m.get("promoted_at")}


def loop_status(registry: Registry, store: Store | None) -> dict[str, Any]:
    """The status JSON (fields named by the closed-loop issue: version, versions,
    learning, idle, pairs_judged, judge_budget_left, feedback_received, frozen, reason)."""
    learner = read_status(registry.root)
    counts = store.counts() if store is not None else {"by_version": {}}
    served = registry.served()
    by_version = dict(counts.get("by_version", {}))
    return {
        "version": served,
        "versions": [_version_row(v, served, by_version) for v in registry.versions()],
        "learning": bool(learner.get("learning", False)),
        "idle": bool(learner.get("idle", False)) and not learner.get("learning", False),
        "pending": int(learner.get("pending", 0)),
        "pairs_judged": int(learner.get("pairs_judged", 0)),
        "judge_budget": int(learner.get("judge_budget", 0)),
        "judge_budget_left": int(learner.get("judge_budget_left", 0)),
        "feedback_received": int(counts.get("feedback", 0)),
        "frozen": bool(learner.get("frozen", False)),
        "reason": str(learner.get("reason", "")),
        "searches": int(counts.get("searches", 0)),
        "queries_served": by_version,
        "cycles": int(learner.get("cycles", 0)),
        "last_cycle": learner.get("last_cycle", {}),
        "audits": learner.get("audits", []),
        "learner": {"running": bool(learner), "pid": learner.get("pid"),
                    "updated": learner.get("updated"), "error": learner.get("error", "")},
        "history": registry.served_record().get("history", [])[-20:],
        "updated": learner.get("updated"),
    }


__all__ = ["loop_status"]
