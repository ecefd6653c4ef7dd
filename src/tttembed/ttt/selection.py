"""Method auto's choice per task, as a record (:class:`Selection`, what a mixed
state's ``selection`` holds) and one method's evidence (:class:`MethodGain`);
:mod:`tttembed.ttt.select` makes the choice."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

SHARED = ("global", "task", "adapter")
QUERY_LEVEL = ("query", "rw-rocchio", "qdrant-rf")
#: The part for unseen queries near rewarded ones (kept beside the query part).
NEIGHBOUR = "neighbour"
#: The deployable states method auto chooses from, per task.
METHODS = ("raw", *SHARED, *QUERY_LEVEL, NEIGHBOUR)
#: Bump when the choice changes for the same inputs (eval cells are keyed by it).
SELECT_VERSION = 13


class MethodGain(NamedTuple):
    """One method's evidence in one task: mean Delta against raw, its 95% interval, the
    sign-flip p-value and the queries scored."""

    gain: float
    ci_low: float
    ci_high: float
    p: float
    queries: int

    @classmethod
    def from_dict(cls, e: Mapping[str, float]) -> MethodGain:
        return cls(float(e["gain"]), float(e["ci_low"]), float(e["ci_high"]),
                   float(e.get("p", 1.0)), int(e["queries"]))


@dataclass(frozen=True)
class Selection:
    """Per task the shared and the query part chosen, every method's evidence (mean
    Delta, interval, p, queries), how each was estimated, and the validation pairs."""

    shared: dict[str, str]
    query: dict[str, str]
    evidence: dict[str, dict[str, dict[str, float]]]
    estimators: dict[str, str]
    needed: int
    paid: int
    cap: int
    notes: tuple[str, ...] = ()
    coefficients: dict[str, list[float]] = field(default_factory=dict)
    neighbour: dict[str, str] = field(default_factory=dict)
    #: Per task whose shared part is kept: its alpha, a label of the guard's grid
    #: (``rule`` = n/(n+1), or a shrunk value such as ``0.3``) chosen by the same evidence.
    shared_alpha: dict[str, str] = field(default_factory=dict)
    #: Per task: the alpha of its query-wise vectors (a label of the guard's grid), chosen
    #: out of sample on each rewarded query's held-out judged candidates
    #: (:func:`query_alphas`); ``rule`` (n/(n+1) = 0.5) where that evidence shows none.
    query_alpha: dict[str, str] = field(default_factory=dict)

    def choice(self, task: str) -> str:
        """``task``, ``task+qdrant-rf``, ``adapter+query+neighbour``, ``raw``..."""
        parts = [self.shared.get(task, "raw"), self.query.get(task, "none"),
                 self.neighbour.get(task, "none")]
        return "+".join(p for p in parts if p not in ("raw", "none")) or "raw"

    def as_dict(self) -> dict[str, Any]:
        return {"version": SELECT_VERSION, "methods": list(METHODS),
                "choice": {t: self.choice(t) for t in self.shared},
                "shared": dict(self.shared), "query": dict(self.query),
                "evidence": self.evidence, "estimators": dict(self.estimators),
                "validation_pairs_needed": self.needed, "validation_pairs_paid": self.paid,
                "validation_cap": self.cap, "notes": list(self.notes),
                "qdrant_coefficients": self.coefficients, "neighbour": dict(self.neighbour),
                "shared_alpha": dict(self.shared_alpha), "query_alpha": dict(self.query_alpha)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Selection:
        """A state's ``selection`` record, read back."""
        return cls({str(t): str(m) for t, m in d["shared"].items()},
                   {str(t): str(m) for t, m in d["query"].items()},
                   {t: {m: dict(e) for m, e in per.items()} for t, per in d["evidence"].items()},
                   dict(d.get("estimators", {})), int(d.get("validation_pairs_needed", 0)),
                   int(d.get("validation_pairs_paid", 0)), int(d.get("validation_cap", 0)),
                   tuple(d.get("notes", ())), dict(d.get("qdrant_coefficients", {})),
                   {str(t): str(m) for t, m in d.get("neighbour", {}).items()},
                   {str(t): str(a) for t, a in d.get("shared_alpha", {}).items()},
                   {str(t): str(a) for t, a in d.get("query_alpha", {}).items()})

    def gains(self, task: str) -> dict[str, MethodGain]:
        """Every method's evidence in ``task``."""
        return {m: MethodGain.from_dict(e) for m, e in self.evidence.get(task, {}).items()}


__all__ = ["METHODS", "NEIGHBOUR", "QUERY_LEVEL", "SELECT_VERSION", "SHARED",
           "MethodGain", "Selection"]
